#include "readkv/codec/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "readkv/codec/attention_experiment.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/dense_cache.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/fp8_cache.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/synthetic.h"

namespace readkv::codec {
namespace {

SyntheticConfig SmallData(uint64_t seed, int64_t tokens = 1024) {
  SyntheticConfig data;
  data.geometry = {8, 2, 64};
  data.tokens = tokens;
  data.seed = seed;
  return data;
}

AttentionExperimentResult RunCase(const SyntheticConfig& data, KvBackend backend,
                                  ReadPolicy policy = {}, int store_bits = 8,
                                  bool residual_window = true) {
  AttentionExperimentConfig config;
  config.data = data;
  config.cache.backend = backend;
  config.cache.store_bits = store_bits;
  config.cache.policy = policy;
  config.cache.residual_window = residual_window;
  config.calibration_samples = 2048;
  return RunAttentionExperiment(config);
}

TEST(AttentionTest, DenseMatchesTheFp64Reference) {
  const AttentionExperimentResult r = RunCase(SmallData(1), KvBackend::kDense);
  EXPECT_LT(r.rel_l2_error, 1e-5);  // FP32 accumulation over 1024 tokens
}

TEST(AttentionTest, DenseBf16StorageIsWithinBf16Rounding) {
  AttentionExperimentConfig config;
  config.data = SmallData(2);
  config.cache.backend = KvBackend::kDense;
  config.cache.dense_storage = DenseStorage::kBf16;
  const AttentionExperimentResult r = RunAttentionExperiment(config);
  EXPECT_GT(r.rel_l2_error, 1e-5);  // it really rounds
  EXPECT_LT(r.rel_l2_error, 2e-2);  // BF16 keeps 8 significant bits: 2^-9 relative per scalar
  EXPECT_EQ(r.ledgers.capacity.payload_bytes, 2 * 1024 * 2 * 64 * 2);
}

TEST(AttentionTest, CapacityCountsAKvHeadOnce) {
  SyntheticConfig gqa = SmallData(3, 512);
  gqa.geometry = {32, 8, 64};
  SyntheticConfig mha = gqa;
  mha.geometry = {8, 8, 64};
  for (KvBackend backend : {KvBackend::kDense, KvBackend::kFp8, KvBackend::kReadKv}) {
    const AttentionExperimentResult a = RunCase(gqa, backend);
    const AttentionExperimentResult b = RunCase(mha, backend);
    EXPECT_EQ(a.ledgers.capacity.Total(), b.ledgers.capacity.Total()) << KvBackendName(backend);
    EXPECT_GT(a.ledgers.capacity.payload_bytes, 0);
  }
  // And the dense payload is exactly 2 * T * H_kv * d * 4 bytes (FP32), independent of H_q.
  EXPECT_EQ(RunCase(gqa, KvBackend::kDense).ledgers.capacity.payload_bytes, 2 * 512 * 8 * 64 * 4);
}

// Flexible reader at R = W = 8 with its pooled budget reads every scalar at depth 8, so its
// error is the codec's 8-bit quantisation error: per scalar sqrt(D(8)) relative to sigma
// (about 1.1% for the Lloyd tree), a little more through the softmax, plus the BF16 rounding of
// the residual window. Bound: 3 * sqrt(D(8)).
TEST(AttentionTest, ReadKvAtFullBudgetIsWithinCodecErrorOfDense) {
  LloydTree tree(8);
  const double bound = 3.0 * std::sqrt(tree.distortion(8));
  for (uint64_t seed : {1u, 2u}) {
    const AttentionExperimentResult r =
        RunCase(SmallData(seed), KvBackend::kReadKv, {ReaderKind::kFlexible, 8.0, 0, 0});
    EXPECT_LT(r.rel_l2_error, bound) << "seed " << seed;
    EXPECT_DOUBLE_EQ(r.ledgers.depths.mean_key_depth, 8.0);
    EXPECT_DOUBLE_EQ(r.ledgers.depths.mean_value_depth, 8.0);
  }
}

TEST(AttentionTest, ErrorFallsAsReadBitsRise) {
  for (ReaderKind reader : {ReaderKind::kFlexible, ReaderKind::kConstrained}) {
    std::vector<double> mean_error;
    for (double r : {1.0, 2.0, 4.0, 8.0}) {
      double total = 0.0;
      for (uint64_t seed : {11u, 12u, 13u}) {
        total += RunCase(SmallData(seed), KvBackend::kReadKv, {reader, r, 0, 0}).rel_l2_error;
      }
      mean_error.push_back(total / 3.0);
    }
    for (size_t i = 1; i < mean_error.size(); ++i) {
      EXPECT_LT(mean_error[i], mean_error[i - 1]) << ReaderName(reader) << " R index " << i << ": "
                                                  << mean_error[i] << " vs " << mean_error[i - 1];
    }
  }
}

TEST(AttentionTest, ConstrainedLogicalReadsAreWithinOnePercentOfTheBudget) {
  const SyntheticConfig data = SmallData(4, 2048);  // whole blocks: no residual tokens
  const int64_t scalars = 2048 * 2 * 64;
  for (double r : {2.0, 4.0}) {
    const AttentionExperimentResult result =
        RunCase(data, KvBackend::kReadKv, {ReaderKind::kConstrained, r, 0, 0});
    const double budget_bits = 2.0 * r * static_cast<double>(scalars);  // K and V
    const auto logical = static_cast<double>(result.ledgers.logical.TotalBits());
    EXPECT_LE(logical, budget_bits);
    EXPECT_GE(logical, 0.99 * budget_bits) << "R=" << r;
    EXPECT_EQ(result.ledgers.logical.residual_bits, 0);
  }
}

TEST(AttentionTest, FullReaderReadsEveryPlane) {
  const SyntheticConfig data = SmallData(5, 1024);
  const AttentionExperimentResult r =
      RunCase(data, KvBackend::kReadKv, {ReaderKind::kFull, 4.0, 0, 0}, /*store_bits=*/4);
  const int64_t scalars = 1024 * 2 * 64;
  EXPECT_EQ(r.ledgers.logical.key_bits, 4 * scalars);
  EXPECT_EQ(r.ledgers.logical.value_bits, 4 * scalars);
  // Physical payload reads = every stored plane = the capacity payload.
  EXPECT_EQ(r.ledgers.physical.key_payload_bytes + r.ledgers.physical.value_payload_bytes,
            r.ledgers.capacity.payload_bytes);
  EXPECT_EQ(r.ledgers.depths.min_key_depth, 4);
  EXPECT_EQ(r.ledgers.depths.min_value_depth, 4);
  LloydTree tree(4);
  EXPECT_LT(r.rel_l2_error, 3.0 * std::sqrt(tree.distortion(4)));
}

TEST(AttentionTest, PolicyOverrideChangesReadsWithoutReencoding) {
  const SyntheticConfig data = SmallData(6);
  const SyntheticLayer layer = MakeSyntheticLayer(data);
  auto calibration = std::make_shared<const Calibration>(MakeSyntheticCalibration(data, 2048));
  auto tree = std::make_shared<const LloydTree>(8);
  ReadKvCacheOptions options;
  options.policy = {ReaderKind::kConstrained, 4.0, 0, 0};
  ReadKvLayerCache cache(data.geometry, calibration, 0, tree, options);
  cache.AppendTokens(layer.keys, layer.values);
  std::vector<float> out4(layer.queries.size()), out2(layer.queries.size());

  const AttentionLedgers at4 = cache.Attend(layer.queries, out4);
  AttendOptions two;
  two.policy = ReadPolicy{ReaderKind::kFlexible, 2.0, 3.0, 1.0};
  const AttentionLedgers at2 = cache.Attend(layer.queries, out2, two);
  EXPECT_LT(at2.logical.TotalBits(), at4.logical.TotalBits());
  EXPECT_EQ(at2.encode.bytes_written, at4.encode.bytes_written);
  EXPECT_EQ(at2.encode.seconds, at4.encode.seconds);
  EXPECT_EQ(at2.encode.tokens_appended, 1024);
  EXPECT_EQ(at2.capacity.Total(), at4.capacity.Total());

  // The override reads exactly what a cache built with that policy reads.
  ReadKvCacheOptions built = options;
  built.policy = *two.policy;
  ReadKvLayerCache other(data.geometry, calibration, 0, tree, built);
  other.AppendTokens(layer.keys, layer.values);
  std::vector<float> out_other(layer.queries.size());
  const AttentionLedgers at_other = other.Attend(layer.queries, out_other);
  EXPECT_EQ(out_other, out2);
  EXPECT_EQ(at_other.logical.TotalBits(), at2.logical.TotalBits());

  AttendOptions bad;
  bad.policy = ReadPolicy{ReaderKind::kConstrained, 9.0, 0, 0};
  EXPECT_THROW(cache.Attend(layer.queries, out2, bad), InvalidArgument);
}

TEST(AttentionTest, ResidualWindowOnAndOffAreBothCorrect) {
  LloydTree tree(8);
  const SyntheticConfig data = SmallData(8, 1000);  // 3 full blocks + 232 tokens
  const AttentionExperimentResult on =
      RunCase(data, KvBackend::kReadKv, {ReaderKind::kFlexible, 8.0, 0, 0}, 8, true);
  const AttentionExperimentResult off =
      RunCase(data, KvBackend::kReadKv, {ReaderKind::kFlexible, 8.0, 0, 0}, 8, false);
  EXPECT_EQ(on.ledgers.depths.encoded_tokens, 768);
  EXPECT_EQ(on.ledgers.depths.residual_tokens, 232);
  EXPECT_EQ(off.ledgers.depths.encoded_tokens, 1000);
  EXPECT_EQ(off.ledgers.depths.residual_tokens, 0);
  EXPECT_EQ(on.ledgers.capacity.residual_bytes, 232 * 2 * 64 * 2 * 2);
  EXPECT_EQ(off.ledgers.capacity.residual_bytes, 0);
  EXPECT_EQ(on.ledgers.logical.residual_bits, 232 * 2 * 64 * 16 * 2);
  const double bound = 3.0 * std::sqrt(tree.distortion(8));
  EXPECT_LT(on.rel_l2_error, bound);
  EXPECT_LT(off.rel_l2_error, bound);
  // At a low budget, the window's exact tokens are read at 16 bits and still give a valid result.
  const AttentionExperimentResult low =
      RunCase(data, KvBackend::kReadKv, {ReaderKind::kConstrained, 2.0, 0, 0}, 8, true);
  EXPECT_LT(low.rel_l2_error, 0.5);
}

TEST(AttentionTest, ResidualWindowEncodesWhenTheBlockFills) {
  SyntheticConfig data = SmallData(9, 300);
  const SyntheticLayer layer = MakeSyntheticLayer(data);
  auto calibration = std::make_shared<const Calibration>(MakeSyntheticCalibration(data, 1024));
  ReadKvLayerCache cache(data.geometry, calibration, 0, std::make_shared<const LloydTree>(8),
                         ReadKvCacheOptions{});
  const size_t row = 2 * 64;
  for (int64_t i = 0; i < 300; ++i) {
    cache.Append(std::span<const float>(layer.keys).subspan(i * row, row),
                 std::span<const float>(layer.values).subspan(i * row, row));
    if (i == 254) {
      EXPECT_EQ(cache.encoded_tokens(), 0);
      EXPECT_EQ(cache.residual_tokens(), 255);
    }
  }
  EXPECT_EQ(cache.encoded_tokens(), 256);
  EXPECT_EQ(cache.residual_tokens(), 44);
  EXPECT_EQ(cache.store(0).tokens(), 256);
}

// A cache object's blocks appended as bytes give the same stores and the same attention as
// encoding those tokens again, and a block that cannot follow is refused whole.
TEST(AttentionTest, EncodedBlocksAppendAsTheyWereWritten) {
  SyntheticConfig data = SmallData(11, 600);
  const SyntheticLayer layer = MakeSyntheticLayer(data);
  auto calibration = std::make_shared<const Calibration>(MakeSyntheticCalibration(data, 1024));
  auto tree = std::make_shared<const LloydTree>(8);
  ReadKvCacheOptions options;
  options.policy = {ReaderKind::kConstrained, 4.0, 0, 0};
  ReadKvLayerCache written(data.geometry, calibration, 0, tree, options);
  ReadKvLayerCache restored(data.geometry, calibration, 0, tree, options);
  written.AppendTokens(layer.keys, layer.values);  // 2 blocks + 88 tokens in the window
  const size_t row = 2 * 64;
  for (int64_t block = 0; block < 2; ++block) {
    std::vector<std::vector<uint8_t>> heads;
    for (int h = 0; h < 2; ++h) heads.push_back(written.store(h).BlockBytes(block));
    restored.AppendEncodedBlock(heads);
  }
  EXPECT_EQ(restored.encoded_tokens(), 512);
  for (int64_t i = 512; i < 600; ++i) {
    restored.Append(std::span<const float>(layer.keys).subspan(i * row, row),
                    std::span<const float>(layer.values).subspan(i * row, row));
  }
  for (int h = 0; h < 2; ++h) {
    for (int64_t block = 0; block < 2; ++block) {
      EXPECT_EQ(restored.store(h).BlockBytes(block), written.store(h).BlockBytes(block));
    }
  }
  std::vector<float> out_written(layer.queries.size()), out_restored(layer.queries.size());
  written.Attend(layer.queries, out_written);
  restored.Attend(layer.queries, out_restored);
  EXPECT_EQ(out_written, out_restored);

  // Refused whole, naming the field: a block after the window's 88 tokens, a missing head, a
  // truncated block.
  std::vector<std::vector<uint8_t>> heads{written.store(0).BlockBytes(0),
                                          written.store(1).BlockBytes(0)};
  const auto field = [&](ReadKvLayerCache& cache, std::span<const std::vector<uint8_t>> blocks) {
    try {
      cache.AppendEncodedBlock(blocks);
    } catch (const InvalidArgument& e) {
      return std::string(e.field());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(field(restored, heads), "tokens");
  ReadKvLayerCache empty(data.geometry, calibration, 0, tree, options);
  EXPECT_EQ(field(empty, std::span(heads).first(1)), "head_blocks");
  heads[1].pop_back();
  EXPECT_EQ(field(empty, heads), "head_blocks");
  EXPECT_EQ(empty.tokens(), 0);
  EXPECT_EQ(empty.store(0).tokens(), 0);
}

TEST(AttentionTest, Fp8ErrorIsSmallVersusDense) {
  for (Fp8ScaleGranularity scale : {Fp8ScaleGranularity::kTensor, Fp8ScaleGranularity::kHead}) {
    AttentionExperimentConfig config;
    config.data = SmallData(10);
    config.cache.backend = KvBackend::kFp8;
    config.cache.fp8_scale = scale;
    const AttentionExperimentResult r = RunAttentionExperiment(config);
    // e4m3 keeps 4 significant bits: about 2^-5 relative rounding per scalar.
    EXPECT_LT(r.rel_l2_error, 0.05);
    EXPECT_GT(r.rel_l2_error, 1e-4);
    EXPECT_EQ(r.ledgers.capacity.payload_bytes, 2 * 1024 * 2 * 64);
  }
}

// A head with values 10^4 x louder sets the per-tensor scale, pushing the quiet heads' values into
// e4m3's subnormal range; per-head scales keep every head in range.
TEST(AttentionTest, Fp8PerHeadScalesBeatPerTensorOnALoudHead) {
  SyntheticConfig data = SmallData(11);
  data.geometry = {8, 4, 64};
  data.loud_value_head = 0;
  data.loud_value_scale = 1e4f;
  const SyntheticLayer layer = MakeSyntheticLayer(data);
  auto calibration = std::make_shared<const Calibration>(MakeSyntheticCalibration(data, 2048));
  const std::vector<double> exact =
      ReferenceAttention(data.geometry, layer.keys, layer.values, layer.queries);
  const size_t quiet_begin = 2 * 64;  // query heads 2.. use KV heads 1..3
  const std::span<const double> exact_quiet = std::span<const double>(exact).subspan(quiet_begin);
  double error[2] = {};
  int index = 0;
  for (Fp8ScaleGranularity scale : {Fp8ScaleGranularity::kTensor, Fp8ScaleGranularity::kHead}) {
    Fp8LayerCache cache(data.geometry, *calibration, 0, scale);
    cache.AppendTokens(layer.keys, layer.values);
    std::vector<float> out(layer.queries.size());
    cache.Attend(layer.queries, out);
    error[index++] = RelativeL2Error(std::span<const float>(out).subspan(quiet_begin), exact_quiet);
  }
  EXPECT_LE(error[1], error[0]);
  EXPECT_LT(error[1], 0.05);
}

TEST(AttentionTest, BadShapesAndConfigsNameTheField) {
  DenseLayerCache dense({8, 2, 64});
  std::vector<float> q(8 * 64), out(8 * 64);
  try {
    dense.Attend(q, out);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "tokens");
  }
  std::vector<float> short_row(64);
  try {
    dense.Append(short_row, short_row);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "keys");
  }
  LayerCacheConfig config;
  config.backend = KvBackend::kReadKv;
  config.geometry = {8, 2, 64};
  try {
    MakeLayerKvCache(config);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "calibration");
  }
  config.geometry = {8, 3, 64};
  EXPECT_THROW(MakeLayerKvCache(config), InvalidArgument);
  config.geometry = {8, 2, 96};
  try {
    MakeLayerKvCache(config);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "head_dim");
  }
  SyntheticConfig data = SmallData(1, 16);
  config.geometry = {8, 2, 64};
  config.calibration = std::make_shared<const Calibration>(MakeSyntheticCalibration(data, 64));
  config.geometry = {8, 4, 64};
  try {
    MakeLayerKvCache(config);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "calibration");
  }
  EXPECT_THROW(ParseKvBackend("int4"), InvalidArgument);
}

