#include "readkv/model/runtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <utility>

#include "readkv/codec/errors.h"
#include "readkv/model/errors.h"
#include "readkv/model/model_calibration.h"
#include "readkv/model/recall_data.h"
#include "readkv/model/tokenizer.h"
#include "readkv/model/training.h"
#include "tiny_model.h"

namespace readkv::model {
namespace {

using testing::MakeTinyModel;
using testing::ReferenceLogits;
using testing::TempDir;
using testing::WriteTinyModel;

std::vector<int32_t> Prompt(int n, uint64_t seed) {
  codec::SplitMix64 rng(seed);
  std::vector<int32_t> ids = {256};
  for (int i = 1; i < n; ++i) ids.push_back(static_cast<int32_t>(rng.Next() % 256));
  return ids;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

std::vector<float> Step(engine::DecodeModel& model, uint64_t id, std::span<const int32_t> tokens) {
  engine::SequenceStep step;
  step.sequence_id = id;
  step.tokens = tokens;
  model.Forward(std::span<engine::SequenceStep>(&step, 1));
  return step.logits;
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

TEST_F(RuntimeTest, PromptLogitsMatchAStraightforwardReference) {
  LlamaDecodeModel model(dir_.path(), {});
  const auto prompt = Prompt(40, 1);
  const auto ref = ReferenceLogits(tiny_, prompt);
  model.StartSequence(1, {});
  const auto logits = Step(model, 1, prompt);
  ASSERT_EQ(logits.size(), 258u);
  EXPECT_LT(MaxAbsDiff(logits, ref.back()), 2e-4);
  EXPECT_EQ(model.sequence_length(1), 40);
  EXPECT_EQ(model.kv_bytes_in_use(), 2 * 2 * 40 * 2 * 8 * 4);  // K+V, layers, T, Hkv, d, fp32
}

TEST_F(RuntimeTest, IncrementalDecodeEqualsTheFullForward) {
  LlamaDecodeModel model(dir_.path(), {});
  const auto prompt = Prompt(48, 2);
  const auto ref = ReferenceLogits(tiny_, prompt);
  model.StartSequence(1, {});
  // First 20 tokens as a prompt, then one at a time; each step's logits against the reference.
  auto logits = Step(model, 1, std::span<const int32_t>(prompt).first(20));
  double worst = MaxAbsDiff(logits, ref[19]);
  for (size_t t = 20; t < prompt.size(); ++t) {
    logits = Step(model, 1, std::span<const int32_t>(&prompt[t], 1));
    worst = std::max(worst, MaxAbsDiff(logits, ref[t]));
  }
  std::cout << "[ measure  ] incremental vs reference max |logit diff| = " << worst << "\n";
  EXPECT_LT(worst, 2e-4);
}

TEST_F(RuntimeTest, TrainingForwardMatchesTheReferenceAtEveryPosition) {
  const auto prompt = Prompt(33, 3);
  const auto ref = ReferenceLogits(tiny_, prompt);
  const auto logits = TrainingForwardLogits(dir_.path(), prompt);
  ASSERT_EQ(logits.size(), prompt.size() * 258);
  double worst = 0.0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    for (size_t v = 0; v < 258; ++v) {
      worst = std::max(worst, std::abs(logits[t * 258 + v] - ref[t][v]));
    }
  }
  EXPECT_LT(worst, 2e-4);
}

TEST_F(RuntimeTest, ABatchOfSequencesEqualsEachSequenceAlone) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(9, 4), Prompt(31, 5), Prompt(17, 6)};
  std::vector<std::vector<float>> alone;
  {
    LlamaDecodeModel model(dir_.path(), {});
    for (size_t i = 0; i < prompts.size(); ++i) {
      model.StartSequence(i, {});
      auto logits = Step(model, i, prompts[i]);
      const int32_t next = 65 + static_cast<int32_t>(i);
      auto second = Step(model, i, std::span<const int32_t>(&next, 1));
      logits.insert(logits.end(), second.begin(), second.end());
      alone.push_back(logits);
      model.EndSequence(i);
    }
  }
  LlamaDecodeModel model(dir_.path(), {});
  std::vector<engine::SequenceStep> steps(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    model.StartSequence(i, {});
    steps[i].sequence_id = i;
    steps[i].tokens = prompts[i];
  }
  model.Forward(steps);
  std::vector<std::vector<float>> batched(prompts.size());
  std::vector<int32_t> next(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    batched[i] = steps[i].logits;
    next[i] = 65 + static_cast<int32_t>(i);
    steps[i].tokens = std::span<const int32_t>(&next[i], 1);
  }
  model.Forward(steps);
  double worst = 0.0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    batched[i].insert(batched[i].end(), steps[i].logits.begin(), steps[i].logits.end());
    worst = std::max(worst, MaxAbsDiff(batched[i], alone[i]));
  }
  std::cout << "[ measure  ] batch-of-3 vs alone max |logit diff| = " << worst << "\n";
  // Bit-identical with libtorch 1.13 here; 2.0e-5 with torch 2.11 on the GPU host's CPU, whose
  // float32 GEMMs take other kernels for 3 rows than for 1 (the incremental-vs-full test above
  // sees the same 1e-5 level). A batching bug (rows or positions mixed, padding read) moves
  // logits by O(0.1) or more.
  EXPECT_LT(worst, 1e-4);
}

