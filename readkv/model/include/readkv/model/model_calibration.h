// The calibration of a model's KV cache (spec/readkv.md: FP8 amax scales and ReadKV mu/sigma),
// measured once on a seeded calibration set and stored as `calibration.json` beside the model,
// bound to the model by its weights digest and identity. Plain data; immutable after load.
#pragma once

#include <cstdint>
#include <string>

#include "readkv/codec/calibration.h"

namespace readkv::model {

struct ModelCalibration {
  std::string model_id;
  std::string weights_digest;  // codec::ContentDigest of model.safetensors
  int layers = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  double rope_theta = 0.0;
  uint64_t seed = 0;     // of the calibration set
  int samples = 0;       // documents in it
  int64_t tokens = 0;    // tokens observed (per layer and KV head)
  codec::Calibration calibration;

  // Canonical JSON; Parse throws ModelFormatError naming the field.
  std::string ToJson() const;
  static ModelCalibration Parse(const std::string& text);
  static ModelCalibration Load(const std::string& path);
};

struct CalibrateOptions {
  std::string model_dir;
  int samples = 16;                 // documents of the training mix
  int max_bytes = 4096;             // per document
  uint64_t seed = 0xca11b2a7e5eedULL;  // distinct from training and evaluation seeds
  std::string output_path;          // default <model_dir>/calibration.json
  int threads = 0;
};

// Runs the model (dense cache, CPU) over the calibration set, feeds every post-RoPE key and value
// to codec::Calibrator, writes the JSON and returns it.
ModelCalibration CalibrateModel(const CalibrateOptions& options);

}  // namespace readkv::model
