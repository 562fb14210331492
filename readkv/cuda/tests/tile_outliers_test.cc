// The GPU tile reader's outlier lists on the CPU (every build): the host builder
// (tile_outlier_lists.h) against the codec's OutlierStore, the correction of tile_outliers.h
// against codec::OutlierCorrection bit for bit, and a replay of which lane of the MMA's C fragment
// adds which entry in TileLogits and TileValues (tile_kernels.cuh), against the PTX layout of
// m16n8k16's accumulators written out independently here.
#include "tile_outliers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/bitplanes.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/outliers.h"
#include "readkv/cuda/tile_centroids.h"
#include "readkv/cuda/tile_outlier_lists.h"

namespace readkv::cuda {
namespace {

namespace codec = readkv::codec;

// A store of `tokens` tokens whose z are heavy-tailed (N(0, 1) x 2.2: ~7% of values past the
// W = 8 tree's 3.99) but for quiet tiles and tokens (x 0.5: none), a cap of 2, so most tokens
// keep 2 entries of each kind and some tiles none.
codec::OutlierStore RandomStore(int d, int tokens, uint64_t seed) {
  const codec::LloydTree tree(8);
  codec::OutlierStore store(d, codec::ResolveOutlierOptions({2, 0.0f}, tree, d));
  kvgate::stats::SplitMixRng rng(seed);
  std::vector<float> k(static_cast<size_t>(d)), v(k.size());
  for (int i = 0; i < tokens; ++i) {
    // Every third token tile and every fifth token: no outliers.
    const double spread = (i / 16) % 3 == 1 || i % 5 == 0 ? 0.5 : 2.2;
    for (int c = 0; c < d; ++c) {
      k[static_cast<size_t>(c)] = static_cast<float>(spread * rng.Normal());
      v[static_cast<size_t>(c)] = static_cast<float>(spread * rng.Normal());
    }
    store.AppendToken(k, v);
  }
  return store;
}

TEST(TileOutliersTest, EntriesPackTheCodecsFields) {
  const uint32_t e = tile::PackOutlierEntry(15, 200, 0xc8a0);
  EXPECT_EQ(tile::OutlierToken(e), 15);
  EXPECT_EQ(tile::OutlierChannel(e), 200);
  EXPECT_EQ(tile::OutlierZHalf(e), 0xc8a0);
  EXPECT_EQ(e, 0xc8a0c80fu);  // little-endian bytes: token, channel, z
}

// Two sequences of 600 and 37 tokens (3 pages and 1) on 2 KV heads, their pages scattered in a
// pool of 7 (3 unused); every page block is checked word by word against the store.
TEST(TileOutliersTest, PageBlocksHoldEveryEncodedEntryAtItsTileInOrder) {
  const int d = 64, heads_kv = 2, max_pages = 3, num_pages = 7;
  const std::vector<int32_t> encoded = {600, 37};
  const std::vector<int32_t> table = {5, 1, 3, 0, -1, -1};
  std::vector<codec::OutlierStore> stores;
  stores.push_back(RandomStore(d, 600, 1));
  stores.push_back(RandomStore(d, 610, 2));  // holds tokens past its sequence: not listed
  stores.push_back(RandomStore(d, 37, 3));
  stores.push_back(RandomStore(d, 300, 4));
  std::vector<const codec::OutlierStore*> pointers;
  for (const auto& s : stores) pointers.push_back(&s);
  const TileOutlierPages pages =
      BuildTileOutlierPages(pointers, encoded, heads_kv, table, max_pages, num_pages);
  ASSERT_EQ(pages.key_blocks.size(),
            static_cast<size_t>(num_pages) * heads_kv * kPageOutlierBlockWords);
  std::vector<bool> seen(static_cast<size_t>(num_pages) * heads_kv * 2, false);
  int64_t empty_tiles = 0, full_tiles = 0;
  for (const bool keys : {true, false}) {
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < heads_kv; ++h) {
        const int tokens = encoded[static_cast<size_t>(b)];
        const codec::OutlierStore& store = stores[static_cast<size_t>(b * heads_kv + h)];
        for (int j = 0; j * kPageTokens < tokens; ++j) {
          const int page = table[static_cast<size_t>(b * max_pages + j)];
          seen[(static_cast<size_t>(page) * heads_kv + h) * 2 + (keys ? 0 : 1)] = true;
          const uint32_t* block = pages.Block(keys, page, h);
          // The store block's entries of the encoded tokens, as (token in page, channel, z).
          std::vector<std::tuple<int, int, uint16_t>> want;
          for (const auto& e : keys ? store.KeyEntries(j) : store.ValueEntries(j)) {
            if (j * kPageTokens + e.token < tokens) want.emplace_back(e.token, e.channel, e.z_half);
          }
          ASSERT_EQ(tile::PageTileStart(block, 0), 0);
          std::vector<std::tuple<int, int, uint16_t>> got;
          for (int slot = 0; slot < 16; ++slot) {
            const int lo = tile::PageTileStart(block, slot), hi = tile::PageTileStart(block, slot + 1);
            ASSERT_LE(lo, hi) << "page " << page << " slot " << slot;
            (lo == hi ? empty_tiles : full_tiles) += 1;
            for (int k = lo; k < hi; ++k) {
              const uint32_t e = tile::PageEntries(block)[k];
              got.emplace_back(16 * slot + tile::OutlierToken(e), tile::OutlierChannel(e),
                               tile::OutlierZHalf(e));
            }
          }
          EXPECT_EQ(got, want) << (keys ? "keys" : "values") << " b " << b << " h " << h
                               << " page " << j;
          const int n = tile::PageTileStart(block, 16);
          EXPECT_EQ(n, static_cast<int>(want.size()));
          for (int w = 17 / 2 + 1; w < kPageOutlierHeaderWords; ++w) EXPECT_EQ(block[w], 0u);
          EXPECT_EQ(block[8] >> 16, 0u);  // the half after tile_start[16]
          for (int k = n; k < kPageOutlierEntries; ++k) {
            ASSERT_EQ(tile::PageEntries(block)[k], 0u) << "an unused entry is not zero";
          }
        }
        const int64_t tiles = (tokens + 15) / 16;
        int64_t all = 0;
        for (int64_t blk = 0; blk < store.blocks(); ++blk) {
          for (const auto& e : keys ? store.KeyEntries(blk) : store.ValueEntries(blk)) {
            all += blk * kPageTokens + e.token < tokens ? 1 : 0;
          }
        }
        EXPECT_EQ(pages.Entries(keys, b, h, tiles), all);
      }
    }
  }
  for (int page = 0; page < num_pages; ++page) {  // pages no sequence names stay zero
    for (int h = 0; h < heads_kv; ++h) {
      for (const bool keys : {true, false}) {
        if (seen[(static_cast<size_t>(page) * heads_kv + h) * 2 + (keys ? 0 : 1)]) continue;
        const uint32_t* block = pages.Block(keys, page, h);
        EXPECT_TRUE(std::all_of(block, block + kPageOutlierBlockWords,
                                [](uint32_t w) { return w == 0; }))
            << "page " << page;
      }
    }
  }
  EXPECT_GT(empty_tiles, 0);  // the test sees both kinds of tile
  EXPECT_GT(full_tiles, 0);
}