TEST_F(RuntimeTest, BadStepsAreRefusedBeforeAnyStateChanges) {
  LlamaDecodeModel model(dir_.path(), {});
  model.StartSequence(7, {});
  EXPECT_THROW(model.StartSequence(7, {}), std::invalid_argument);
  const std::vector<int32_t> ok = {256, 1, 2};
  const std::vector<int32_t> bad = {256, 300};
  const std::vector<int32_t> empty;
  EXPECT_THROW(Step(model, 8, ok), std::invalid_argument);  // not started
  EXPECT_THROW(Step(model, 7, bad), std::invalid_argument);
  EXPECT_THROW(Step(model, 7, empty), std::invalid_argument);
  const std::vector<int32_t> too_long(200, 5);  // max_context 160
  EXPECT_THROW(Step(model, 7, too_long), std::invalid_argument);
  EXPECT_EQ(model.sequence_length(7), 0);
  EXPECT_EQ(Step(model, 7, ok).size(), 258u);
  model.EndSequence(7);
  model.EndSequence(7);  // idempotent
  EXPECT_EQ(model.kv_bytes_in_use(), 0);
}

TEST_F(RuntimeTest, BfloatWeightsLoadAndAgreeWithTheirRoundedReference) {
  testing::TinyModel m = tiny_;
  m.config.torch_dtype = "bfloat16";
  for (auto& [name, values] : m.tensors) {
    for (float& x : values) x = Bf16ToFloat(FloatToBf16(x));
  }
  TempDir dir;
  WriteTinyModel(m, dir.path());
  LlamaDecodeModel model(dir.path(), {});
  const auto prompt = Prompt(25, 8);
  model.StartSequence(1, {});
  EXPECT_LT(MaxAbsDiff(Step(model, 1, prompt), ReferenceLogits(m, prompt).back()), 2e-4);
}

std::string LoadErrorName(const std::string& dir) {
  try {
    LlamaDecodeModel model(dir, {});
  } catch (const ModelFormatError& e) {
    return e.what_failed();
  }
  return "<no error>";
}

