// The schedules of the dense and FP8 kernels (src/split_work.h): host math shared by the
// kernels, the combine and the traffic model, so it is pinned here in every build.
#include "split_work.h"

#include "readkv/cuda/decode_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

namespace readkv::cuda::internal {
namespace {

TEST(SplitWorkTest, RangesTileTheWorkExactlyAndDifferByAtMostOne) {
  for (const int batch : {1, 3, 16}) {
    for (const int heads_kv : {1, 8}) {
      for (const int64_t tokens : {1, 63, 64, 65, 1000, 8192, 32768}) {
        for (const int blocks : {1, 7, 132, 264, 396, 5000}) {
          const SplitWork w = MakeSplitWork(batch, heads_kv, tokens, blocks);
          ASSERT_EQ(w.per_head, (tokens + 63) / 64);
          ASSERT_EQ(w.tiles, int64_t{batch} * heads_kv * w.per_head);
          ASSERT_GE(w.grid, 1);
          ASSERT_LE(w.grid, std::min<int64_t>({w.tiles, blocks, kMaxSplitBlocks}));
          EXPECT_EQ(w.Begin(0), 0);
          EXPECT_EQ(w.Begin(w.grid), w.tiles);
          const int64_t shortest = w.tiles / w.grid;
          for (int k = 0; k < w.grid; ++k) {
            const int64_t size = w.Begin(k + 1) - w.Begin(k);
            ASSERT_TRUE(size == shortest || size == shortest + 1)
                << "block " << k << " of " << w.grid << " has " << size << " tiles";
          }
        }
      }
    }
  }
}

TEST(SplitWorkTest, BlockOfFindsTheRangeHoldingEveryTile) {
  const SplitWork w = MakeSplitWork(5, 8, 3000, 264);
  for (int64_t v = 0; v < w.tiles; ++v) {
    const int k = w.BlockOf(v);
    ASSERT_LE(w.Begin(k), v) << "tile " << v;
    ASSERT_LT(v, w.Begin(k + 1)) << "tile " << v;
  }
}

TEST(SplitWorkTest, SlotsHoldEveryBlockThatMeetsAHeadForAnyGrid) {
  // The workspace is sized once (for the largest grid); every smaller grid must fit in it.
  for (const int64_t tokens : {64, 700, 8192, 131072}) {
    for (const int batch : {1, 2, 16}) {
      const SplitWork sized = MakeSplitWork(batch, 8, tokens, kMaxSplitBlocks);
      for (const int blocks : {1, 100, 132, 264, 396, 1024}) {
        const SplitWork w = MakeSplitWork(batch, 8, tokens, blocks);
        ASSERT_EQ(w.slots, sized.slots);
        for (int head = 0; head < batch * 8; ++head) {
          const int64_t start = int64_t{head} * w.per_head;
          const int first = w.BlockOf(start);
          const int last = w.BlockOf(start + w.per_head - 1);
          ASSERT_LT(last - first, w.slots)
              << "head " << head << " meets " << last - first + 1 << " blocks, grid " << w.grid;
        }
      }
    }
  }
}

TEST(SplitWorkTest, ClusterRangesSplitEachHeadAmongItsOwnBlocks) {
  for (const int cluster : {1, 2, 4, 8}) {
    for (const int64_t tokens : {1, 64, 65, 300, 8192, 32768}) {
      const SplitWork w = MakeClusterWork(3, 8, tokens, cluster);
      ASSERT_EQ(w.grid, 3 * 8 * cluster);
      ASSERT_EQ(w.per_head, (tokens + 63) / 64);
      for (int head = 0; head < 24; ++head) {
        // Block r of the head's cluster: tiles [r per_head / C, (r + 1) per_head / C) of it, so
        // the cluster covers the head exactly and no block reaches another head.
        EXPECT_EQ(w.Begin(head * cluster), int64_t{head} * w.per_head);
        EXPECT_EQ(w.Begin((head + 1) * cluster), int64_t{head + 1} * w.per_head);
        for (int r = 0; r < cluster; ++r) {
          const int64_t size = w.Begin(head * cluster + r + 1) - w.Begin(head * cluster + r);
          EXPECT_GE(size, w.per_head / cluster) << "head " << head << " block " << r;
          EXPECT_LE(size, (w.per_head + cluster - 1) / cluster) << "head " << head;
        }
      }
    }
  }
}

TEST(SplitWorkTest, ClusterScheduleOnlyForEvenHeadsThatFillOneWave) {
  // The bench's 32K x 16 (128 heads): dense holds 264 blocks on an H200, 2 per head fill 97%.
  EXPECT_EQ(SplitClusterSize(128, 264, 32768, 32768), 2);
  // FP8 holds 396: 2 per head fill 65%, 4 per head need two waves.
  EXPECT_EQ(SplitClusterSize(128, 396, 32768, 32768), 0);
  // Batch 1 (8 heads): even 8 per head fill a quarter of the device.
  EXPECT_EQ(SplitClusterSize(8, 264, 8192, 8192), 0);
  EXPECT_EQ(SplitClusterSize(33, 264, 8192, 8192), 8);  // 264 of 264
  EXPECT_EQ(SplitClusterSize(264, 264, 100, 100), 1);
  EXPECT_EQ(SplitClusterSize(265, 264, 100, 100), 0);  // more heads than blocks: persistent
  // Lengths unknown (0) or more than 10% apart: persistent, whatever the fill.
  EXPECT_EQ(SplitClusterSize(128, 264, 0, 32768), 0);
  EXPECT_EQ(SplitClusterSize(128, 264, 29490, 32768), 0);
  EXPECT_EQ(SplitClusterSize(128, 264, 29492, 32768), 2);
}

// The plan's text form (the bench's --split-cluster) and its cluster size: automatic takes
// SplitClusterSize's, any other plan its own whatever the shape.
TEST(SplitWorkTest, SplitPlansParseTheirTextAndRefuseTheRest) {
  const std::pair<const char*, int> valid[] = {{"auto", -1}, {"off", 0}, {"1", 1},
                                               {"2", 2},     {"4", 4},    {"8", 8}};
  for (const auto& [text, expected] : valid) {
    SplitPlan plan{99};
    ASSERT_TRUE(ParseSplitPlan(text, &plan)) << text;
    EXPECT_EQ(plan.cluster, expected) << text;
    EXPECT_TRUE(plan.valid()) << text;
  }
  for (const char* text : {"", "3", "16", "0", "on", "2 ", "cluster", "-1"}) {
    SplitPlan plan{99};
    EXPECT_FALSE(ParseSplitPlan(text, &plan)) << "'" << text << "'";
    EXPECT_EQ(plan.cluster, 99) << text;
  }
  EXPECT_FALSE((SplitPlan{3}).valid());
  EXPECT_TRUE(SplitPlan{}.valid());  // automatic by default
  EXPECT_EQ(PlannedClusterSize(-1, 128, 264, 32768, 32768), 2);  // SplitClusterSize's
  EXPECT_EQ(PlannedClusterSize(-1, 128, 264, 0, 32768), 0);
  EXPECT_EQ(PlannedClusterSize(0, 128, 264, 32768, 32768), 0);
  EXPECT_EQ(PlannedClusterSize(8, 128, 264, 0, 32768), 8);
}

}  // namespace
}  // namespace readkv::cuda::internal