TEST(TileOutliersTest, TileStartHalvesPackTwoAWord) {
  std::vector<uint32_t> block(kPageOutlierBlockWords, 0);
  for (int slot = 0; slot <= 16; ++slot) tile::SetPageTileStart(block.data(), slot, 1000 + slot);
  for (int slot = 0; slot <= 16; ++slot) EXPECT_EQ(tile::PageTileStart(block.data(), slot), 1000 + slot);
  EXPECT_EQ(block[0], (1001u << 16) | 1000u);  // little-endian u16 tile_start[0], [1]
  EXPECT_EQ(block[8], 1016u);
  tile::SetPageTileStart(block.data(), 3, 7);  // rewriting one half keeps its neighbour
  EXPECT_EQ(block[1], (7u << 16) | 1002u);
}

std::string BuildField(const std::vector<const codec::OutlierStore*>& stores,
                       const std::vector<int32_t>& encoded, const std::vector<int32_t>& table,
                       int max_pages, int num_pages) {
  try {
    BuildTileOutlierPages(stores, encoded, 1, table, max_pages, num_pages);
  } catch (const codec::InvalidArgument& e) {
    return e.field();
  }
  return "ok";
}

TEST(TileOutliersTest, BuilderRefusesMismatchedStoresAndTables) {
  const codec::OutlierStore store = RandomStore(64, 300, 5);
  const std::vector<const codec::OutlierStore*> one = {&store}, two = {&store, &store};
  EXPECT_EQ(BuildField(one, {300}, {0, 1}, 2, 2), "ok");
  EXPECT_EQ(BuildField(one, {20, 20}, {0, 1}, 1, 2), "outliers");  // two sequences, one store
  EXPECT_EQ(BuildField(one, {301}, {0, 1}, 2, 2), "outliers");     // shorter than its sequence
  EXPECT_EQ(BuildField(one, {300}, {0}, 1, 2), "max_pages");       // 300 tokens are 2 pages
  EXPECT_EQ(BuildField(one, {300}, {0}, 2, 2), "page_table");      // not 1 x 2 entries
  EXPECT_EQ(BuildField(one, {300}, {0, 2}, 2, 2), "page_table");   // page 2 of a pool of 2
  EXPECT_EQ(BuildField(two, {20, 20}, {1, 1}, 1, 2), "page_table");  // page 1 named twice
  // A store block past a page block's entries: budget kPageOutlierEntries + 1, every token full.
  const codec::LloydTree tree(8);
  codec::OutlierStore full(16, codec::ResolveOutlierOptions({2, 0.0f, kPageOutlierEntries + 1},
                                                            tree, 16));
  std::vector<float> z(16, 9.0f);
  for (int i = 0; i < kPageTokens; ++i) full.AppendToken(z, z);
  ASSERT_EQ(full.KeyEntries(0).size(), static_cast<size_t>(kPageOutlierEntries + 1));
  EXPECT_EQ(BuildField({&full}, {256}, {0}, 1, 1), "outliers");
}