TEST_F(RuntimeTest, WeightsThatDoNotMatchTheConfigAreRefusedNamingTheTensor) {
  {
    testing::TinyModel m = tiny_;
    m.shapes["model.layers.1.self_attn.k_proj.weight"] = {8, 64};  // 512 values either way
    TempDir dir;
    WriteTinyModel(m, dir.path());
    EXPECT_EQ(LoadErrorName(dir.path()), "model.layers.1.self_attn.k_proj.weight");
  }
  {
    testing::TinyModel m = tiny_;
    m.tensors.erase("model.norm.weight");
    m.shapes.erase("model.norm.weight");
    TempDir dir;
    WriteTinyModel(m, dir.path());
    EXPECT_EQ(LoadErrorName(dir.path()), "model.norm.weight");
  }
  {
    testing::TinyModel m = tiny_;
    m.tensors["model.layers.5.mlp.up_proj.weight"] = {1.0f};
    m.shapes["model.layers.5.mlp.up_proj.weight"] = {1};
    TempDir dir;
    WriteTinyModel(m, dir.path());
    EXPECT_EQ(LoadErrorName(dir.path()), "model.layers.5.mlp.up_proj.weight");
  }
  {
    // The file holds bf16 while config.json says float32.
    testing::TinyModel m = tiny_;
    m.config.torch_dtype = "bfloat16";
    TempDir dir;
    WriteTinyModel(m, dir.path());
    m.config.torch_dtype = "float32";
    std::ofstream(dir.path() + "/config.json") << m.config.ToJson();
    EXPECT_EQ(LoadErrorName(dir.path()), "model.embed_tokens.weight");
  }
}

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
  std::pair<double, double> FullAndOneBit(const std::string& reader) {
    RuntimeOptions full;
    full.kv.kind = "readkv";
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

TEST_F(CompressedRuntimeTest, Fp8AndReadKvStayCloseToDenseAndReadKvErrorFallsWithReadBits) {
  RuntimeOptions fp8;
  fp8.kv.kind = "fp8";
  const double fp8_err = MaxDiffAgainstDense(fp8);
  const auto [r8, r1] = FullAndOneBit("flexible");
  std::cout << "[ measure  ] max |logit diff| / max |logit| vs exact: fp8 " << fp8_err
            << ", readkv(8,8) " << r8 << ", readkv(8,1) " << r1 << "\n";
  // A random tiny model amplifies K/V error (measured: fp8 ~0.15, readkv(8,8) ~0.06, readkv(8,1)
  // ~0.96); a mis-wired backend (wrong head, position or transform) lands near 1.
  EXPECT_LT(fp8_err, 0.3);
  EXPECT_LT(r8, 0.15);
  EXPECT_GT(r1, 4 * r8);
}

// Chunked prefill (engine::SequenceStep::logits_wanted): a prompt fed in chunks attends exactly
// to the chunks before it, so the logits of its last position and of the decode steps after it
// are those of the same prompt fed whole, up to float rounding, for every backend.
TEST_F(CompressedRuntimeTest, APromptFedInChunksGivesTheLogitsOfTheWholePrompt) {
  RuntimeOptions dense;
  RuntimeOptions fp8;
  fp8.kv.kind = "fp8";
  RuntimeOptions readkv;
  readkv.kv.kind = "readkv";
  readkv.kv.read_bits = 4;
  RuntimeOptions through = readkv;
  through.kv.prefill = PrefillAttention::kThroughCache;
  const std::span<const int32_t> prompt = std::span<const int32_t>(prompt_).first(552);
  for (const RuntimeOptions& options : {dense, fp8, readkv, through}) {
    SCOPED_TRACE(options.kv.kind + (options.kv.prefill == PrefillAttention::kThroughCache
                                        ? " through the cache"
                                        : ""));
    LlamaDecodeModel whole(dir_.path(), options);
    LlamaDecodeModel chunked(dir_.path(), options);
    whole.StartSequence(1, {});
    chunked.StartSequence(1, {});
    std::vector<std::vector<float>> want = {Step(whole, 1, prompt)};
    std::vector<std::vector<float>> got;
    for (size_t at = 0; at < prompt.size(); at += 100) {  // 5 chunks of 100, then 52
      engine::SequenceStep step;
      step.sequence_id = 1;
      step.tokens = prompt.subspan(at, std::min<size_t>(100, prompt.size() - at));
      step.logits_wanted = at + step.tokens.size() == prompt.size();
      chunked.Forward(std::span<engine::SequenceStep>(&step, 1));
      EXPECT_EQ(step.logits.empty(), !step.logits_wanted);
      if (step.logits_wanted) got.push_back(step.logits);
    }
    for (size_t t = 552; t < prompt_.size(); ++t) {
      const std::span<const int32_t> token(&prompt_[t], 1);
      want.push_back(Step(whole, 1, token));
      got.push_back(Step(chunked, 1, token));
    }
    ASSERT_EQ(got.size(), want.size());
    double scale = 0.0;
    for (const auto& logits : want) {
      for (float x : logits) scale = std::max(scale, static_cast<double>(std::abs(x)));
    }
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LT(MaxAbsDiff(got[i], want[i]) / scale, 1e-4) << "position " << 551 + i;
    }
    EXPECT_EQ(chunked.kv_bytes_in_use(), whole.kv_bytes_in_use());
  }
}

