// `kvgate train`: trains the built-in byte-level recall model (readkv/model/training.h).
#include "kvgate/command.h"
#include "readkv/model/cli.h"

namespace kvgate {
namespace {

void AddTrainCommand(CLI::App& app, CommandContext& context) {
  readkv::model::AddTrainCommand(app, context.exit_code);
}

KVGATE_REGISTER_COMMAND(700, AddTrainCommand);

}  // namespace
}  // namespace kvgate
