// kvgate: the go/no-go acceptance suite for KV-cache compression. This file only assembles the
// subcommands registered by the *_command.cc files and maps failures to exit statuses.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "kvgate/command.h"
#include "kvgate/version.h"
#include "readkv/codec/errors.h"
#include "readkv/cuda/device.h"

namespace kvgate {
namespace {

std::vector<std::pair<int, CommandAdder>>& Registry() {
  static std::vector<std::pair<int, CommandAdder>> registry;
  return registry;
}

std::string VersionText() {
  readkv::cuda::DeviceReport cuda = readkv::cuda::QueryDevices();
  std::string text = std::string("kvgate ") + kVersion + " (commit " + kGitCommit + ")\ncuda: ";
  if (!cuda.compiled_with_cuda) return text + "not compiled";
  text += "compiled; ";
  text += cuda.device_count > 0 ? std::to_string(cuda.device_count) + " device(s), " + cuda.first_device
                                : "no device (" + cuda.reason + ")";
  return text;
}

}  // namespace

bool RegisterCommand(int order, CommandAdder adder) {
  Registry().emplace_back(order, adder);
  return true;
}

}  // namespace kvgate

int main(int argc, char** argv) {
  using namespace kvgate;
  CLI::App app{"kvgate: go/no-go acceptance suite for KV-cache compression (ReadKV vs FP8)"};
  app.set_version_flag("--version", VersionText());
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