TEST_F(CompressedRuntimeTest, APromptChunkAfterThePromptIsRefused) {
  RuntimeOptions options;
  options.kv.kind = "readkv";
  LlamaDecodeModel model(dir_.path(), options);
  model.StartSequence(1, {});
  Step(model, 1, std::span<const int32_t>(prompt_).first(8));
  engine::SequenceStep step;
  step.sequence_id = 1;
  step.tokens = std::span<const int32_t>(prompt_).subspan(8, 4);
  step.logits_wanted = false;
  try {
    model.Forward(std::span<engine::SequenceStep>(&step, 1));
    ADD_FAILURE() << "a prompt chunk after the prompt was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("after its prompt"), std::string::npos) << e.what();
  }
}

TEST_F(CompressedRuntimeTest, RequestPoliciesAreValidatedNamingTheField) {
  RuntimeOptions o;
  o.kv.kind = "readkv";
  LlamaDecodeModel model(dir_.path(), o);
  engine::ReadPolicy p;
  p.read_bits = 9.0;
  try {
    model.StartSequence(1, p);
    FAIL() << "no error";
  } catch (const codec::InvalidArgument& e) {
    EXPECT_EQ(e.field(), "read_bits");
  }
  p = {};
  p.reader = "sideways";
  EXPECT_THROW(model.StartSequence(1, p), std::invalid_argument);
  p = {};
  p.read_bits = 2.0;
  p.reader = "flexible";
  p.key_bits = 3.0;  // R_V = 1
  model.StartSequence(1, p);
  EXPECT_EQ(model.cache_identity().store_bits, 8);
  EXPECT_FALSE(model.cache_identity().calibration_digest.empty());
}

TEST_F(CompressedRuntimeTest, ACalibrationOfOtherWeightsIsRefused) {
  testing::TinyModel other = MakeTinyModel(43);
  TempDir dir;
  WriteTinyModel(other, dir.path());
  RuntimeOptions o;
  o.kv.kind = "fp8";
  o.calibration_path = dir_.path() + "/calibration.json";
  try {
    LlamaDecodeModel model(dir.path(), o);
    FAIL() << "no error";
  } catch (const codec::IdentityMismatch& e) {
    EXPECT_EQ(e.field(), "weights_digest");
  }
}

