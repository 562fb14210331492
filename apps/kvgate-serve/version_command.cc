// `kvgate-serve version [--json]`: version, commit and CUDA devices in a form scripts can read.
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "kvgate/command.h"
#include "kvgate/version.h"
#include "readkv/cuda/device.h"

namespace kvgate {
namespace {

void AddVersionCommand(CLI::App& app, CommandContext& context) {
  auto* cmd = app.add_subcommand("version", "Print version, git commit and CUDA devices");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json, &context] {
    readkv::cuda::DeviceReport cuda = readkv::cuda::QueryDevices();
    nlohmann::json out = {{"version", kVersion},
                          {"git_commit", kGitCommit},
                          {"cuda_compiled", cuda.compiled_with_cuda},
                          {"cuda_devices", cuda.device_count},
                          {"cuda_device", cuda.first_device},
                          {"cuda_reason", cuda.reason}};
    if (*json) {
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << "kvgate-serve " << kVersion << " (commit " << kGitCommit << ")\n";
    }
    context.exit_code = 0;
  });
}

KVGATE_REGISTER_COMMAND(900, AddVersionCommand);

}  // namespace
}  // namespace kvgate
