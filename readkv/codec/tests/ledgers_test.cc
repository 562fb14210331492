#include "readkv/codec/ledgers.h"

#include <gtest/gtest.h>

#include <string>

#include "readkv/codec/attention.h"
#include "readkv/codec/attention_experiment.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

TEST(LedgersTest, PayloadModelGivesThePapersExtraWriteRatio) {
  const PayloadWriteReadModel m = ComputePayloadWriteReadModel(8192, 128, 8, 4.0, 4);
  EXPECT_EQ(m.history_reads, 128 * 8192 + 128 * 127 / 2);  // 1056704
  EXPECT_EQ(m.extra_write_bits_per_lane, 4 * (8192 + 128));
  EXPECT_DOUBLE_EQ(m.read_bits_per_lane, 4.0 * 1056704);
  // 33280 / 4226816 = 0.787%.
  EXPECT_NEAR(100.0 * m.extra_write_ratio, 0.787, 0.0005);
  EXPECT_DOUBLE_EQ(m.capacity_ratio, 2.0);
  EXPECT_EQ(m.write_bits_per_lane - m.baseline_write_bits_per_lane, m.extra_write_bits_per_lane);
}

TEST(LedgersTest, PayloadModelRejectsBadArgumentsByName) {
  const auto field = [](int64_t n, int64_t l, int w, double r, int b) {
    try {
      ComputePayloadWriteReadModel(n, l, w, r, b);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string();
  };
  EXPECT_EQ(field(-1, 128, 8, 4, 4), "prompt_tokens");
  EXPECT_EQ(field(8192, 0, 8, 4, 4), "decode_steps");
  EXPECT_EQ(field(8192, 128, 0, 4, 4), "store_bits");
  EXPECT_EQ(field(8192, 128, 8, 9, 4), "read_bits");
  EXPECT_EQ(field(8192, 128, 8, 4, 0), "baseline_bits");
  EXPECT_EQ(field(8192, 128, 8, 4, 4), "");
}

AttentionExperimentResult RunCase(KvBackend backend, int64_t tokens, ReadPolicy policy = {},
                                  bool window = true) {
  AttentionExperimentConfig config;
  config.data.geometry = {8, 2, 64};
  config.data.tokens = tokens;
  config.data.seed = 21;
  config.cache.backend = backend;
  config.cache.policy = policy;
  config.cache.residual_window = window;
  config.calibration_samples = 1024;
  return RunAttentionExperiment(config);
}

TEST(LedgersTest, DenseAndFp8ReadAllTheirPayload) {
  for (KvBackend backend : {KvBackend::kDense, KvBackend::kFp8}) {
    const AttentionLedgers l = RunCase(backend, 512).ledgers;
    EXPECT_EQ(l.logical.Bytes(), l.capacity.payload_bytes);
    EXPECT_EQ(l.physical.key_payload_bytes + l.physical.value_payload_bytes,
              l.capacity.payload_bytes);
    // Scores and probabilities are real traffic on top of the payload.
    EXPECT_EQ(l.physical.score_bytes, 4 * 8 * 512 * 4);
    EXPECT_GT(l.physical.Total(), l.logical.Bytes());
    EXPECT_GE(l.workspace_peak_bytes, 4 * 512 * 4);  // one group's logits
  }
}

TEST(LedgersTest, ReadKvCapacityIsPlanesPlusMetadataPlusWindow) {
  const AttentionLedgers l = RunCase(KvBackend::kReadKv, 600).ledgers;  // 512 encoded + 88 window
  const int64_t d = 64, heads = 2, w = 8;
  EXPECT_EQ(l.capacity.payload_bytes, heads * (2 * d * w * 32 + 512 * w * d / 8));
  EXPECT_EQ(l.capacity.metadata_bytes, heads * d * 4 * 4);
  EXPECT_EQ(l.capacity.residual_bytes, 88 * heads * d * 2 * 2);
  EXPECT_EQ(l.capacity.Total(),
            l.capacity.payload_bytes + l.capacity.metadata_bytes + l.capacity.residual_bytes);
}

TEST(LedgersTest, ReadKvPhysicalKeyReadsRoundUpToSectors) {
  // Window off and 300 tokens: the second block holds 44 tokens but a key plane read still moves
  // a whole 32-byte sector.
  const AttentionLedgers l =
      RunCase(KvBackend::kReadKv, 300, {ReaderKind::kConstrained, 4.0, 0, 0}, false).ledgers;
  const int64_t key_depth_sum = 2 * 64 * 4;  // constrained: exactly R * d per head
  EXPECT_EQ(l.logical.key_bits, key_depth_sum * 300);
  EXPECT_EQ(l.physical.key_payload_bytes, key_depth_sum * 2 * 32);
  EXPECT_GT(l.physical.key_payload_bytes * 8, l.logical.key_bits);
  EXPECT_EQ(l.physical.value_payload_bytes * 8, l.logical.value_bits);
}

TEST(LedgersTest, ReadKvTrafficCountsIntermediatesBeyondThePayload) {
  const AttentionLedgers l =
      RunCase(KvBackend::kReadKv, 1024, {ReaderKind::kConstrained, 2.0, 0, 0}).ledgers;
  const int64_t payload = l.physical.key_payload_bytes + l.physical.value_payload_bytes;
  EXPECT_GT(l.physical.score_bytes, 0);
  EXPECT_EQ(l.physical.schedule_bytes, 2 * (2 * 64 + 2 * 1024));
  EXPECT_GT(l.physical.Total(), payload + l.physical.score_bytes);
  EXPECT_GT(l.workspace_peak_bytes, 8 * 1024 * 4);  // all query heads' probabilities
  EXPECT_GT(l.encode.bytes_written, 0);
  EXPECT_GT(l.encode.seconds, 0.0);
  EXPECT_EQ(l.encode.tokens_appended, 1024);
}

TEST(LedgersTest, OutlierListModelSharesOfThePayload) {
  // 0.2% of the values listed, d = 64, W = 8, R = 4: 4 bytes an entry and 4 header bytes per
  // (block, KV head) over 2 * 256 * 64 scalars.
  const OutlierListModel m = ComputeOutlierListModel(0.002, 64, 8, 4.0);
  const double bytes = 4 * 0.002 + 4.0 / (2 * 256 * 64);
  EXPECT_DOUBLE_EQ(m.bytes_per_scalar, bytes);
  EXPECT_DOUBLE_EQ(m.capacity_share, bytes / 1.0);
  EXPECT_DOUBLE_EQ(m.logical_read_share, 8 * bytes / 4.0);
  EXPECT_DOUBLE_EQ(m.physical_traffic_share, m.logical_read_share);
  EXPECT_EQ(m.workspace_bytes, 0);
  // Reading fewer bits makes the same lists a larger share of the reads.
  EXPECT_GT(ComputeOutlierListModel(0.002, 64, 8, 2.0).logical_read_share, m.logical_read_share);
  EXPECT_THROW(ComputeOutlierListModel(-0.1, 64, 8, 4.0), InvalidArgument);
  EXPECT_THROW(ComputeOutlierListModel(0.002, 64, 8, 9.0), InvalidArgument);
}

}  // namespace
}  // namespace readkv::codec