// The fidelity check measures both caches on fresh documents: every layer and kind has rows,
// FP8's error is e4m3's (a few percent), the W-bit code's error falls as W grows, and the
// standardized values of text like the calibration set's are near N(0, 1). Other weights' (or
// a missing) calibration is refused.
TEST_F(CompressedRuntimeTest, CodecFidelityMeasuresBothCachesAndFallsWithStoredBits) {
  CodecFidelityOptions o;
  o.documents.model_dir = dir_.path();
  o.documents.samples = 2;
  o.documents.max_bytes = 500;
  o.documents.seed = 99;
  const auto rows_at = [&](int w) {
    o.store_bits = w;
    return MeasureCodecFidelity(o);
  };
  const std::vector<CodecFidelityRow> w8 = rows_at(8), w3 = rows_at(3);
  ASSERT_EQ(w8.size(), 2u * static_cast<size_t>(tiny_.config.num_hidden_layers));
  ASSERT_EQ(w3.size(), w8.size());
  for (size_t i = 0; i < w8.size(); ++i) {
    const CodecFidelityRow& r = w8[i];
    SCOPED_TRACE(std::to_string(r.layer) + " " + r.kind);
    EXPECT_EQ(r.kind, i % 2 == 0 ? "key" : "value");
    EXPECT_GT(r.values, 0);
    EXPECT_EQ(r.values % tiny_.config.head_dim, 0);
    EXPECT_GT(r.fp8_relative_rms, 1e-3);
    EXPECT_LT(r.fp8_relative_rms, 0.1);
    EXPECT_GT(w3[i].readkv_relative_rms, 2.0 * r.readkv_relative_rms);
    // 3 bits: the outer threshold is 1.69, passed by ~9% of N(0, 1); 8 bits: 3.99, ~0.007%.
    // Values in the unbounded outer cells err more than the rest, so their error share exceeds
    // their count share.
    EXPECT_GT(w3[i].readkv_beyond_outer, 0.03);
    EXPECT_LT(w3[i].readkv_beyond_outer, 0.25);
    EXPECT_LT(r.readkv_beyond_outer, w3[i].readkv_beyond_outer / 10);
    EXPECT_GT(w3[i].readkv_outer_error_share, w3[i].readkv_beyond_outer);
    std::cout << r.layer << " " << r.kind << ": beyond the outer threshold "
              << w3[i].readkv_beyond_outer << " at W=3 (error share "
              << w3[i].readkv_outer_error_share << "), " << r.readkv_beyond_outer << " at W=8\n";
    EXPECT_NEAR(r.z_mean, 0.0, 0.5);
    EXPECT_NEAR(r.z_std, 1.0, 0.5);
    EXPECT_GE(r.z_max_abs, r.z_std);
  }
  // A layer-0 value depends on its token alone, so each token has the same number of values
  // past the threshold at every occurrence: the count the check attributes to a token is a
  // multiple of how often the documents hold it (the documents as the check feeds them).
  std::map<int, int64_t> occurrences;
  {
    ByteTokenizer tok;
    RecallCorpus corpus(o.documents.seed);
    for (int i = 0; i < o.documents.samples; ++i) {
      std::vector<int32_t> ids = tok.Encode(corpus.Next(o.documents.max_bytes), true);
      ids.push_back(tok.eos_token());
      ids.resize(std::min(ids.size(), static_cast<size_t>(tiny_.config.max_position_embeddings)));
      for (int32_t t : ids) ++occurrences[t];
    }
  }
  const CodecFidelityRow& v0 = w3[1];
  ASSERT_EQ(v0.kind, "value");
  const auto beyond = std::llround(v0.readkv_beyond_outer * static_cast<double>(v0.values));
  ASSERT_GT(beyond, 0);
  ASSERT_FALSE(v0.outer_by_token.empty());
  for (const auto& [token, share] : v0.outer_by_token) {
    SCOPED_TRACE("token " + std::to_string(token));
    const auto count = std::llround(share * static_cast<double>(beyond));
    ASSERT_GT(occurrences.count(token), 0u) << "a token the documents do not hold";
    EXPECT_EQ(count % occurrences[token], 0) << count << " values over " << occurrences[token]
                                             << " occurrences";
    EXPECT_LE(count / occurrences[token],
              int64_t{tiny_.config.num_key_value_heads} * tiny_.config.head_dim);
  }
  testing::TinyModel other = MakeTinyModel(43);
  TempDir dir;
  WriteTinyModel(other, dir.path());
  o.documents.model_dir = dir.path();
  EXPECT_THROW(MeasureCodecFidelity(o), ModelFormatError);  // no calibration.json there
  o.calibration_path = dir_.path() + "/calibration.json";
  EXPECT_THROW(MeasureCodecFidelity(o), codec::IdentityMismatch);
}

// ---- Persistent prefix cache (runtime.h) --------------------------------------------------------

namespace fs = std::filesystem;

