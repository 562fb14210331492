// The tile reader's ledgers (tile_ledgers.h) on a shape small enough to count by hand: one
// sequence, 2 query heads on 1 KV head, d = 64 (4 groups), W = 4, 40 encoded tokens (3 token
// tiles, the last one partial, in one page of 16 tiles), one chunk of 512. Host code, every
// build.
#include "readkv/cuda/tile_ledgers.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "readkv/cuda/tile_centroids.h"
#include "tile_outliers.h"

namespace readkv::cuda {
namespace {

constexpr auto kCentroids = static_cast<int64_t>(sizeof(tile::TileCentroids));

TileDecodeShape TinyShape(int residual) {
  return TileDecodeShape{1, 2, 1, 64, 4, 40, residual, 1};
}

int64_t SumOfLaunches(const TrafficBytes& t) {
  int64_t bytes = 0;
  for (const KernelTraffic& k : t.kernels) bytes += k.read + k.write;
  return bytes;
}

const std::vector<uint8_t> kKeyDepths = {1, 2, 3, 4};  // per group
const std::vector<uint8_t> kValueDepths = {1, 2, 3};   // per token tile

TEST(TileLedgersTest, CapacityCountsWholePagesTheWindowAndTheTables) {
  const std::vector<int32_t> encoded = {40}, none = {0}, window = {5};
  // Planes: K and V x 1 page of 16 tiles x 4 groups x 1 head x 4 planes x 32 bytes. Tables: 6 x
  // 64 floats, 3 increments, the centroid tables.
  const int64_t planes = 2 * 16 * 4 * 4 * 32, tables = 6 * 64 * 4 + 3 * 8 + kCentroids;
  EXPECT_EQ(TileCapacityBytes(TinyShape(0), encoded.data(), none.data()), planes + tables);
  EXPECT_EQ(TileCapacityBytes(TinyShape(5), encoded.data(), window.data()),
            planes + tables + 2 * 5 * 64 * 2);
  // 257 tokens take a second whole page; 256 fill the first exactly.
  const std::vector<int32_t> page = {256}, past = {257};
  TileDecodeShape two_pages = TinyShape(0);
  two_pages.max_encoded_tokens = 257;
  two_pages.max_pages = 2;
  EXPECT_EQ(TileCapacityBytes(two_pages, page.data(), none.data()), planes + tables);
  EXPECT_EQ(TileCapacityBytes(two_pages, past.data(), none.data()), 2 * planes + tables);
}

TEST(TileLedgersTest, LogicalReadsAreTheChosenPlanesInWholeSectors) {
  const std::vector<int32_t> encoded = {40};
  // Keys: (1 + 2 + 3 + 4) planes x 3 tiles x 32 = 960; values: (1 + 2 + 3) x 4 groups x 32 = 768.
  EXPECT_EQ(TileLogicalBytes(TinyShape(0), encoded.data(), kKeyDepths.data(), kValueDepths.data()),
            960 + 768);
  // A shorter sequence reads only its own tiles: 17 tokens are 2 tiles.
  const std::vector<int32_t> shorter = {17};
  EXPECT_EQ(TileLogicalBytes(TinyShape(0), shorter.data(), kKeyDepths.data(), kValueDepths.data()),
            10 * 2 * 32 + 3 * 4 * 32);
}

TEST(TileLedgersTest, TrafficByLaunchWorkedOutByHand) {
  const std::vector<int32_t> encoded = {40}, none = {0};
  const TilePlan plan{512, 1};
  const TrafficBytes t = TileDecodeTraffic(TinyShape(0), plan, encoded.data(), none.data(),
                                           kKeyDepths.data(), kValueDepths.data());
  const std::vector<std::string> names = {"TilePrepare", "TileLogits", "TileSelect", "TileValues",
                                          "TileCombine"};
  for (size_t k = 0; k < names.size(); ++k) {
    ASSERT_NE(t.kernels[k].kernel, nullptr) << k;
    EXPECT_EQ(t.kernels[k].kernel, names[k]);
  }
  // Prepare: 2 x 64 float queries, K mean/std/signs, 3 increments; writes 4 group depths and the
  // folded queries (4 groups x 32 lanes x 8 bytes).
  EXPECT_EQ(t.kernels[0].read, 512 + 768 + 24);
  EXPECT_EQ(t.kernels[0].write, 4 + 1024);
  // Logits: the centroid parameter, the group depths, the folded queries once per warp stage
  // (3 tiles over 4 warps: 3 stages), 3 page-table entries, the Key planes (960); writes per
  // tile and head 16 f16 e values and 3 statistics (3 x 2 x 44).
  EXPECT_EQ(t.kernels[1].read, kCentroids + 4 + 3 * 1024 + 12 + 960);
  EXPECT_EQ(t.kernels[1].write, 264);
  // Select: the increments, 5 floats of statistics a tile and head, the 3 block weights read
  // back; writes the statistics (2 heads x 4 floats), the block weights and 3 tile depths.
  EXPECT_EQ(t.kernels[2].read, 24 + 3 * 2 * 20 + 24);
  EXPECT_EQ(t.kernels[2].write, 32 + 24 + 3);
  // Values: the centroid parameter, 2 maxima, 3 page-table entries, per tile and head the e
  // values and the maximum (3 x 2 x 36), 3 tile depths, the Value planes (768); writes one
  // chunk's partial (2 heads x 64 floats).
  EXPECT_EQ(t.kernels[3].read, kCentroids + 8 + 12 + 216 + 3 + 768);
  EXPECT_EQ(t.kernels[3].write, 512);
  // Combine: V mean/std/signs, 2 statistics a head, the partial; writes the 2 x 64 outputs.
  EXPECT_EQ(t.kernels[4].read, 768 + 16 + 512);
  EXPECT_EQ(t.kernels[4].write, 512);
  EXPECT_EQ(t.payload, 960 + 768);
  EXPECT_EQ(t.metadata, 768 + 24 + kCentroids + 12 + 24 + kCentroids + 12 + 768);
  EXPECT_EQ(t.scores, 264 + 120 + 24 + 24 + 216);
  EXPECT_EQ(t.schedule, 4 + 4 + 3 + 3);
  EXPECT_EQ(t.partials, 32 + 8 + 512 + 16 + 512);
  EXPECT_EQ(t.io, 512 + 1024 + 3 * 1024 + 512);
  EXPECT_EQ(SumOfLaunches(t), t.Total());

  // Without the depths, everything but the planes.
  const TrafficBytes bare =
      TileDecodeTraffic(TinyShape(0), plan, encoded.data(), none.data(), nullptr, nullptr);
  EXPECT_EQ(bare.payload, 0);
  EXPECT_EQ(bare.Total(), t.Total() - 960 - 768);
  EXPECT_EQ(SumOfLaunches(bare), bare.Total());
}

// The same call with a Value window of 512 (the chunk): three launches, the Select and Combine
// terms in TileWindowValues', without TileSelect's round trips (block weights, depths, the
// heads' statistics).
TEST(TileLedgersTest, WindowedTrafficWorkedOutByHand) {
  const std::vector<int32_t> encoded = {40}, none = {0};
  const TilePlan row{512, 1}, windowed{512, 1, 512};
  const TrafficBytes t = TileDecodeTraffic(TinyShape(0), windowed, encoded.data(), none.data(),
                                           kKeyDepths.data(), kValueDepths.data());
  const std::vector<std::string> names = {"TilePrepare", "TileLogits", "TileWindowValues"};
  for (size_t k = 0; k < names.size(); ++k) {
    ASSERT_NE(t.kernels[k].kernel, nullptr) << k;
    EXPECT_EQ(t.kernels[k].kernel, names[k]);
  }
  EXPECT_EQ(t.kernels[3].kernel, nullptr);
  const TrafficBytes r = TileDecodeTraffic(TinyShape(0), row, encoded.data(), none.data(),
                                           kKeyDepths.data(), kValueDepths.data());
  EXPECT_EQ(t.kernels[0].read, r.kernels[0].read);
  EXPECT_EQ(t.kernels[1].read, r.kernels[1].read);
  // Logits also writes the chunk's statistics for it (2 heads x 2 floats).
  EXPECT_EQ(t.kernels[1].write, r.kernels[1].write + 16);
  // Its Select part: the increments, the one chunk's statistics (2 heads x 2 floats), M and
  // sum e^2 of each tile and head (3 x 2 x 8); its Values part as TileValues' without the
  // maxima and depths (centroids, 3 page-table entries, 216 of e values and maxima, the Value
  // planes); its Combine part as TileCombine's without the statistics (V mean/std/signs, the
  // partial). Writes: its arrival, the partial, the outputs.
  EXPECT_EQ(t.kernels[2].read, 24 + 16 + 48 + kCentroids + 12 + 216 + 768 + 768 + 512);
  EXPECT_EQ(t.kernels[2].write, 4 + 512 + 512);
  EXPECT_EQ(t.payload, r.payload);
  EXPECT_EQ(SumOfLaunches(t), t.Total());
  EXPECT_LT(t.Total(), r.Total());
}

TEST(TileLedgersTest, TrafficCountsTheWindowAndEveryPlannedLogitsBlock) {
  const std::vector<int32_t> encoded = {40}, none = {0}, window = {5};
  const TrafficBytes base = TileDecodeTraffic(TinyShape(0), TilePlan{512, 1}, encoded.data(),
                                              none.data(), nullptr, nullptr);
  // 5 residual tokens: Prepare reads their keys (5 x 64 BF16) and writes their 2 x 5 logits,
  // Select reads those twice, Combine reads them, the window's values and one more statistic.
  const TrafficBytes res = TileDecodeTraffic(TinyShape(5), TilePlan{512, 1}, encoded.data(),
                                             window.data(), nullptr, nullptr);
  EXPECT_EQ(res.kernels[0].read - base.kernels[0].read, 5 * 64 * 2);
  EXPECT_EQ(res.kernels[0].write - base.kernels[0].write, 2 * 5 * 4);
  EXPECT_EQ(res.kernels[2].read - base.kernels[2].read, 2 * 2 * 5 * 4);
  EXPECT_EQ(res.kernels[4].read - base.kernels[4].read, 2 * 5 * 4 + 5 * 64 * 2 + 2 * 4);
  EXPECT_EQ(res.payload - base.payload, 2 * 5 * 64 * 2);
  // A plan of 3 chunks for 40 tokens: the two empty Logits blocks still read the group depths;
  // the empty Values blocks exit before reading anything counted.
  const TrafficBytes wide = TileDecodeTraffic(TinyShape(0), TilePlan{512, 3}, encoded.data(),
                                              none.data(), nullptr, nullptr);
  EXPECT_EQ(wide.kernels[1].read - base.kernels[1].read, 2 * 4);
  EXPECT_EQ(wide.kernels[3].read, base.kernels[3].read);
}

// Byte keys launch no TilePrepare: every Logits block reads the queries and the codec's Key
// vectors and folds them on chip, so the folded queries and the group depths never cross memory;
// the rest is the tree's call, launch by launch.
TEST(TileLedgersTest, ByteKeysFoldTheirQueriesInEveryLogitsBlock) {
  const std::vector<int32_t> encoded = {40}, none = {0}, window = {5};
  TileDecodeShape bytes = TinyShape(0);
  bytes.byte_keys = true;
  const TilePlan plan{512, 3};
  const TrafficBytes t = TileDecodeTraffic(bytes, plan, encoded.data(), none.data(),
                                           kKeyDepths.data(), kValueDepths.data());
  const TrafficBytes r = TileDecodeTraffic(TinyShape(0), plan, encoded.data(), none.data(),
                                           kKeyDepths.data(), kValueDepths.data());
  const std::vector<std::string> names = {"TileLogits", "TileSelect", "TileValues",
                                          "TileCombine"};
  for (size_t k = 0; k < names.size(); ++k) {
    ASSERT_NE(t.kernels[k].kernel, nullptr) << k;
    EXPECT_EQ(t.kernels[k].kernel, names[k]);
  }
  EXPECT_EQ(t.kernels[4].kernel, nullptr);
  // Logits: the tree's without the group depths (3 blocks x 4) and the folded queries (3 stages
  // x 1024), with each of the 3 blocks' queries (512) and K mean/std/signs (768).
  EXPECT_EQ(t.kernels[0].read, r.kernels[1].read - 3 * 4 - 3 * 1024 + 3 * (512 + 768));
  EXPECT_EQ(t.kernels[0].write, r.kernels[1].write);
  for (int k = 1; k < 4; ++k) {
    EXPECT_EQ(t.kernels[k].read, r.kernels[k + 1].read) << k;
    EXPECT_EQ(t.kernels[k].write, r.kernels[k + 1].write) << k;
  }
  EXPECT_EQ(t.payload, r.payload);
  EXPECT_EQ(SumOfLaunches(t), t.Total());
  // The residual window's keys are read once and its logits written once, by the row's blocks.
  TileDecodeShape bytes_window = TinyShape(5);
  bytes_window.byte_keys = true;
  const TrafficBytes w = TileDecodeTraffic(bytes_window, plan, encoded.data(), window.data(),
                                           nullptr, nullptr);
  const TrafficBytes bare =
      TileDecodeTraffic(bytes, plan, encoded.data(), none.data(), nullptr, nullptr);
  EXPECT_EQ(w.kernels[0].read - bare.kernels[0].read, 5 * 64 * 2);
  EXPECT_EQ(w.kernels[0].write - bare.kernels[0].write, 2 * 5 * 4);
}

// One pass (byte keys in a window of 512): one launch, the byte-key windowed terms less what
// stays on chip: the tiles' e values and statistics (written 3 tiles x 2 heads x (32 + 12),
// read back 3 x 2 x (8 + 36)), the chunk's statistics (written and read, 2 heads x 8), the
// chunk's partial (written and read, 2 heads x 64 x 4) and its arrival (4), and the second
// launch's centroid parameter.
TEST(TileLedgersTest, OnePassKeepsTheScoresOnChip) {
  const std::vector<int32_t> encoded = {40}, window = {5};
  TileDecodeShape bytes = TinyShape(5);
  bytes.byte_keys = true;
  const TilePlan apart{512, 1, 512}, one{512, 1, 512, true};
  const TrafficBytes t = TileDecodeTraffic(bytes, one, encoded.data(), window.data(),
                                           kKeyDepths.data(), kValueDepths.data());
  const TrafficBytes r = TileDecodeTraffic(bytes, apart, encoded.data(), window.data(),
                                           kKeyDepths.data(), kValueDepths.data());
  ASSERT_NE(t.kernels[0].kernel, nullptr);
  EXPECT_EQ(t.kernels[0].kernel, std::string("TileWindowPass"));
  EXPECT_EQ(t.kernels[1].kernel, nullptr);
  EXPECT_EQ(r.kernels[1].kernel, std::string("TileWindowValues"));
  EXPECT_EQ(t.Total(), r.Total() - kCentroids - (264 + 16) - (16 + 48 + 216) - 2 * 512 - 4);
  EXPECT_EQ(t.payload, r.payload);
  EXPECT_EQ(SumOfLaunches(t), t.Total());
}

// Outlier page blocks on the same shape: one page, 3 tiles, Key entries 2 in tile 0 and 1 in
// tile 2, one Value entry in tile 1; 3 warps of one tile each (the fourth's share is empty).
TEST(TileLedgersTest, OutlierPageBlocksCountTheirBlocksEntriesAndSectors) {
  const std::vector<int32_t> encoded = {40}, none = {0};
  const TilePlan plan{512, 1};
  TileOutlierPages lists;
  lists.heads_kv = 1;
  lists.num_pages = 1;
  lists.max_pages = 1;
  lists.page_table = {0};
  lists.encoded_lens = encoded;
  lists.key_blocks.assign(kPageOutlierBlockWords, 0);
  lists.value_blocks.assign(kPageOutlierBlockWords, 0);
  const int key_start[17] = {0, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
  for (int slot = 0; slot <= 16; ++slot) {
    tile::SetPageTileStart(lists.key_blocks.data(), slot, key_start[slot]);
    tile::SetPageTileStart(lists.value_blocks.data(), slot, slot >= 2 ? 1 : 0);
  }
  EXPECT_EQ(lists.Entries(true, 0, 0, 3), 3);
  EXPECT_EQ(lists.Entries(false, 0, 0, 1), 0);
  // Capacity: one whole block per kind of the sequence's one page.
  EXPECT_EQ(TileCapacityBytes(TinyShape(0), encoded.data(), none.data(), &lists),
            TileCapacityBytes(TinyShape(0), encoded.data(), none.data()) +
                2 * kPageOutlierBlockBytes);
  // Reads: per kind 4 bytes a tile (12) and 4 per entry: 12 + 12 + 12 + 4.
  EXPECT_EQ(TileLogicalBytes(TinyShape(0), encoded.data(), kKeyDepths.data(), kValueDepths.data(),
                             &lists),
            960 + 768 + 40);
  const TrafficBytes base = TileDecodeTraffic(TinyShape(0), plan, encoded.data(), none.data(),
                                              kKeyDepths.data(), kValueDepths.data());
  const TrafficBytes with = TileDecodeTraffic(TinyShape(0), plan, encoded.data(), none.data(),
                                              kKeyDepths.data(), kValueDepths.data(), &lists);
  // Prepare writes the 2 x 64 f32 scaled queries.
  EXPECT_EQ(with.kernels[0].write - base.kernels[0].write, 2 * 64 * 4);
  // Logits: each warp its tile's page-table entry again (3 x 4) and its 2 tile_start halves (one
  // sector each: 96), the Key entries of tile 0 (a sector) and of tile 2 (a sector); per Key
  // entry sigma_c and 2 scaled queries (3 x 12).
  EXPECT_EQ(with.kernels[1].read - base.kernels[1].read, 12 + 96 + 64 + 3 * 12);
  // Values: the page-table entries, the halves (96) and the one Value entry's sector.
  EXPECT_EQ(with.kernels[3].read - base.kernels[3].read, 12 + 96 + 32);
  EXPECT_EQ(with.payload - base.payload, 96 + 64 + 96 + 32);
  EXPECT_EQ(with.metadata - base.metadata, 12 + 12 + 3 * 4);
  EXPECT_EQ(with.io - base.io, 2 * 64 * 4 + 3 * 2 * 4);
  EXPECT_EQ(SumOfLaunches(with), with.Total());
}

}  // namespace
}  // namespace readkv::cuda
