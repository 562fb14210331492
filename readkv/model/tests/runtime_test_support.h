// Shared by runtime_test.cc and prefix_cache_runtime_test.cc: a tiny random Llama written to a
// temporary directory (RuntimeTest), the same with a calibration and a 560-token prompt of
// recall text and its exact reference logits (CompressedRuntimeTest), and the small helpers
// the runtime tests measure with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/model/model_calibration.h"
#include "readkv/model/recall_data.h"
#include "readkv/model/runtime.h"
#include "readkv/model/tokenizer.h"
#include "tiny_model.h"

namespace readkv::model::testing {

inline std::vector<int32_t> Prompt(int n, uint64_t seed) {
  kvgate::stats::SplitMixRng rng(seed);
  std::vector<int32_t> ids = {256};
  for (int i = 1; i < n; ++i) ids.push_back(static_cast<int32_t>(rng.Next() % 256));
  return ids;
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

inline std::vector<float> Step(engine::DecodeModel& model, uint64_t id, std::span<const int32_t> tokens) {
  engine::SequenceStep step;
  step.sequence_id = id;
  step.tokens = tokens;
  model.Forward(std::span<engine::SequenceStep>(&step, 1));
  return step.logits;
}

// The served byte-key configuration (--byte-keys): the CPU tile reader, ReadKV(8, 5), keys read
// whole (8:2).
inline RuntimeOptions ByteKeyOptions() {
  RuntimeOptions o;
  o.kv.kind = codec::KvBackend::kReadKv;
  o.kv.reader = codec::ReaderKind::kTile;
  o.kv.read_bits = 5.0;
  o.kv.key_bits = 8.0;
  o.kv.value_bits = 2.0;
  o.kv.byte_keys = true;
  return o;
}

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = MakeTinyModel(42);
    WriteTinyModel(tiny_, dir_.path());
  }
  testing::TinyModel tiny_;
  TempDir dir_;
};

// A context long enough for two full 256-token ReadKV blocks beyond the residual window.
class CompressedRuntimeTest : public RuntimeTest {
 protected:
  virtual int HeadDim() const { return testing::TinyConfig().head_dim; }
  void SetUp() override {
    ModelConfig config = testing::TinyConfig();
    config.max_position_embeddings = 640;
    config.head_dim = HeadDim();
    tiny_ = MakeTinyModel(42, config);
    WriteTinyModel(tiny_, dir_.path());
    CalibrateOptions c;
    c.model_dir = dir_.path();
    c.samples = 3;
    CalibrateModel(c);
    // Text like the calibration set's (a random-byte prompt would put K/V outside the
    // calibrated ranges, where FP8 saturates and the Lloyd tree clips).
    ByteTokenizer tok;
    prompt_ = tok.Encode(RecallCorpus(11).Next(1000), /*add_bos=*/true);
    prompt_.resize(560);
    reference_ = ReferenceLogits(tiny_, prompt_);
  }

  // Logits of a 552-token prompt and 8 decode steps against the exact reference.
  double MaxDiffAgainstDense(const RuntimeOptions& options) {
    const auto& prompt = prompt_;
    const auto& ref = reference_;
    LlamaDecodeModel model(dir_.path(), options);
    model.StartSequence(1, {});
    auto logits = Step(model, 1, std::span<const int32_t>(prompt).first(552));
    double worst = MaxAbsDiff(logits, ref[551]);
    for (size_t t = 552; t < prompt.size(); ++t) {
      logits = Step(model, 1, std::span<const int32_t>(&prompt[t], 1));
      worst = std::max(worst, MaxAbsDiff(logits, ref[t]));
    }
    double scale = 0.0;  // errors relative to the largest logit of the checked positions
    for (size_t t = 551; t < prompt.size(); ++t) {
      for (double x : ref[t]) scale = std::max(scale, std::abs(x));
    }
    worst /= scale;
    const engine::KvLedgers led = model.ledgers();
    EXPECT_GT(led.capacity_bytes, 0);
    EXPECT_GT(led.logical_read_bytes, 0);
    EXPECT_GE(led.physical_traffic_bytes, led.logical_read_bytes);
    return worst;
  }

  // MaxDiffAgainstDense of ReadKV(8, 8) and ReadKV(8, 1) with `reader`, prefill through the cache.
  std::pair<double, double> FullAndOneBit(codec::ReaderKind reader) {
    RuntimeOptions full;
    full.kv.kind = codec::KvBackend::kReadKv;
    full.kv.reader = reader;
    full.kv.read_bits = 8;
    full.kv.prefill = PrefillAttention::kThroughCache;
    RuntimeOptions low = full;
    low.kv.read_bits = 1;
    return {MaxDiffAgainstDense(full), MaxDiffAgainstDense(low)};
  }

  std::vector<int32_t> prompt_;
  std::vector<std::vector<double>> reference_;
};

}  // namespace readkv::model::testing
