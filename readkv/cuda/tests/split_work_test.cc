// The persistent split of the dense and FP8 kernels (src/split_work.h): host math shared by the
// kernels, the combine and the traffic model, so it is pinned here in every build.
#include "split_work.h"

#include <gtest/gtest.h>

#include <algorithm>
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

}  // namespace
}  // namespace readkv::cuda::internal
