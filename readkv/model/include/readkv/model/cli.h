// Command-line surface of the model runtime, shared by `kvgate` (train, calibrate) and the
// standalone `readkv_model_tool` (train, calibrate, eval, generate), so both parse the same flags.
// Usage errors throw codec::InvalidArgument naming the flag (kvgate maps them to exit 2).
#pragma once

#include <memory>
#include <string>

#include "readkv/model/runtime.h"

namespace CLI {
class App;
}  // namespace CLI

namespace readkv::model {

// The KV-backend and device flags of a subcommand: --kv, --store-bits, --read-bits, --reader,
// --kv-split RK:RV, --fp8-scale tensor|head, --prefill dense|cache, --device, --dtype, --threads,
// --calibration, --cache-dir, --cache-max-bytes (the persistent prefix cache, runtime.h). Bound to this object, so it must outlive parsing (make it with make_shared).
class RuntimeFlags {
 public:
  explicit RuntimeFlags(CLI::App& command);
  RuntimeFlags(const RuntimeFlags&) = delete;
  RuntimeFlags& operator=(const RuntimeFlags&) = delete;
  // The parsed options, validated (throws codec::InvalidArgument / std::invalid_argument).
  RuntimeOptions Resolve() const;

 private:
  RuntimeOptions options_;
  std::string kv_split_;
  std::string fp8_scale_ = "tensor";
  std::string prefill_ = "dense";
};

// "3:5" -> (3, 5); throws codec::InvalidArgument("kv_split").
std::pair<double, double> ParseKvSplit(const std::string& text);

void AddTrainCommand(CLI::App& app, int& exit_code);
void AddCalibrateCommand(CLI::App& app, int& exit_code);
void AddEvalCommand(CLI::App& app, int& exit_code);
void AddGenerateCommand(CLI::App& app, int& exit_code);

}  // namespace readkv::model
