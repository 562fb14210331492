// The REAL model runtime (readkv/model, libtorch) with a tiny randomly initialised Llama, for the
// server's integration tests: written by the runtime's own test writer
// (readkv/model/tests/tiny_model.h) into a temp directory, with a longer context so that
// streams can run long enough to be cancelled, and calibrated on demand so that the fp8 and
// readkv backends load. Random weights: its text is arbitrary bytes, but every token is a real
// forward pass through the real KV backend.
#pragma once

#include <memory>
#include <string>

#include "readkv/codec/attention.h"
#include "readkv/engine/decode_model.h"
#include "readkv/engine/tokenizer.h"
#include "readkv/model/model_calibration.h"
#include "readkv/model/runtime.h"
#include "readkv/model/tokenizer.h"
#include "tiny_model.h"

namespace readkv::server::testing {

inline constexpr int kTinyLlamaContext = 1536;
inline constexpr const char* kTinyLlamaId = "test/tiny-llama";

// Writes the model (and, with `calibrate`, calibration.json) into `dir`.
inline void WriteTinyLlama(const std::string& dir, bool calibrate) {
  model::ModelConfig config = model::testing::TinyConfig();
  config.model_id = kTinyLlamaId;
  config.max_position_embeddings = kTinyLlamaContext;
  model::testing::WriteTinyModel(model::testing::MakeTinyModel(7, config), dir);
  if (calibrate) {
    model::CalibrateOptions options;
    options.model_dir = dir;
    options.samples = 2;
    options.max_bytes = 512;
    options.threads = 1;
    model::CalibrateModel(options);
  }
}

// One directory per process and kind, written on first use and removed at exit.
inline const std::string& TinyLlamaDirectory(bool calibrated = false) {
  static model::testing::TempDir plain_dir;
  static model::testing::TempDir calibrated_dir;
  static const bool plain_written = (WriteTinyLlama(plain_dir.path(), false), true);
  if (!calibrated) return (void)plain_written, plain_dir.path();
  static const bool calibrated_written = (WriteTinyLlama(calibrated_dir.path(), true), true);
  return (void)calibrated_written, calibrated_dir.path();
}

// The codec backends use the server defaults: W 8, R 4, flexible.
inline std::unique_ptr<engine::DecodeModel> LoadTinyLlama(
    codec::KvBackend kv = codec::KvBackend::kDense) {
  model::RuntimeOptions options;
  options.kv.kind = kv;
  options.threads = 1;
  return model::LoadDecodeModel(TinyLlamaDirectory(kv != codec::KvBackend::kDense), options);
}

inline std::unique_ptr<engine::Tokenizer> TinyLlamaTokenizer() {
  return std::make_unique<engine::TokenizerAdapter<model::Tokenizer>>(
      model::MakeTokenizer(model::ModelConfig::Load(TinyLlamaDirectory())));
}

}  // namespace readkv::server::testing
