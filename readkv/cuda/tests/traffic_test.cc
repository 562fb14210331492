// The Logits reader choice (ReadKvUsesMmaLogits) and the traffic model that follows it: host code
// shared by the launcher, the bench and the CUDA KV backend, so it is pinned in every build.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "readkv/cuda/decode_attention.h"
#include "select_share.h"

namespace readkv::cuda {
namespace {

// Sets KVGATE_READKV_LOGITS for one scope (nullptr: unset), restoring it after.
class LogitsEnv {
 public:
  explicit LogitsEnv(const char* value) {
    const char* old = std::getenv("KVGATE_READKV_LOGITS");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value == nullptr) {
      unsetenv("KVGATE_READKV_LOGITS");
    } else {
      setenv("KVGATE_READKV_LOGITS", value, 1);
    }
  }
  ~LogitsEnv() {
    if (had_) {
      setenv("KVGATE_READKV_LOGITS", old_.c_str(), 1);
    } else {
      unsetenv("KVGATE_READKV_LOGITS");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

// The Llama-3-8B geometry (32 query heads, 8 KV heads, d = 128) at a batch, length and chunk.
DecodeShape LlamaShape(int batch, int max_tokens, int chunk_tokens) {
  DecodeShape shape;
  shape.batch = batch;
  shape.heads_q = 32;
  shape.heads_kv = 8;
  shape.head_dim = 128;
  shape.max_tokens = max_tokens;
  shape.max_pages = (max_tokens + kPageTokens - 1) / kPageTokens;
  shape.chunk_tokens = chunk_tokens;
  return shape;
}

TEST(ReadKvLogitsReaderTest, TensorCoresUpToTwoKeyBitsOrTwoPageChunksUnlessTheEnvironmentPicks) {
  {
    const LogitsEnv env(nullptr);
    EXPECT_TRUE(ReadKvUsesMmaLogits(1.0, 1024));
    EXPECT_TRUE(ReadKvUsesMmaLogits(2.0, 2048));
    EXPECT_FALSE(ReadKvUsesMmaLogits(2.5, 1024));
    EXPECT_FALSE(ReadKvUsesMmaLogits(7.0, 2048));
    EXPECT_TRUE(ReadKvUsesMmaLogits(7.0, 512));  // two pages: the transposed reader's lanes idle
    EXPECT_TRUE(ReadKvUsesMmaLogits(7.0, 256));
  }
  {
    const LogitsEnv env("mma");
    EXPECT_TRUE(ReadKvUsesMmaLogits(7.0, 2048));
  }
  {
    const LogitsEnv env("wide4");
    EXPECT_FALSE(ReadKvUsesMmaLogits(2.0, 256));
  }
}

TEST(ReadKvLogitsReaderTest, TrafficCountsWhatEachReaderReadsPerChunk) {
  const LogitsEnv env(nullptr);
  const DecodeShape shape = LlamaShape(2, 8192, 1024);
  const std::vector<int32_t> lens = {8192, 3000};  // 8 and 3 chunks
  const TrafficBytes mma = ReadKvDecodeTraffic(shape, lens.data(), 8, 2.0, nullptr, nullptr);
  const TrafficBytes wide = ReadKvDecodeTraffic(shape, lens.data(), 8, 4.0, nullptr, nullptr);
  // Per row and chunk, the transposed reader copies the row's entry list (2696 bytes) and the
  // tensor-core one reads the row's d Key depths; nothing else differs.
  const int64_t row_chunks = int64_t{8} * (8 + 3);
  EXPECT_EQ(wide.schedule - mma.schedule, row_chunks * (2696 - 128));
  EXPECT_EQ(wide.Total() - mma.Total(), wide.schedule - mma.schedule);
  EXPECT_EQ(wide.payload, 0);  // no depths given: the payload is the device's to sum
}

// Select keeps a row's importances (doubles) in its 8 blocks' shared memory up to 160 KB a
// block, i.e. rows of up to 8 x 20480 tokens; past that they are written to the workspace and
// read back, 16 bytes per token in the ledger's scores.
TEST(ReadKvSelectTrafficTest, ImportancesCountOnlyWhenTheyLeaveSharedMemory) {
  const LogitsEnv env(nullptr);
  const auto scores = [](int tokens) {
    DecodeShape shape;
    shape.batch = 1;
    shape.heads_q = 4;
    shape.heads_kv = 2;
    shape.head_dim = 64;
    shape.max_tokens = tokens;
    shape.max_pages = (tokens + kPageTokens - 1) / kPageTokens;
    shape.chunk_tokens = 2048;
    const std::vector<int32_t> lens = {tokens};
    return ReadKvDecodeTraffic(shape, lens.data(), 8, 4.0, nullptr, nullptr).scores;
  };
  // Per KV head: logits written once and read twice (2 query heads x 4 bytes x 3). A row's
  // importances stay in shared memory up to 20480 doubles (160 KB) per block of its cluster.
  const auto logits = [](int64_t tokens) { return 2 * (3 * 2 * tokens * 4); };
  const int most = internal::kSelectCluster * 20480;  // 2 rows: clusters of 8 (SelectGridFor)
  EXPECT_EQ(scores(most), logits(most));
  EXPECT_EQ(scores(most + 1), logits(most + 1) + 2 * (int64_t{most + 1} * 16));
}

// The dense kernel's cluster schedule at the bench's 32K x 16 (equal lengths, 128 heads x 2
// blocks): one launch that reads what the persistent one reads and writes only the outputs; the
// persistent schedule (lengths not known to be even) adds the partials' round trip and the merge
// launch.
TEST(KernelTrafficTest, ClusterScheduleMovesNoPartials) {
  DecodeShape shape = LlamaShape(16, 32768, 1024);
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
  const LogitsEnv env(nullptr);
  const DecodeShape shape = LlamaShape(2, 4096, 1024);
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

  // ReadKV with every token's Values at depth 3 (48 bytes: two sectors) and Keys at 4 planes.
  std::vector<uint8_t> key_depths(2 * 8 * 128, 4), value_depths(2 * 8 * 4096, 3);
  const TrafficBytes bare = ReadKvDecodeTraffic(shape, lens.data(), 8, 4.0, nullptr, nullptr);
  const TrafficBytes full =
      ReadKvDecodeTraffic(shape, lens.data(), 8, 4.0, key_depths.data(), value_depths.data());
  EXPECT_EQ(named(full), (std::vector<std::string>{"Prepare", "Logits", "Select", "Values"}));
  EXPECT_EQ(sum(bare), bare.Total());
  EXPECT_EQ(sum(full), full.Total());
  const int64_t blocks = 16 + 4, tokens = 4096 + 1000, chunks = 4 + 1;
  const int64_t key_payload = 8 * 128 * 4 * blocks * 32;
  const int64_t value_payload = 8 * tokens * 64;
  EXPECT_EQ(full.payload, key_payload + value_payload);
  EXPECT_EQ(full.kernels[1].read - bare.kernels[1].read, key_payload);    // Logits
  EXPECT_EQ(full.kernels[3].read - bare.kernels[3].read, value_payload);  // Values
  for (int k : {0, 2}) {
    EXPECT_EQ(full.kernels[k].read, bare.kernels[k].read);
    EXPECT_EQ(full.kernels[k].write, bare.kernels[k].write);
  }
  // Logits writes the scores (4 query heads per KV head) and each chunk's (m, l) of each head;
  // Select reads the scores and writes the Value depths (a byte a token) and the heads' softmax
  // statistics; Values reads the scores too and writes its partials and the outputs.
  const int64_t g = 4, rows_tokens = 8 * tokens, rows_chunks = 8 * chunks;
  EXPECT_EQ(full.kernels[1].write, g * rows_tokens * 4 + g * rows_chunks * 8);
  EXPECT_EQ(full.kernels[2].write, rows_tokens + 2 * 8 * g * 8);
  EXPECT_EQ(full.kernels[3].write, g * rows_chunks * 129 * 4 + outputs);
  EXPECT_GE(full.kernels[3].read, value_payload + g * rows_tokens * 4 + 2 * rows_tokens);
  // Reads, worked out per row (16 rows) where they do not depend on the depths: Prepare reads the
  // Key calibration and signs (3 x 128 floats), the centroid table (511 floats) and the group's
  // queries, and writes the Key depths, the row's entry list (2696 bytes), a_qc and the bias.
  const int64_t centroids = 511 * 4, per_chunk_qa = g * 129 * 4;
  EXPECT_EQ(full.kernels[0].read, 16 * (3 * 128 * 4 + centroids + g * 128 * 4));
  EXPECT_EQ(full.kernels[0].write, 16 * (128 + 2696 + per_chunk_qa));
  // Logits, per chunk: the centroids, the entry list (the transposed reader at R_K = 4, chunks of
  // 1024) and a_qc with the bias; a page-table entry per 256 tokens; the Key planes.
  const int64_t pages = 8 * blocks;
  EXPECT_EQ(full.kernels[1].read,
            key_payload + rows_chunks * (centroids + 2696 + per_chunk_qa) + pages * 4);
  // Select (16 rows: clusters of 8 blocks, importances in shared memory): the logits, and every
  // block of the cluster reads each chunk's (m, l) of each head.
  EXPECT_EQ(full.kernels[2].read, g * rows_tokens * 4 + g * rows_chunks * 8 * 8);
}

// Select's launch shape: twice the warps while the grid (kSelectCluster blocks per row) fits on
// the 132 SMs one block to an SM; past that, half the blocks per row while they still more than
// fill the SMs and a share at kSelectCluster is under 2048 tokens, and half again while that
// holds at kSelectNarrowCluster; else kSelectCluster blocks of kSelectThreads.
TEST(SelectGridTest, FollowsTheGridAndTheShares) {
  using internal::SelectGridFor;
  const int c = internal::kSelectCluster, narrow = internal::kSelectNarrowCluster;
  const int n = internal::kSelectThreads, w = internal::kSelectWideThreads;
  const long long fit = internal::kAssumedSms / c;  // 16 rows at clusters of 8
  const auto is = [](internal::SelectGrid g, int cluster, int threads) {
    return g.cluster == cluster && g.threads == threads;
  };
  EXPECT_TRUE(is(SelectGridFor(1, 8192), c, w));
  EXPECT_TRUE(is(SelectGridFor(fit, 32768), c, w));
  EXPECT_TRUE(is(SelectGridFor(fit + 1, 8192), c, n));  // 4-block clusters would leave SMs idle
  EXPECT_TRUE(is(SelectGridFor(internal::kAssumedSms / narrow, 8192), c, n));
  EXPECT_TRUE(is(SelectGridFor(internal::kAssumedSms / narrow + 1, 8192), narrow, n));
  EXPECT_TRUE(is(SelectGridFor(16 * 8, 8192), narrow, n));  // 8K x 16, 8 KV heads
  // Shares at 4 under 2048 tokens, with 2-block clusters still more than filling the SMs.
  EXPECT_TRUE(is(SelectGridFor(16 * 8, 8192 - 4), internal::kSelectNarrowestCluster, n));
  EXPECT_TRUE(is(SelectGridFor(16 * 4, 4096), narrow, n));  // 2-block clusters: 128 blocks
  EXPECT_TRUE(is(SelectGridFor(16 * 8, 16384 - c), narrow, n));  // shares of 2047 tokens
  EXPECT_TRUE(is(SelectGridFor(16 * 8, 16384), c, n));           // shares of 2048
  EXPECT_TRUE(is(SelectGridFor(16 * 8, 32768), c, n));           // 32K x 16
  EXPECT_TRUE(is(SelectGridFor(16 * 2, 16384), c, n));  // the go/no-go model's 16K x 16
  EXPECT_EQ(w, 2 * n);
  EXPECT_EQ(narrow * 2, c);
}

// The automatic chunk (what kvgate serve's calls use, and the bench's default): the largest of
// 2048 .. 256 that leaves ~2 blocks per SM of 132, raised until a row has at most 32 chunks. The
// H200 sweeps of 2026-11-30 (docs/performance-notes.md, "The chunk per thread block") found it
// the fastest measured choice at 32K x 16 (32/8/128), 16K x 16 (8/2/64) and 32K x 1, and within
// 8% of the best at 8K x 1.
TEST(ReadKvChunkTokensTest, PicksTheLargestChunkThatStillFillsTheGpu) {
  DecodeShape shape;
  shape.chunk_tokens = 0;
  const auto chunk = [&](int batch, int heads_kv, int tokens) {
    shape.batch = batch;
    shape.heads_kv = heads_kv;
    shape.max_tokens = tokens;
    return ReadKvChunkTokens(shape);
  };
  EXPECT_EQ(chunk(16, 8, 32768), 2048);  // 128 rows x 16 chunks = 2048 blocks
  EXPECT_EQ(chunk(16, 2, 16384), 1024);  // 2048 would give 256 blocks < 264
  EXPECT_EQ(chunk(1, 8, 8192), 256);     // the floor: one page
  EXPECT_EQ(chunk(1, 8, 100), 256);
  EXPECT_EQ(chunk(1, 8, 32768), 1024);   // 512 fills the GPU better, but 64 chunks per row
  EXPECT_EQ(chunk(1, 8, 131072), 2048);  // the ceiling, even at 64 chunks per row
  shape.chunk_tokens = 512;  // the caller's choice wins
  EXPECT_EQ(ReadKvChunkTokens(shape), 512);
}

}  // namespace
}  // namespace readkv::cuda
