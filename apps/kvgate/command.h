// How a subcommand joins a binary (kvgate or kvgate-serve; both share this registry). Each
// *_command.cc defines a function that adds its CLI11 subcommand(s) and registers it with a static
// KVGATE_REGISTER_COMMAND; RunCommands adds them in `order`. A subcommand's callback stores its
// exit status in the context.
//
// Exit statuses: 0 success; 2 bad arguments (a message names the argument); other values are the
// subcommand's own contract (kvgate run: 0 GO, 1 NO-GO, 2 INCONCLUSIVE, 3 could not run).
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

namespace kvgate {

struct CommandContext {
  int exit_code = 0;
};

// A usage error found after parsing (e.g. an inconsistent combination of flags). main() prints
// the message and exits 2.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

using CommandAdder = void (*)(CLI::App& app, CommandContext& context);

// Registers an adder at static-initialisation time; returns a dummy for the static variable.
bool RegisterCommand(int order, CommandAdder adder);

// A binary's whole command line: adds every registered subcommand to one CLI11 app described by
// `description`, parses argv, runs the chosen command and returns the exit status. What escapes
// a command becomes a status here: a parse error, codec::InvalidArgument or UsageError 2 (the
// message names the argument), any other exception 3.
int RunCommands(int argc, char** argv, const std::string& description,
                const std::string& version_text);

}  // namespace kvgate

#define KVGATE_CONCAT_INNER(a, b) a##b
#define KVGATE_CONCAT(a, b) KVGATE_CONCAT_INNER(a, b)
#define KVGATE_REGISTER_COMMAND(order, adder) \
  static const bool KVGATE_CONCAT(kvgate_registered_, __LINE__) = ::kvgate::RegisterCommand(order, adder)