// A 552-token prompt (2 full prefix blocks + 39 tokens + the last) then 8 decode steps: every
// logit the engine would see.
std::vector<std::vector<float>> RunPrompt(LlamaDecodeModel& model, uint64_t id,
                                          const std::vector<int32_t>& prompt,
                                          const engine::ReadPolicy& policy = {}) {
  model.StartSequence(id, policy);
  std::vector<std::vector<float>> out;
  out.push_back(Step(model, id, std::span<const int32_t>(prompt).first(552)));
  for (size_t t = 552; t < prompt.size(); ++t) {
    out.push_back(Step(model, id, std::span<const int32_t>(&prompt[t], 1)));
  }
  model.EndSequence(id);
  return out;
}

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST_F(CompressedRuntimeTest, PrefixCacheHitsAreBitIdenticalToAFreshCache) {
  TempDir cache;
  RuntimeOptions o;
  o.kv.kind = "readkv";
  o.prefix_cache.directory = cache.path();
  std::vector<std::vector<float>> miss, hit, restarted;
  {
    LlamaDecodeModel model(dir_.path(), o);
    miss = RunPrompt(model, 1, prompt_);
    PrefixCacheCounters c = model.prefix_cache_counters();
    EXPECT_EQ(c.misses, 2);
    EXPECT_EQ(c.stored, 2);
    EXPECT_EQ(c.hits, 0);
    hit = RunPrompt(model, 2, prompt_);  // same server, next request
    EXPECT_EQ(model.prefix_cache_counters().hits, 2);
  }
  EXPECT_EQ(FilesIn(cache.path()), 2u);
  {
    LlamaDecodeModel model(dir_.path(), o);  // a restart on the same directory
    restarted = RunPrompt(model, 1, prompt_);
    EXPECT_EQ(model.prefix_cache_counters().hits, 2);
    EXPECT_EQ(model.prefix_cache_counters().stored, 0);
    EXPECT_TRUE(model.ledgers().cache_rejections.empty());
    // The same counts reach the ledgers (readkv_prefix_cache_objects_total).
    const auto objects = model.ledgers().prefix_cache_objects;
    EXPECT_EQ(objects.at("hit"), 2);
    EXPECT_EQ(objects.at("miss"), 0);
    EXPECT_EQ(objects.at("stored"), 0);
  }
  ASSERT_EQ(miss.size(), 9u);
  for (size_t i = 0; i < miss.size(); ++i) {
    EXPECT_EQ(hit[i], miss[i]) << "position " << i;  // exact, not close
    EXPECT_EQ(restarted[i], miss[i]) << "position " << i;
  }
  // The cache changes how the prompt attends its prefix (through its encoded form) but stays
  // close to a server without it.
  RuntimeOptions plain = o;
  plain.prefix_cache = {};
  LlamaDecodeModel model(dir_.path(), plain);
  const auto without = RunPrompt(model, 1, prompt_);
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < miss.size(); ++i) {
    worst = std::max(worst, MaxAbsDiff(without[i], miss[i]));
    for (float x : without[i]) scale = std::max(scale, static_cast<double>(std::abs(x)));
  }
  std::cout << "[ measure  ] prefix cache on vs off: max |logit diff| / max |logit| "
            << worst / scale << "\n";
  EXPECT_GT(worst, 0.0);  // the prompt really attends its prefix through the encoded form
  EXPECT_LT(worst / scale, 0.15);
}

TEST_F(CompressedRuntimeTest, PrefixCacheSharedFirstBlockAndAnotherReadPolicyStayExact) {
  // A prompt sharing only the first block, and a request at another read budget: storage is
  // reused without re-encoding and answers equal a server whose cache started empty.
  std::vector<int32_t> other = prompt_;
  for (size_t i = 300; i < other.size(); ++i) other[i] = prompt_[(i * 7) % 250 + 1];
  engine::ReadPolicy low;
  low.read_bits = 2.0;
  RuntimeOptions o;
  o.kv.kind = "readkv";
  TempDir warm_dir, fresh_a, fresh_b;
  o.prefix_cache.directory = warm_dir.path();
  LlamaDecodeModel warm(dir_.path(), o);
  RunPrompt(warm, 1, prompt_);
  const auto warm_other = RunPrompt(warm, 2, other);
  EXPECT_EQ(warm.prefix_cache_counters().hits, 1);
  const auto warm_low = RunPrompt(warm, 3, prompt_, low);
  EXPECT_EQ(warm.prefix_cache_counters().hits, 3);
  EXPECT_EQ(warm.prefix_cache_counters().stored, 3);  // 2 + other's second block
  o.prefix_cache.directory = fresh_a.path();
  LlamaDecodeModel fresh(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh, 1, other), warm_other);
  o.prefix_cache.directory = fresh_b.path();
  LlamaDecodeModel fresh_low(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh_low, 1, prompt_, low), warm_low);
}

