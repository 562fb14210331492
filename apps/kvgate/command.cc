// The subcommand registry both binaries share, and the one place a command's failure becomes an
// exit status (command.h). Each binary's main() names itself and calls RunCommands.
#include "kvgate/command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <utility>
#include <vector>

#include "readkv/codec/errors.h"

namespace kvgate {
namespace {

std::vector<std::pair<int, CommandAdder>>& Registry() {
  static std::vector<std::pair<int, CommandAdder>> registry;
  return registry;
}

}  // namespace

bool RegisterCommand(int order, CommandAdder adder) {
  Registry().emplace_back(order, adder);
  return true;
}

int RunCommands(int argc, char** argv, const std::string& description,
                const std::string& version_text) {
  CLI::App app{description};
  app.set_version_flag("--version", version_text);
  app.require_subcommand(1);
  CommandContext context;
  auto& registry = Registry();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& entry : registry) entry.second(app, context);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and version are "errors" with exit code 0 in CLI11.
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const readkv::codec::InvalidArgument& e) {
    std::cerr << "error: invalid argument " << e.what() << "\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 3;
  }
  return context.exit_code;
}

}  // namespace kvgate
