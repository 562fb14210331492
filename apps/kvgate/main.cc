// kvgate: the go/no-go acceptance suite for KV-cache compression, without libtorch or CUDA. The
// reference server's commands (serve, train, calibrate, bench) are handed to kvgate-serve beside
// this executable (serve_binary.h); everything else is a registered *_command.cc.
#include <string>

#include "kvgate/command.h"
#include "kvgate/serve_binary.h"
#include "kvgate/version.h"

int main(int argc, char** argv) {
  using namespace kvgate;
  if (argc > 1 && IsServeCommand(argv[1])) return ExecServe(argc, argv);
  return RunCommands(argc, argv,
                     "kvgate: go/no-go acceptance suite for KV-cache compression (ReadKV vs FP8)",
                     std::string("kvgate ") + kVersion + " (commit " + kGitCommit + ")");
}