// Objects are named by their identity: a W = 6 runtime on a directory of W = 8 objects reads
// none of them (no hit, no refusal), stores its own beside them, and answers as a fresh one.
TEST_F(CompressedRuntimeTest, PrefixCacheObjectsOfAnotherStoreWidthAreNeverReadAndStayWhole) {
  TempDir cache, fresh_dir;
  RuntimeOptions o;
  o.kv.kind = "readkv";
  o.prefix_cache.directory = cache.path();
  {
    LlamaDecodeModel w8(dir_.path(), o);
    RunPrompt(w8, 1, prompt_);
  }
  const size_t w8_objects = FilesIn(cache.path());
  ASSERT_EQ(w8_objects, 2u);
  o.kv.store_bits = 6;
  o.kv.read_bits = 3.0;
  std::vector<std::string> warnings;
  o.prefix_cache.warn = [&](std::string_view line) { warnings.emplace_back(line); };
  LlamaDecodeModel w6(dir_.path(), o);
  const auto beside = RunPrompt(w6, 1, prompt_);
  const engine::KvLedgers led = w6.ledgers();
  EXPECT_TRUE(led.cache_rejections.empty());
  EXPECT_EQ(w6.prefix_cache_counters().hits, 0);
  EXPECT_EQ(w6.prefix_cache_counters().stored, 2);
  EXPECT_EQ(FilesIn(cache.path()), w8_objects + 2);  // both widths' objects, side by side
  EXPECT_EQ(FilesIn(cache.path() + "/quarantine"), 0u);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  o.prefix_cache.directory = fresh_dir.path();
  o.prefix_cache.warn = nullptr;
  LlamaDecodeModel fresh(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh, 1, prompt_), beside);
}

// Outlier lists are part of the identity: a server that keeps them never reads objects written
// without them (another name, so no hit and no refusal), and its own hits are exact.
TEST_F(CompressedRuntimeTest, PrefixCacheWithOutlierListsIsExactAndApartFromObjectsWithout) {
  TempDir cache, fresh_dir;
  RuntimeOptions o;
  o.kv.kind = "readkv";
  o.kv.reader = "constrained";
  o.prefix_cache.directory = cache.path();
  {
    LlamaDecodeModel without(dir_.path(), o);
    RunPrompt(without, 1, prompt_);
    EXPECT_EQ(without.cache_identity().outlier_cap, 0);
  }
  ASSERT_EQ(FilesIn(cache.path()), 2u);
  o.kv.outlier_cap = 2;
  LlamaDecodeModel with(dir_.path(), o);
  EXPECT_EQ(with.cache_identity().outlier_cap, 2);
  EXPECT_GT(with.cache_identity().outlier_threshold, 3.9);
  const auto first = RunPrompt(with, 1, prompt_);
  EXPECT_EQ(with.prefix_cache_counters().hits, 0);
  EXPECT_EQ(with.prefix_cache_counters().stored, 2);
  const auto again = RunPrompt(with, 2, prompt_);
  EXPECT_EQ(with.prefix_cache_counters().hits, 2);
  EXPECT_EQ(again, first);
  EXPECT_TRUE(with.ledgers().cache_rejections.empty());
  EXPECT_EQ(FilesIn(cache.path()), 4u);
  o.prefix_cache.directory = fresh_dir.path();
  LlamaDecodeModel fresh(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh, 1, prompt_), first);
}

