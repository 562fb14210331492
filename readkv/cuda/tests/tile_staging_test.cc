// The tile reader's staging (src/tile_staging.h) replayed on the CPU as TileLogits and TileValues
// run it: every warp's share of a chunk, its stages, the 16-byte copies into a stage and the plane
// bytes each lane then reads, against the tile layout itself (random planes, depths, widths,
// groups and chunk sizes). A wrong offset anywhere reads another plane's byte. Runs in every
// build.
#include "tile_staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/cuda/tile_attention.h"
#include "tile_plan.h"

namespace readkv::cuda::tile {
namespace {

using internal::kTileBlockWarps;
using internal::kTileStageBytes;
using internal::kTileStageTiles;

struct Row {
  int groups = 8, store_bits = 8, tiles = 0;
  std::vector<uint8_t> bytes;  // [tiles][groups][W][32]
  size_t TileBytes() const { return static_cast<size_t>(groups) * store_bits * 32; }
  uint8_t At(int tile, int g, int p, int lane) const {
    return bytes[tile * TileBytes() + (static_cast<size_t>(g) * store_bits + p) * 32 + lane];
  }
};

Row RandomRow(kvgate::stats::SplitMixRng& rng, int groups, int store_bits, int tiles) {
  Row row{groups, store_bits, tiles, {}};
  row.bytes.resize(row.TileBytes() * tiles);
  for (uint8_t& b : row.bytes) b = static_cast<uint8_t>(rng.Next());
  return row;
}

// Calls visit(share) for every warp of every chunk of `tiles` token tiles, checking that the
// shares cover each tile exactly once and hold at most 32 tiles (a Values warp's register).
template <typename Visit>
void ForEveryShare(int tiles, int chunk_tokens, const Visit& visit) {
  std::vector<int> seen(static_cast<size_t>(tiles), 0);
  const int chunk_tiles = chunk_tokens / 16;
  const int chunks = (tiles + chunk_tiles - 1) / chunk_tiles + 1;  // one chunk past the end
  for (int c = 0; c < chunks; ++c) {
    const int first = c * chunk_tiles;
    const int end = first + chunk_tiles < tiles ? first + chunk_tiles : tiles;
    for (int w = 0; w < kTileBlockWarps; ++w) {
      const WarpShare share = ShareOfWarp(first, end, w);
      ASSERT_GE(share.count(), 0);
      ASSERT_LE(share.count(), 32);
      for (int r = share.lo; r < share.hi; ++r) ++seen[static_cast<size_t>(r)];
      visit(share);
    }
  }
  for (int r = 0; r < tiles; ++r) ASSERT_EQ(seen[static_cast<size_t>(r)], 1) << "tile " << r;
}

TEST(TileStagingTest, KeyStagesHoldEachTilesChosenPlanesWhereLogitsReadsThem) {
  kvgate::stats::SplitMixRng rng(41);
  for (int trial = 0; trial < 200; ++trial) {
    const int groups = trial % 2 == 0 ? 8 : 4;
    const int w = 1 + static_cast<int>(rng.Next() % 8);
    const int tiles = 1 + static_cast<int>(rng.Next() % 300);
    const int chunk = kTileChunkStep * (1 + static_cast<int>(rng.Next() % 4));
    const Row row = RandomRow(rng, groups, w, tiles);
    uint8_t depth[8], plane_at[8];
    uint16_t piece[2 * 8 * 8];
    for (int g = 0; g < groups; ++g) depth[g] = static_cast<uint8_t>(1 + rng.Next() % w);
    const int planes = PlanKeyStaging(depth, groups, w, plane_at, piece);
    const int per_stage = KeyTilesPerStage(planes);
    ASSERT_LE(per_stage * planes * 32, kTileStageBytes);
    ASSERT_LE(per_stage, kTileStageTiles);
    int64_t stages = 0;
    std::vector<uint8_t> stage(kTileStageBytes);
    ForEveryShare(tiles, chunk, [&](const WarpShare& share) {
      for (int lo = share.lo; lo < share.hi; lo += per_stage, ++stages) {
        const int n = per_stage < share.hi - lo ? per_stage : share.hi - lo;
        std::fill(stage.begin(), stage.end(), 0xA5);
        for (int i = 0; i < n; ++i) {  // the issue: pieces of tile lo + i
          for (int o = 0; o < 2 * planes; ++o) {
            std::memcpy(&stage[static_cast<size_t>(i * 2 * planes + o) * 16],
                        &row.bytes[(lo + i) * row.TileBytes() + piece[o] * 16u], 16);
          }
        }
        for (int i = 0; i < n; ++i) {  // the reads: plane p of group g, byte `lane`
          for (int g = 0; g < groups; ++g) {
            for (int p = 0; p < depth[g]; ++p) {
              for (int lane = 0; lane < 32; ++lane) {
                ASSERT_EQ(stage[static_cast<size_t>((i * planes + plane_at[g] + p) * 32 + lane)],
                          row.At(lo + i, g, p, lane))
                    << "trial " << trial << " tile " << lo + i << " group " << g << " plane " << p;
              }
            }
          }
        }
      }
    });
    if (testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(internal::TileLogitsStages(TilePlan{chunk, (tiles * 16 + chunk - 1) / chunk},
                                         tiles * 16, planes),
              stages)
        << "the traffic model's stage count";
  }
}

TEST(TileStagingTest, ValueStagesHoldEachTilesPlanesAtItsOwnDepth) {
  kvgate::stats::SplitMixRng rng(43);
  for (int trial = 0; trial < 200; ++trial) {
    const int groups = trial % 2 == 0 ? 8 : 4;
    const int group = 1 << (rng.Next() % 4);  // query heads a KV head: 1, 2, 4, 8
    const int w = 1 + static_cast<int>(rng.Next() % 8);
    const int tiles = 1 + static_cast<int>(rng.Next() % 300);
    const int chunk = kTileChunkStep * (1 + static_cast<int>(rng.Next() % 4));
    const Row row = RandomRow(rng, groups, w, tiles);
    std::vector<int> depth(static_cast<size_t>(tiles));
    for (int& t : depth) t = 1 + static_cast<int>(rng.Next() % w);
    const int head = ValueHeadBytes(group);
    ASSERT_EQ(head % 16, 0);
    ASSERT_LE(ValueTileBytes(8, 8, ValueHeadBytes(8)), kTileStageBytes) << "one tile always fits";
    std::vector<uint8_t> stage(kTileStageBytes);
    ForEveryShare(tiles, chunk, [&](const WarpShare& share) {
      const auto depth_of = [&](int i) { return depth[static_cast<size_t>(share.lo + i)]; };
      for (int s = 0; s < share.count();) {
        const int n = ValueStageTiles(depth_of, s, share.count(), groups, head);
        ASSERT_GE(n, 1);
        ASSERT_LE(n, kTileStageTiles);
        std::fill(stage.begin(), stage.end(), 0xA5);
        int at = 0;
        for (int i = 0; i < n; ++i) {  // the issue
          const int t = depth_of(s + i), r = share.lo + s + i;
          ASSERT_EQ(at % 16, 0);
          for (int o = 0; o < 2 * groups * t; ++o) {
            std::memcpy(&stage[static_cast<size_t>(at + head + o * 16)],
                        &row.bytes[r * row.TileBytes() +
                                   ValuePieceSourceBy(o, t, PieceRunReciprocal(t), w)],
                        16);
          }
          at += ValueTileBytes(t, groups, head);
        }
        ASSERT_LE(at, kTileStageBytes);
        at = 0;
        for (int i = 0; i < n; ++i) {  // the reads
          const int t = depth_of(s + i), r = share.lo + s + i;
          for (int g = 0; g < groups; ++g) {
            for (int p = 0; p < t; ++p) {
              for (int lane = 0; lane < 32; ++lane) {
                ASSERT_EQ(stage[static_cast<size_t>(at + head + (g * t + p) * 32 + lane)],
                          row.At(r, g, p, lane))
                    << "trial " << trial << " tile " << r << " group " << g << " plane " << p;
              }
            }
          }
          at += ValueTileBytes(t, groups, head);
        }
        s += n;
      }
    });
    if (testing::Test::HasFatalFailure()) return;
  }
}

TEST(TileStagingTest, ThePieceSourceByReciprocalIsTheDivisionsEverywhereItIsUsed) {
  // Every piece of a tile at every depth, d up to 128 (o < 128), and beyond: o < 2^10.
  for (int w = 1; w <= 8; ++w) {
    for (int t = 1; t <= w; ++t) {
      const uint32_t recip = PieceRunReciprocal(t);
      for (int o = 0; o < 1024; ++o) {
        ASSERT_EQ(ValuePieceSourceBy(o, t, recip, w), ValuePieceSource(o, t, w))
            << "piece " << o << " depth " << t << " W " << w;
      }
    }
  }
  EXPECT_EQ(PieceRunReciprocal(0), 0u) << "depth 0 reads nothing";
}

TEST(TileStagingTest, SharesSplitAChunkEvenlyAndEmptyChunksGetNothing) {
  // 10 tiles over 4 warps: 3, 3, 3, 1.
  EXPECT_EQ(ShareOfWarp(0, 10, 0).count(), 3);
  EXPECT_EQ(ShareOfWarp(0, 10, 2).lo, 6);
  EXPECT_EQ(ShareOfWarp(0, 10, 3).count(), 1);
  // 2 tiles: the last two warps get none.
  EXPECT_EQ(ShareOfWarp(32, 34, 2).count(), 0);
  EXPECT_EQ(ShareOfWarp(32, 34, 3).count(), 0);
  // A chunk past the sequence.
  EXPECT_EQ(ShareOfWarp(64, 40, 0).count(), 0);
  EXPECT_EQ(ShareOfWarp(64, 40, 3).count(), 0);
}

}  // namespace
}  // namespace readkv::cuda::tile
