// kvgate-serve: the reference ReadKV server and its tools (serve, train, calibrate, bench), the
// half of kvgate that links libtorch and CUDA. kvgate runs it for those commands
// (apps/kvgate/serve_binary.h); it can also be run by itself.
#include <string>

#include "kvgate/command.h"
#include "kvgate/version.h"
#include "readkv/cuda/device.h"

namespace {

std::string VersionText() {
  using namespace kvgate;
  readkv::cuda::DeviceReport cuda = readkv::cuda::QueryDevices();
  std::string text =
      std::string("kvgate-serve ") + kVersion + " (commit " + kGitCommit + ")\ncuda: ";
  if (!cuda.compiled_with_cuda) return text + "not compiled";
  text += "compiled; ";
  text += cuda.device_count > 0 ? std::to_string(cuda.device_count) + " device(s), " + cuda.first_device
                                : "no device (" + cuda.reason + ")";
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  return kvgate::RunCommands(
      argc, argv, "kvgate-serve: the reference ReadKV server, its model tools and benchmarks",
      VersionText());
}
