// `kvgate version [--json]`: version, commit and where kvgate-serve is, in a form scripts can
// read. kvgate links no CUDA: `kvgate-serve version --json` reports the devices.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>
#include <memory>

#include "kvgate/command.h"
#include "kvgate/serve_binary.h"
#include "kvgate/version.h"

namespace kvgate {
namespace {

void AddVersionCommand(CLI::App& app, CommandContext& context) {
  auto* cmd = app.add_subcommand("version", "Print version, git commit and kvgate-serve's path");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json, &context] {
    const std::string serve = ServeBinaryPath();
    const bool have_serve = std::filesystem::exists(serve);
    if (*json) {
      nlohmann::json out = {{"version", kVersion},
                            {"git_commit", kGitCommit},
                            {"serve_binary", have_serve ? nlohmann::json(serve) : nlohmann::json()}};
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << "kvgate " << kVersion << " (commit " << kGitCommit << ")\n"
                << "kvgate-serve: " << (have_serve ? serve : "not built (" + serve + ")") << "\n";
    }
    context.exit_code = 0;
  });
}

KVGATE_REGISTER_COMMAND(900, AddVersionCommand);

}  // namespace
}  // namespace kvgate