// TileAppend's outlier path replayed on the CPU: per token and kind the selection by
// OutlierRank (staged in rank order, z through codec::FloatToHalf as __float2half_rn rounds),
// then AppendToPageBlock per page in position order; the blocks must equal BuildTileOutlierPages
// of an OutlierStore fed the same z, and the dropped counts the store's. Heavy tails (~7% of
// values past the threshold at W = 8, cap 2): every whole page goes past its budget, so the
// budget's truncation (the largest |z| kept) is exercised.
TEST(TileOutliersTest, AppendReplayEqualsTheStoresPageBlocks) {
  const int d = 64, tokens = 600, cap = 2;
  const codec::LloydTree tree(8);
  const codec::OutlierOptions o = codec::ResolveOutlierOptions({cap, 0.0f}, tree, d);
  codec::OutlierStore store(d, o);
  const int pages = (tokens + kPageTokens - 1) / kPageTokens;
  const std::vector<int32_t> table = {2, 0, 1};
  std::vector<uint32_t> blocks[2];
  for (auto& b : blocks) b.assign(static_cast<size_t>(pages) * kPageOutlierBlockWords, 0);
  int64_t past_cap = 0, over_budget = 0;
  kvgate::stats::SplitMixRng rng(21);
  std::vector<float> z[2] = {std::vector<float>(d), std::vector<float>(d)};
  for (int i = 0; i < tokens; ++i) {
    const double spread = (i / 16) % 3 == 1 ? 0.5 : 2.2;  // some tiles without outliers
    for (auto& kind : z) {
      for (float& v : kind) v = static_cast<float>(spread * rng.Normal());
    }
    if (i % 7 == 0) z[0][9] = z[0][40] = 6.0f;  // ties: the lower channel ranks first
    store.AppendToken(z[0], z[1]);
    for (int kind = 0; kind < 2; ++kind) {
      float abs[64];
      int beyond = 0;
      for (int c = 0; c < d; ++c) {
        const float a = std::fabs(z[kind][static_cast<size_t>(c)]);
        abs[c] = a > o.threshold ? a : -1.0f;
        beyond += a > o.threshold ? 1 : 0;
      }
      uint32_t staged[cap] = {};
      for (int c = 0; c < d; ++c) {
        const int rank = abs[c] >= 0.0f ? tile::OutlierRank(abs, d, c) : cap;
        if (rank < cap) {
          staged[rank] = tile::PackOutlierEntry(
              i % 16, c, codec::FloatToHalf(z[kind][static_cast<size_t>(c)]));
        }
      }
      const int count = std::min(beyond, cap);
      past_cap += beyond - count;
      const auto page = static_cast<size_t>(table[static_cast<size_t>(i / kPageTokens)]);
      const int dropped = tile::AppendToPageBlock(
          blocks[kind].data() + page * kPageOutlierBlockWords, i % kPageTokens, staged, count);
      ASSERT_GE(dropped, 0) << "token " << i << " refused as out of order";
      over_budget += dropped;
    }
  }
  const std::vector<const codec::OutlierStore*> stores = {&store};
  const TileOutlierPages want = BuildTileOutlierPages(stores, {tokens}, 1, table, pages, pages);
  EXPECT_EQ(blocks[0], want.key_blocks);
  EXPECT_EQ(blocks[1], want.value_blocks);
  const auto& k = store.key_stats();
  const auto& v = store.value_stats();
  EXPECT_EQ(over_budget, k.over_budget + v.over_budget);
  EXPECT_GT(over_budget, 0);
  EXPECT_EQ(past_cap, k.dropped() - k.over_budget + v.dropped() - v.over_budget);
  for (int j = 0; j < 2; ++j) {  // the two whole pages are full (the third has 88 tokens)
    EXPECT_EQ(tile::PageTileStart(want.Block(true, table[static_cast<size_t>(j)], 0), 16),
              kPageOutlierEntries)
        << "page " << j;
  }
}

