// Finding and executing kvgate-serve (serve_binary.h), and the stand-ins that keep its commands
// in `kvgate --help`.
#include "kvgate/serve_binary.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <vector>

#include "kvgate/command.h"

namespace kvgate {
namespace {

struct ServeCommand {
  const char* name;
  const char* summary;
  int order;  // where `kvgate --help` lists it
};

// What kvgate-serve answers (apps/kvgate-serve/); the summaries are its own, shortened.
constexpr ServeCommand kServeCommands[] = {
    {"serve", "Serve a model over an OpenAI-compatible HTTP API (dense, fp8 or readkv KV cache)",
     100},
    {"train", "Train the built-in byte-level recall model", 700},
    {"calibrate", "Measure a model's FP8 scales and ReadKV mu/sigma (calibration.json)", 710},
    {"bench", "Benchmarks: the decode-attention kernels (CUDA) and the runtime's decode step",
     800},
};

template <int kIndex>
void AddServeStandIn(CLI::App& app, CommandContext&) {
  const ServeCommand& c = kServeCommands[kIndex];
  // Never parsed: main() hands these to kvgate-serve before CLI11 sees the command line.
  app.add_subcommand(c.name, std::string(c.summary) + " [runs kvgate-serve]")
      ->allow_extras()
      ->set_help_flag();
}

KVGATE_REGISTER_COMMAND(kServeCommands[0].order, AddServeStandIn<0>);
KVGATE_REGISTER_COMMAND(kServeCommands[1].order, AddServeStandIn<1>);
KVGATE_REGISTER_COMMAND(kServeCommands[2].order, AddServeStandIn<2>);
KVGATE_REGISTER_COMMAND(kServeCommands[3].order, AddServeStandIn<3>);

}  // namespace

std::string SelfPath() {
  std::error_code error;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("kvgate") : self.string();
}

std::string ServeBinaryPath() {
  return (std::filesystem::path(SelfPath()).parent_path() / "kvgate-serve").string();
}

std::string MissingServeMessage(std::string_view command, const std::string& path) {
  return "kvgate " + std::string(command) + " needs kvgate-serve (the reference server, which " +
         "links libtorch), and it is not at " + path +
         "; build it beside kvgate with `cmake --build build --target kvgate-serve` (libtorch " +
         "must be found; -DKVGATE_WITH_SERVER=ON)";
}

bool IsServeCommand(std::string_view command) {
  for (const auto& c : kServeCommands) {
    if (command == c.name) return true;
  }
  return false;
}

int ExecServe(int argc, char** argv) {
  const std::string path = ServeBinaryPath();
  std::vector<char*> args;
  args.push_back(const_cast<char*>(path.c_str()));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  std::cout.flush();
  ::execv(path.c_str(), args.data());
  const int error = errno;
  const std::string_view command = argc > 1 ? argv[1] : "";
  if (error == ENOENT || error == ENOTDIR) {
    std::cerr << "error: " << MissingServeMessage(command, path) << "\n";
  } else {
    std::cerr << "error: kvgate " << command << ": cannot execute " << path << ": "
              << std::strerror(error) << "\n";
  }
  return 3;
}

}  // namespace kvgate
