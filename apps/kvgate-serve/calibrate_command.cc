// `kvgate calibrate`: measures a model's FP8 scales and ReadKV mu/sigma and writes
// calibration.json beside it (readkv/model/model_calibration.h).
#include "kvgate/command.h"
#include "readkv/model/cli.h"

namespace kvgate {
namespace {

void AddCalibrateCommand(CLI::App& app, CommandContext& context) {
  readkv::model::AddCalibrateCommand(app, context.exit_code);
}

KVGATE_REGISTER_COMMAND(710, AddCalibrateCommand);

}  // namespace
}  // namespace kvgate
