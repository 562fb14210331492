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

TEST(TileOutliersTest, ListsHoldEveryEncodedEntryAtItsTileInOrder) {
  const int d = 64, heads_kv = 2;
  const std::vector<int32_t> encoded = {600, 37};
  const int max_tiles = 40;  // past both sequences: trailing tiles stay empty
  std::vector<codec::OutlierStore> stores;
  stores.push_back(RandomStore(d, 600, 1));
  stores.push_back(RandomStore(d, 610, 2));  // holds tokens past its sequence: not listed
  stores.push_back(RandomStore(d, 37, 3));
  stores.push_back(RandomStore(d, 300, 4));
  std::vector<const codec::OutlierStore*> pointers;
  for (const auto& s : stores) pointers.push_back(&s);
  const TileOutlierLists lists = BuildTileOutlierLists(pointers, encoded, heads_kv, max_tiles);
  ASSERT_EQ(lists.rows, 4);
  ASSERT_EQ(lists.max_token_tiles, max_tiles);
  const size_t stride = max_tiles + 1;
  int64_t largest = 0, empty_tiles = 0, full_tiles = 0;
  for (const bool keys : {true, false}) {
    for (int row = 0; row < lists.rows; ++row) {
      const int tokens = encoded[static_cast<size_t>(row / heads_kv)];
      const codec::OutlierStore& store = stores[static_cast<size_t>(row)];
      // The store's entries of the encoded tokens, in order, as (token, channel, z).
      std::vector<std::tuple<int, int, uint16_t>> want;
      for (int64_t b = 0; b < store.blocks(); ++b) {
        for (const auto& e : keys ? store.KeyEntries(b) : store.ValueEntries(b)) {
          const int token = static_cast<int>(b * codec::kBlockTokens + e.token);
          if (token < tokens) want.emplace_back(token, e.channel, e.z_half);
        }
      }
      const uint32_t* offsets = lists.offsets(keys).data() + row * stride;
      const uint32_t* entries =
          (keys ? lists.key_entries : lists.value_entries).data() + row * lists.max_entries;
      ASSERT_EQ(offsets[0], 0u);
      std::vector<std::tuple<int, int, uint16_t>> got;
      for (int t = 0; t < max_tiles; ++t) {
        ASSERT_LE(offsets[t], offsets[t + 1]) << "row " << row << " tile " << t;
        if (t >= (tokens + 15) / 16) {
          ASSERT_EQ(offsets[t], offsets[t + 1]) << "a tile past the sequence holds entries";
          continue;
        }
        (offsets[t] == offsets[t + 1] ? empty_tiles : full_tiles) += 1;
        for (uint32_t k = offsets[t]; k < offsets[t + 1]; ++k) {
          const uint32_t e = entries[k];
          ASSERT_LT(tile::OutlierToken(e), 16);
          got.emplace_back(16 * t + tile::OutlierToken(e), tile::OutlierChannel(e),
                           tile::OutlierZHalf(e));
        }
      }
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));  // by (token, channel)
      EXPECT_EQ(got, want) << (keys ? "keys" : "values") << " row " << row;
      EXPECT_EQ(lists.Entries(keys, row, max_tiles), static_cast<int64_t>(want.size()));
      largest = std::max<int64_t>(largest, static_cast<int64_t>(want.size()));
    }
  }
  EXPECT_EQ(lists.max_entries, largest);
  EXPECT_GT(empty_tiles, 0);  // the test sees both kinds of tile
  EXPECT_GT(full_tiles, 0);
}

TEST(TileOutliersTest, BuilderRefusesMismatchedStores) {
  const codec::OutlierStore store = RandomStore(64, 20, 5);
  const std::vector<const codec::OutlierStore*> one = {&store};
  try {
    BuildTileOutlierLists(one, {20, 20}, 1, 2);
    FAIL() << "two sequences, one store";
  } catch (const codec::InvalidArgument& e) {
    EXPECT_EQ(e.field(), "outliers");
  }
  try {
    BuildTileOutlierLists(one, {21}, 1, 2);
    FAIL() << "the store is shorter than its sequence";
  } catch (const codec::InvalidArgument& e) {
    EXPECT_EQ(e.field(), "outliers");
  }
  try {
    BuildTileOutlierLists(one, {20}, 1, 1);
    FAIL() << "20 tokens are 2 tiles";
  } catch (const codec::InvalidArgument& e) {
    EXPECT_EQ(e.field(), "max_token_tiles");
  }
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
