// The dense and FP8 kernels' traffic model (decode_attention.h, traffic.cc): host code shared by
// the launchers' schedule, the bench and the CUDA KV backend, so it is pinned in every build. The
// tile reader's is tile_ledgers_test.cc's.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "readkv/cuda/decode_attention.h"

namespace readkv::cuda {
namespace {

// The Llama-3-8B geometry (32 query heads, 8 KV heads, d = 128) at a batch and length.
DecodeShape LlamaShape(int batch, int max_tokens) {
  DecodeShape shape;
  shape.batch = batch;
  shape.heads_q = 32;
  shape.heads_kv = 8;
  shape.head_dim = 128;
  shape.max_tokens = max_tokens;
  shape.max_pages = (max_tokens + kPageTokens - 1) / kPageTokens;
  return shape;
}

// The dense kernel's cluster schedule at the bench's 32K x 16 (equal lengths, 128 heads x 2
// blocks): one launch that reads what the persistent one reads and writes only the outputs; the
// persistent schedule (lengths not known to be even) adds the partials' round trip and the merge
// launch.
TEST(KernelTrafficTest, ClusterScheduleMovesNoPartials) {
  DecodeShape shape = LlamaShape(16, 32768);
  const std::vector<int32_t> lens(16, 32768);
  shape.min_tokens = 32768;
  const TrafficBytes cluster = DenseDecodeTraffic(shape, lens.data());
  shape.min_tokens = 0;
  const TrafficBytes persistent = DenseDecodeTraffic(shape, lens.data());
  ASSERT_NE(cluster.kernels[0].kernel, nullptr);
  EXPECT_STREQ(cluster.kernels[0].kernel, "SplitDecodeKernel");
  EXPECT_EQ(cluster.kernels[1].kernel, nullptr);
  EXPECT_EQ(cluster.partials, 0);
  const int64_t outputs = int64_t{16} * 32 * 128 * 4;
  EXPECT_EQ(cluster.kernels[0].write, outputs);
  // Each of a head's 2 blocks reads the head's 4 queries.
  const int64_t queries = int64_t{16} * 8 * 2 * 4 * 128 * 4;
  EXPECT_EQ(cluster.io, queries + outputs);
  EXPECT_EQ(cluster.payload, persistent.payload);
  EXPECT_EQ(cluster.metadata, persistent.metadata);
  EXPECT_GT(persistent.partials, 0);
  ASSERT_NE(persistent.kernels[1].kernel, nullptr);
  EXPECT_STREQ(persistent.kernels[1].kernel, "CombineSplits");
  // A plan forces either schedule in the model as in the launcher.
  shape.min_tokens = 32768;
  EXPECT_EQ(DenseDecodeTraffic(shape, lens.data(), SplitPlan{0}).partials, persistent.partials);
  shape.min_tokens = 0;
  EXPECT_EQ(DenseDecodeTraffic(shape, lens.data(), SplitPlan{2}).partials, 0);
  EXPECT_EQ(DenseDecodeTraffic(shape, lens.data(), SplitPlan{3}).partials, persistent.partials);
}

// The model by launch (TrafficBytes::kernels): every term is some kernel's read or write, each
// cache payload goes to its reader, and what one launch writes for another is read there.
TEST(KernelTrafficTest, EachLaunchMovesItsShareAndTheSharesAddUpToTheTotal) {
  const DecodeShape shape = LlamaShape(2, 4096);
  const std::vector<int32_t> lens = {4096, 1000};
  const auto sum = [](const TrafficBytes& t) {
    int64_t bytes = 0;
    for (const KernelTraffic& k : t.kernels) bytes += k.read + k.write;
    return bytes;
  };
  const auto named = [](const TrafficBytes& t) {
    std::vector<std::string> names;
    for (const KernelTraffic& k : t.kernels) {
      if (k.kernel != nullptr) names.emplace_back(k.kernel);
    }
    return names;
  };
  const TrafficBytes fp8 = Fp8DecodeTraffic(shape, lens.data());
  EXPECT_EQ(named(fp8), (std::vector<std::string>{"SplitDecodeKernel", "CombineSplits"}));
  EXPECT_EQ(sum(fp8), fp8.Total());
  EXPECT_GT(fp8.kernels[0].read, fp8.payload);  // the cache, page entries, scales, queries
  EXPECT_EQ(fp8.kernels[0].write, fp8.partials / 2);  // partials, written once, read once
  const int64_t outputs = int64_t{2} * 32 * 128 * 4;
  EXPECT_EQ(fp8.kernels[1].read, fp8.partials / 2);
  EXPECT_EQ(fp8.kernels[1].write, outputs);
  const TrafficBytes dense = DenseDecodeTraffic(shape, lens.data());
  EXPECT_EQ(sum(dense), dense.Total());
  EXPECT_EQ(dense.payload, 2 * fp8.payload);
  EXPECT_GT(dense.kernels[0].read, dense.payload);
  EXPECT_EQ(dense.kernels[1].write, outputs);
}

}  // namespace
}  // namespace readkv::cuda
