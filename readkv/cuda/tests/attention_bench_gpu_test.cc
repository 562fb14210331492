// `kvgate bench attention` on a GPU, through RunAttentionBench (no torch anchor): the tile reader's
// rows beside the dense and FP8 rows on the same data, at a small point (skipped without a GPU).
// KVGATE_TILE_BENCH=T,B benches another point (e.g. the 32768,16) and prints its table.
//
// What must hold: every row runs and is finite; a tile row's payload traffic is exactly its
// logical plane sectors (no residual window), its launches add up to its total, its logical reads
// stay within the budget R/W of the planes (and halve with R), and its error against dense is
// what the CPU's tile reader gives on such data.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "readkv/cuda/attention_bench.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_attention.h"

namespace readkv::cuda {
namespace {

const BenchRow& RowOf(const BenchReport& report, const std::string& kv) {
  for (const BenchRow& r : report.rows) {
    if (r.kv == kv) return r;
  }
  throw std::runtime_error("no row " + kv);
}

BenchConfig SmallConfig(const std::string& kv) {
  BenchConfig config;
  config.tokens = {2048};
  config.batches = {2};
  config.kv = ParseKvSpecs(kv);
  config.iters = 20;
  config.min_total_ms = 0;
  if (const char* point = std::getenv("KVGATE_TILE_BENCH")) {
    const std::vector<int64_t> tb = ParsePositiveList("KVGATE_TILE_BENCH", point);
    if (tb.size() == 2) {
      config.tokens = {tb[0]};
      config.batches = {tb[1]};
      config.iters = 50;
      config.min_total_ms = 200;
    }
  }
  return config;
}

// The bench's report, its table printed; an exception fails the test with the progress so far.
BenchReport RunBench(const BenchConfig& config) {
  std::ostringstream progress;
  try {
    BenchReport report = RunAttentionBench(config, nullptr, &progress);
    PrintBenchTable(report, std::cout);
    return report;
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "\nprogress:\n" << progress.str();
    return {};
  }
}

TEST(AttentionBenchGpuTest, TileRowsRunBesideDenseAndFp8OnTheSameData) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const BenchReport report =
      RunBench(SmallConfig("dense,fp8,tile:8:4,tile:8:2,tile-kbytes:8:5:8:2"));
  ASSERT_EQ(report.rows.size(), 5u);
  for (const BenchRow& r : report.rows) EXPECT_TRUE(r.finite) << r.kv;
  const BenchRow fp8 = RowOf(report, "fp8");
  for (const char* kv : {"tile:8:4", "tile:8:2", "tile-kbytes:8:5:8:2"}) {
    const BenchRow t = RowOf(report, kv);
    EXPECT_EQ(t.backend, codec::KvBackend::kReadKv) << kv;
    EXPECT_GE(t.chunk_tokens, kTileChunkStep) << kv;
    EXPECT_EQ(t.traffic.payload, t.logical_bytes) << kv;
    int64_t launches = 0;
    for (const KernelTraffic& k : t.traffic.kernels) launches += k.read + k.write;
    EXPECT_EQ(launches, t.traffic.Total()) << kv;
    EXPECT_GT(t.workspace_bytes, 0) << kv;
    EXPECT_GT(t.capacity_bytes, 0) << kv;
    EXPECT_GT(t.time.median_us, 0.0) << kv;
  }
  const BenchRow t4 = RowOf(report, "tile:8:4");
  const BenchRow t2 = RowOf(report, "tile:8:2");
  // FP8 reads a byte a scalar: R bits are R/8 of that, never more (floor budgets).
  EXPECT_LE(t4.logical_bytes, fp8.logical_bytes / 2);
  EXPECT_GE(t4.logical_bytes, fp8.logical_bytes / 2 * 9 / 10);
  EXPECT_LE(t2.logical_bytes, fp8.logical_bytes / 4);
  EXPECT_GE(t2.logical_bytes, fp8.logical_bytes / 4 * 9 / 10);
  // On the CPU (`kvgate codec attention --tokens 2048 --no-residual-window`, seeds 1-4) the tile
  // reader's error at R = 4 was 0.066-0.104 and 0.32-0.34 at R = 2; planes in the wrong place
  // give errors near 1.
  EXPECT_LT(t4.rel_l2_vs_dense, 0.3);
  EXPECT_LT(t4.rel_l2_vs_dense, t2.rel_l2_vs_dense);
  EXPECT_LT(t2.rel_l2_vs_dense, 0.6);
}

// A tile spec alone, with ragged lengths.
TEST(AttentionBenchGpuTest, ATileSpecAloneTakesRaggedLengths) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  BenchConfig config = SmallConfig("dense,tile:4:2:3:1");
  config.ragged = true;
  config.tokens = {1000};
  config.batches = {3};
  const BenchReport report = RunBench(config);
  ASSERT_EQ(report.rows.size(), 2u);
  const BenchRow t = RowOf(report, "tile:4:2:3:1");
  EXPECT_TRUE(t.finite);
  EXPECT_EQ(t.traffic.payload, t.logical_bytes);
  EXPECT_GT(t.rel_l2_vs_dense, 0.0);
  EXPECT_LT(t.rel_l2_vs_dense, 0.9);  // the CPU's tile reader at W 4, 3:1, 1000 tokens: ~0.6
}

// --outlier-cap: the tile rows read lists built on the host from the same tokens (rare on this
// Gaussian data: |z| > 3.99 is ~7e-5 of the values); the ledgers count them and the error does
// not grow.
TEST(AttentionBenchGpuTest, TileRowsWithOutlierListsCountThem) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  BenchConfig config = SmallConfig("dense,tile:8:4");
  const BenchReport without = RunBench(config);
  config.outlier_cap = 2;
  const BenchReport with = RunBench(config);
  ASSERT_EQ(without.rows.size(), 2u);
  ASSERT_EQ(with.rows.size(), 2u);
  const BenchRow a = RowOf(without, "tile:8:4");
  const BenchRow b = RowOf(with, "tile:8:4");
  EXPECT_TRUE(b.finite);
  // At least the offsets: K and V x B x H_kv rows x (tiles + 1) u32.
  const int64_t rows = int64_t{config.heads_kv} * config.batches[0];
  const int64_t offsets = 2 * rows * (config.tokens[0] / 16 + 1) * 4;
  EXPECT_GE(b.capacity_bytes - a.capacity_bytes, offsets);
  EXPECT_GE(b.logical_bytes - a.logical_bytes, offsets / 2);  // depths may move a little
  EXPECT_GE(b.traffic.payload, b.logical_bytes);  // whole sectors of the lists
  EXPECT_LT(b.rel_l2_vs_dense, 1.1 * a.rel_l2_vs_dense + 0.01);
}

}  // namespace
}  // namespace readkv::cuda