// The names are a persisted format (reports, history, metrics labels, /v1/models): exactly these
// strings, and ParseKvBackend reads back what KvBackendName writes, for every backend.
TEST(AttentionTest, KvBackendNamesArePinnedAndRoundTrip) {
  EXPECT_EQ(KvBackendName(KvBackend::kDense), "dense");
  EXPECT_EQ(KvBackendName(KvBackend::kFp8), "fp8");
  EXPECT_EQ(KvBackendName(KvBackend::kReadKv), "readkv");
  for (const KvBackend backend : kKvBackends) {
    EXPECT_EQ(ParseKvBackend(KvBackendName(backend)), backend) << KvBackendName(backend);
  }
  for (const char* bad : {"", "Dense", "fp8 ", "readkv:8:4", "0"}) {
    try {
      ParseKvBackend(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "kv");
      EXPECT_EQ(std::string(e.what()),
                "kv: must be dense, fp8 or readkv, got '" + std::string(bad) + "'");
    }
  }
}

TEST(AttentionTest, SyntheticDataIsDeterministicAndPlantsAHighAttentionToken) {
  const SyntheticConfig data = SmallData(12);
  const SyntheticLayer a = MakeSyntheticLayer(data);
  const SyntheticLayer b = MakeSyntheticLayer(data);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.queries, b.queries);
  ASSERT_GE(a.planted_token, 0);
  // The planted token takes a large share of the attention of its query heads.
  const int d = 64;
  double mean_share = 0.0;
  for (int h = 0; h < 8; ++h) {
    const int kv = h / 4;
    const float* q = a.queries.data() + h * d;
    std::vector<double> logits(static_cast<size_t>(a.tokens));
    double max_logit = -1e300;
    for (int64_t i = 0; i < a.tokens; ++i) {
      const float* k = a.keys.data() + (i * 2 + kv) * d;
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += q[c] * k[c];
      logits[static_cast<size_t>(i)] = dot / 8.0;
      max_logit = std::max(max_logit, logits[static_cast<size_t>(i)]);
    }
    double sum = 0;
    for (double l : logits) sum += std::exp(l - max_logit);
    const double share = std::exp(logits[static_cast<size_t>(a.planted_token)] - max_logit) / sum;
    EXPECT_GT(share, 0.05) << "head " << h;
    mean_share += share / 8;
  }
  EXPECT_GT(mean_share, 0.3);
  SyntheticConfig other = data;
  other.seed = 13;
  EXPECT_NE(MakeSyntheticLayer(other).keys, a.keys);
}

}  // namespace
}  // namespace readkv::codec