TEST(TileOutliersTest, AppendRefusesATokenOutOfOrder) {
  std::vector<uint32_t> block(kPageOutlierBlockWords, 0);
  const uint32_t a[1] = {tile::PackOutlierEntry(5, 3, 0x4900)};
  const uint32_t b[2] = {tile::PackOutlierEntry(2, 7, 0x4900), tile::PackOutlierEntry(2, 1, 0x4a00)};
  ASSERT_EQ(tile::AppendToPageBlock(block.data(), 37, a, 1), 0);  // tile 2, slot 5
  EXPECT_EQ(tile::PageTileStart(block.data(), 2), 0);
  EXPECT_EQ(tile::PageTileStart(block.data(), 3), 1);
  EXPECT_EQ(tile::PageTileStart(block.data(), 16), 1);
  const std::vector<uint32_t> before = block;
  EXPECT_EQ(tile::AppendToPageBlock(block.data(), 20, b, 2), -1);  // tile 1: before tile 2
  EXPECT_EQ(tile::AppendToPageBlock(block.data(), 36, b, 2), -1);  // slot 4 of tile 2: before 5
  EXPECT_EQ(tile::AppendToPageBlock(block.data(), 37, b, 2), -1);  // slot 5 again
  EXPECT_EQ(block, before) << "a refused token writes nothing";
  ASSERT_EQ(tile::AppendToPageBlock(block.data(), 38, b, 2), 0);  // in order: sorted by channel
  EXPECT_EQ(tile::OutlierChannel(tile::PageEntries(block.data())[1]), 1);
  EXPECT_EQ(tile::OutlierChannel(tile::PageEntries(block.data())[2]), 7);
  EXPECT_EQ(tile::PageTileStart(block.data(), 3), 3);
  EXPECT_EQ(tile::AppendToPageBlock(block.data(), 38 + 16, nullptr, 0), 0);  // none: tiles move
  EXPECT_EQ(tile::PageTileStart(block.data(), 3), 3);
  EXPECT_EQ(tile::PageTileStart(block.data(), 4), 3);
}

// Every finite fp16 z at every depth of every width: the kernels' correction (one f32
// subtraction of TileCentroids::outermost) is codec::OutlierCorrection, bit for bit.
TEST(TileOutliersTest, CorrectionEqualsTheCodecsInF32) {
  for (const int w : {1, 4, 8}) {
    const codec::LloydTree tree(w);
    const tile::TileCentroids centroids = tile::MakeTileCentroids(tree);
    for (int t = 0; t <= w; ++t) {
      for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        const auto z_half = static_cast<uint16_t>(bits);
        const float z = codec::HalfToFloat(z_half);
        if (!std::isfinite(z)) continue;
        const float want = codec::OutlierCorrection(tree, z_half, t);
        const float got = tile::OutlierCorrectionOf(z, centroids.outermost[t]);
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << "W " << w << " depth " << t << " z bits " << bits;
      }
    }
  }
}

