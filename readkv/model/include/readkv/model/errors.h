// Typed errors of the model runtime. Loading a model, its config or its calibration throws these;
// the DecodeModel hot path throws std::invalid_argument (the engine's contract) for bad requests.
#pragma once

#include <stdexcept>
#include <string>

namespace readkv::model {

// A model file is malformed or does not match the config. `what_failed()` names the offending
// part: a config field ("hidden_size"), a tensor ("model.layers.0.self_attn.q_proj.weight") or a
// region of the safetensors file ("header").
class ModelFormatError : public std::runtime_error {
 public:
  ModelFormatError(std::string name, const std::string& what)
      : std::runtime_error(name + ": " + what), name_(std::move(name)) {}
  const std::string& what_failed() const { return name_; }

 private:
  std::string name_;
};

}  // namespace readkv::model