TEST(RuntimeOptionsTest, OutlierListsAreRefusedOnACudaDeviceAndOutOfRange) {
  RuntimeOptions o;
  o.kv.kind = "readkv";
  o.kv.reader = "constrained";
  o.kv.outlier_cap = 2;
  ValidateRuntimeOptions(o);  // the CPU keeps them
  const auto prefix_of = [&o] {
    try {
      ValidateRuntimeOptions(o);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      return what.substr(0, what.find(':'));
    }
    return std::string("accepted");
  };
  o.device = "cuda";
  EXPECT_EQ(prefix_of(), "outlier_cap");  // no GPU correction: refused, never read without
  o.kv.outlier_cap = 0;
  EXPECT_EQ(prefix_of(), "accepted");
  o.device = "cpu";
  o.kv.outlier_cap = 17;
  EXPECT_EQ(prefix_of(), "outlier_cap");
  o.kv.outlier_cap = 2;
  o.kv.outlier_threshold = 2.0f;  // inside the tree: nothing is clipped there
  EXPECT_EQ(prefix_of(), "outlier_threshold");
  o.kv.outlier_threshold = 0.0f;
  o.kv.reader = "tile";  // no correction in the tile reader yet: refused, never read without
  EXPECT_EQ(prefix_of(), "outlier_cap");
}

// The tile reader needs a channel group of 16: the same tiny model with d = 16.
class TileRuntimeTest : public CompressedRuntimeTest {
 protected:
  int HeadDim() const override { return 16; }
};

// The tile reader serves like the others: close to dense at full depth, worse at one bit, and
// its tile-layout prefix-cache objects restore bit for bit; a request naming a reader of the
// other layout is refused while a prefix cache of tiles is on.
TEST_F(TileRuntimeTest, TheTileReaderDecodesAndItsPrefixCacheRestoresExactly) {
  const auto [r8, r1] = FullAndOneBit("tile");
  std::cout << "[ measure  ] tile reader, max |logit diff| / max |logit| vs exact: (8,8) " << r8
            << ", (8,1) " << r1 << "\n";
  EXPECT_LT(r8, 0.15);
  EXPECT_GT(r1, 4 * r8);

  TempDir cache;
  RuntimeOptions o;
  o.kv.kind = "readkv";
  o.kv.reader = "tile";
  o.prefix_cache.directory = cache.path();
  LlamaDecodeModel model(dir_.path(), o);
  EXPECT_EQ(model.cache_identity().layout, "tiles16");
  const auto miss = RunPrompt(model, 1, prompt_);
  const auto hit = RunPrompt(model, 2, prompt_);
  EXPECT_EQ(model.prefix_cache_counters().hits, 2);
  EXPECT_EQ(hit, miss);
  engine::ReadPolicy constrained;
  constrained.reader = "constrained";
  EXPECT_THROW(model.StartSequence(3, constrained), std::invalid_argument);
}

TEST(RuntimeOptionsTest, CudaGraphsIsAutoOnOrOffAndOnNeedsTheCudaKvBackends) {
  RuntimeOptions o;  // cpu, dense, auto
  ValidateRuntimeOptions(o);
  o.cuda_graphs = "off";
  ValidateRuntimeOptions(o);
  const auto refused = [&o](const std::string& value) {
    o.cuda_graphs = value;
    try {
      ValidateRuntimeOptions(o);
      ADD_FAILURE() << value << " on " << o.device << "/" << o.kv.kind << ": no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("cuda_graphs:", 0), 0u) << e.what();
    }
  };
  refused("yes");
  refused("on");  // on the CPU
  o.device = "cuda";
  refused("on");  // dense on CUDA: its decode does not go through the graphs
  o.kv.kind = "fp8";
  o.cuda_graphs = "on";
  ValidateRuntimeOptions(o);
  refused("ON");
}

TEST(PrefixCacheOptionsTest, PrefixCacheNeedsReadKvAndDensePrefill) {
  RuntimeOptions o;
  o.prefix_cache.directory = "/tmp/unused-prefix-cache";
  for (const char* kind : {"dense", "fp8"}) {
    o.kv.kind = kind;
    try {
      ValidateRuntimeOptions(o);
      FAIL() << kind << ": no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("cache_dir:", 0), 0u) << e.what();
    }
  }
  o.kv.kind = "readkv";
  o.kv.prefill = PrefillAttention::kThroughCache;
  EXPECT_THROW(ValidateRuntimeOptions(o), std::invalid_argument);
  o.kv.prefill = PrefillAttention::kDense;
  ValidateRuntimeOptions(o);
}

}  // namespace
}  // namespace readkv::model