// The m16n8k16 f32 accumulator layout (PTX ISA, "mma.m16n8k16", fragment C): element k of lane l
// is row l / 4 for k < 2 and l / 4 + 8 otherwise, column 2 (l % 4) + (k & 1).
int CRow(int lane, int k) { return lane / 4 + (k >= 2 ? 8 : 0); }
int CCol(int lane, int k) { return 2 * (lane % 4) + (k & 1); }

// One replayed addition: which (row, column) element of which accumulator a lane touched.
using Touches = std::map<std::tuple<int, int, int>, int>;  // (entry, row-or-group, head) -> count

// TileLogits' AddKeyOutliers per lane: an entry (token r, channel c) adds to the tile's C at
// OutlierRowSlot(lane, r) + {0, 1} for heads 2 (lane % 4) + {0, 1} below G. Each (entry, head)
// must be added exactly once, into the element whose row is the token and column the head.
TEST(TileOutliersTest, EachKeyEntryIsAddedOnceByTheLaneHoldingItsLogit) {
  kvgate::stats::SplitMixRng rng(7);
  for (const int g : {1, 2, 4, 8}) {
    std::vector<std::pair<int, int>> entries;  // (token in tile, channel)
    for (int i = 0; i < 40; ++i) {
      entries.emplace_back(static_cast<int>(rng.UniformIndex(16)),
                           static_cast<int>(rng.UniformIndex(128)));
    }
    Touches touched;
    for (int lane = 0; lane < 32; ++lane) {
      for (size_t n = 0; n < entries.size(); ++n) {
        const int slot = tile::OutlierRowSlot(lane, entries[n].first);
        if (slot < 0) continue;
        ASSERT_TRUE(slot == 0 || slot == 2);
        for (int hh = 0; hh < 2; ++hh) {
          const int head = 2 * (lane % 4) + hh;
          if (head >= g) continue;
          const int k = slot + hh;
          ASSERT_EQ(CRow(lane, k), entries[n].first) << "lane " << lane << " element " << k;
          ASSERT_EQ(CCol(lane, k), head) << "lane " << lane << " element " << k;
          ++touched[{static_cast<int>(n), 0, head}];
        }
      }
    }
    ASSERT_EQ(touched.size(), entries.size() * static_cast<size_t>(g)) << "group " << g;
    for (const auto& [key, count] : touched) EXPECT_EQ(count, 1) << "group " << g;
  }
}

// TileValues' AddValueOutliers per lane: an entry (token r, channel c) adds to accumulator c / 16
// at OutlierRowSlot(lane, c % 16) + {0, 1}; the element's row is channel c % 16 of that group and
// its column the head. Each (entry, head) exactly once.
TEST(TileOutliersTest, EachValueEntryIsAddedOnceByTheLaneHoldingItsChannel) {
  kvgate::stats::SplitMixRng rng(8);
  for (const int d : {64, 128}) {
    for (const int g : {1, 2, 4, 8}) {
      std::vector<std::pair<int, int>> entries;
      for (int i = 0; i < 40; ++i) {
        entries.emplace_back(static_cast<int>(rng.UniformIndex(16)),
                             static_cast<int>(rng.UniformIndex(static_cast<uint64_t>(d))));
      }
      Touches touched;
      for (int lane = 0; lane < 32; ++lane) {
        for (size_t n = 0; n < entries.size(); ++n) {
          const int c = entries[n].second;
          const int slot = tile::OutlierRowSlot(lane, c % 16);
          if (slot < 0) continue;
          for (int group = 0; group < d / 16; ++group) {  // the unrolled, predicated loop
            if (group != c / 16) continue;
            for (int hh = 0; hh < 2; ++hh) {
              const int head = 2 * (lane % 4) + hh;
              if (head >= g) continue;
              const int k = slot + hh;
              ASSERT_EQ(16 * group + CRow(lane, k), c) << "lane " << lane << " element " << k;
              ASSERT_EQ(CCol(lane, k), head) << "lane " << lane << " element " << k;
              ++touched[{static_cast<int>(n), group, head}];
            }
          }
        }
      }
      ASSERT_EQ(touched.size(), entries.size() * static_cast<size_t>(g)) << "d " << d;
      for (const auto& [key, count] : touched) EXPECT_EQ(count, 1);
    }
  }
}

}  // namespace
}  // namespace readkv::cuda
