// The tile reader's GPU decode (src/tile_fragment.h) run on the host: every path, every depth
// 1..8 of every store width, bit-exact f16 against the codec (DecodeTileCodes + the LloydTree
// centroids) and against a TilePlaneStore's own codes. Runs in every build, GPU or not.
#include "kvgate/stats/random.h"
#include "tile_fragment.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/key_bytes.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/plane_decode.h"
#include "readkv/codec/tile_planes.h"
#include "readkv/cuda/tile_centroids.h"

namespace readkv::cuda::tile {
namespace {

using codec::kTilePlaneBytes;

// The f16 bits of x (round to nearest even): codec::FloatToHalf, which MakeTileCentroids uses too;
// HalfConversionIsNearestEven checks it independently on every centroid.
uint16_t ExpectedHalf(float x) { return codec::FloatToHalf(x); }

// A table functor for the paths that must not read one.
struct NoTable {
  uint32_t operator()(uint32_t entry) const {
    ADD_FAILURE() << "the sign path read table entry " << entry;
    return 0;
  }
};

struct ArrayTable {
  const TileCentroids* c;
  uint32_t operator()(uint32_t entry) const {
    EXPECT_LT(entry, static_cast<uint32_t>(kTileTableEntries));
    return c->table[entry];
  }
};

// DecodeFragment at a runtime depth (the kernels dispatch the same way, once per run of depths).
void Decode(int depth, const uint32_t* b, const TileCentroids& c, uint32_t (&out)[4]) {
  const ArrayTable table{&c};
  switch (depth) {
    case 1:
      return DecodeFragment<1>(b, c, NoTable{}, out);
    case 2:
      return DecodeFragment<2>(b, c, NoTable{}, out);
    case 3:
      return DecodeFragment<3>(b, c, table, out);
    case 4:
      return DecodeFragment<4>(b, c, table, out);
    case 5:
      return DecodeFragment<5>(b, c, table, out);
    case 6:
      return DecodeFragment<6>(b, c, table, out);
    case 7:
      return DecodeFragment<7>(b, c, table, out);
    case 8:
      return DecodeFragment<8>(b, c, table, out);
    default:
      FAIL() << "depth " << depth;
  }
}

uint16_t Half(const uint32_t (&out)[4], int k) {
  return static_cast<uint16_t>(out[k / 2] >> (16 * (k % 2)));
}

// Decodes every lane of `tile` (W planes) at `depth` and checks each element against the codec.
void ExpectTileMatchesCodec(const uint8_t* tile, int depth, const codec::LloydTree& tree,
                            const TileCentroids& c) {
  uint8_t codes[256];
  codec::DecodeTileCodes(tile, depth, codes);
  const auto centroids = tree.centroids(depth);
  for (int lane = 0; lane < 32; ++lane) {
    uint32_t b[kMaxTileDepth] = {};
    for (int p = 0; p < depth; ++p) b[p] = tile[p * kTilePlaneBytes + lane];
    uint32_t out[4];
    Decode(depth, b, c, out);
    for (int k = 0; k < 8; ++k) {
      const float want = centroids[codes[8 * lane + k]];
      ASSERT_EQ(Half(out, k), ExpectedHalf(want))
          << "W " << tree.store_bits() << " depth " << depth << " lane " << lane << " element " << k
          << " code " << int{codes[8 * lane + k]} << " centroid " << want;
    }
  }
}

// LaneCodes<T> (the transpose) against the codes built a bit at a time, plane 0 on top.
template <int T>
void ExpectLaneCodes(kvgate::stats::SplitMixRng& rng) {
  for (int trial = 0; trial < 4000; ++trial) {
    uint32_t b[T];
    for (int p = 0; p < T; ++p) b[p] = static_cast<uint32_t>(rng.Next() & 0xffu);
    if (trial < 8) {
      for (int p = 0; p < T; ++p) b[p] = trial % 2 == 0 ? (1u << trial) : 0xffu;  // single columns
    }
    uint32_t codes[2];
    LaneCodes<T>(b, codes);
    for (int k = 0; k < 8; ++k) {
      uint32_t want = 0;
      for (int p = 0; p < T; ++p) want = 2 * want + ((b[p] >> k) & 1u);
      ASSERT_EQ((codes[k / 4] >> (8 * (k % 4))) & 0xffu, want)
          << "depth " << T << " trial " << trial << " element " << k;
    }
  }
}

TEST(TileFragmentTest, LaneCodesTransposeThePlanesIntoCodes) {
  kvgate::stats::SplitMixRng rng(11);
  ExpectLaneCodes<1>(rng);
  ExpectLaneCodes<2>(rng);
  ExpectLaneCodes<3>(rng);
  ExpectLaneCodes<4>(rng);
  ExpectLaneCodes<5>(rng);
  ExpectLaneCodes<6>(rng);
  ExpectLaneCodes<7>(rng);
  ExpectLaneCodes<8>(rng);
}

TEST(TileFragmentTest, BitMoversPutEachBitWhereTheyClaim) {
  for (uint32_t b = 0; b < 256; ++b) {
    const std::array<uint32_t, 4> signs = {PairSignBits<0>(b), PairSignBits<1>(b),
                                           PairSignBits<2>(b), PairSignBits<3>(b)};
    for (int j = 0; j < 4; ++j) {
      const uint32_t want = (((b >> (2 * j)) & 1u) << 15) | (((b >> (2 * j + 1)) & 1u) << 31);
      ASSERT_EQ(signs[static_cast<size_t>(j)], want) << "byte " << b << " pair " << j;
    }
  }
  for (uint32_t x = 0; x < 16; ++x) {
    const uint32_t tops = NibbleToByteTops(x);
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ((tops >> (8 * k + 7)) & 1u, (x >> k) & 1u) << "nibble " << x << " element " << k;
    }
  }
  // PairMasks on the bytes' top bits only: junk below them must not leak.
  kvgate::stats::SplitMixRng rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto lo = static_cast<uint32_t>(rng.Next()), hi = static_cast<uint32_t>(rng.Next());
    const uint64_t bytes = (uint64_t{hi} << 32) | lo;
    const std::array<uint32_t, 4> masks = {PairMasks<0>(lo, hi), PairMasks<1>(lo, hi),
                                           PairMasks<2>(lo, hi), PairMasks<3>(lo, hi)};
    for (int j = 0; j < 4; ++j) {
      const uint32_t low = ((bytes >> (16 * j + 7)) & 1u) ? 0xffffu : 0u;
      const uint32_t high = ((bytes >> (16 * j + 15)) & 1u) ? 0xffff0000u : 0u;
      ASSERT_EQ(masks[static_cast<size_t>(j)], low | high);
    }
  }
}

TEST(TileFragmentTest, CentroidTablesAreTheCodebookInHalf) {
  for (int w = 1; w <= kMaxTileDepth; ++w) {
    const codec::LloydTree tree(w);
    const TileCentroids c = MakeTileCentroids(tree);
    for (int t = 0; t <= kMaxTileDepth; ++t) {
      for (int k = 0; k < (1 << t); ++k) {
        const uint16_t want = t <= w ? ExpectedHalf(tree.centroids(t)[static_cast<size_t>(k)]) : 0;
        ASSERT_EQ(c.table[(1 << t) - 1 + k], want) << "W " << w << " depth " << t << " code " << k;
      }
    }
    const uint32_t neg = ExpectedHalf(tree.centroids(1)[0]);
    EXPECT_EQ(c.depth1_negative, neg | (neg << 16));
    EXPECT_NE(neg & 0x8000u, 0u);
    if (w >= 2) {
      const uint32_t base = ExpectedHalf(tree.centroids(2)[0]);
      const uint32_t flip = base ^ ExpectedHalf(tree.centroids(2)[1]);
      EXPECT_EQ(c.depth2_base, base | (base << 16));
      EXPECT_EQ(c.depth2_flip, flip | (flip << 16));
      EXPECT_EQ(flip & 0x8000u, 0u);  // -c_b and -c_a share the sign: only magnitude bits flip
    }
  }
}

// Depths 1 and 2 exhaustively: every byte (depth 1) and every pair of bytes (depth 2) in every
// lane position, no table read.
TEST(TileFragmentTest, SignPathsAreExactForEveryPlaneByte) {
  const codec::LloydTree tree(8);
  const TileCentroids c = MakeTileCentroids(tree);
  for (uint32_t b0 = 0; b0 < 256; ++b0) {
    for (uint32_t b1 = 0; b1 < 256; ++b1) {
      const uint32_t b[2] = {b0, b1};
      for (int depth = 1; depth <= 2; ++depth) {
        if (depth == 1 && b1 != 0) continue;
        uint32_t out[4];
        Decode(depth, b, c, out);
        for (int k = 0; k < 8; ++k) {
          uint32_t code = (b0 >> k) & 1u;
          if (depth == 2) code = (code << 1) | ((b1 >> k) & 1u);
          ASSERT_EQ(Half(out, k), ExpectedHalf(tree.centroids(depth)[code]))
              << "depth " << depth << " bytes " << b0 << "," << b1 << " element " << k;
        }
      }
    }
  }
}

// Every store width W and depth t <= W, on random tiles and on edge patterns.
TEST(TileFragmentTest, EveryDepthMatchesDecodeTileCodesBitExactly) {
  kvgate::stats::SplitMixRng rng(20261205);
  for (int w = 1; w <= kMaxTileDepth; ++w) {
    const codec::LloydTree tree(w);
    const TileCentroids c = MakeTileCentroids(tree);
    std::vector<std::vector<uint8_t>> tiles;
    for (const uint8_t fill : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x55}, uint8_t{0xaa}}) {
      tiles.emplace_back(static_cast<size_t>(w * kTilePlaneBytes), fill);
    }
    for (int bit = 0; bit < 256; bit += 37) {  // one set bit in every plane
      std::vector<uint8_t> tile(static_cast<size_t>(w * kTilePlaneBytes), 0);
      for (int p = 0; p < w; ++p)
        tile[static_cast<size_t>(p * kTilePlaneBytes + bit / 8)] = 1 << (bit % 8);
      tiles.push_back(tile);
    }
    for (int r = 0; r < 300; ++r) {
      std::vector<uint8_t> tile(static_cast<size_t>(w * kTilePlaneBytes));
      for (uint8_t& x : tile) x = static_cast<uint8_t>(rng.UniformIndex(256));
      tiles.push_back(tile);
    }
    for (const auto& tile : tiles) {
      for (int depth = 1; depth <= w; ++depth) {
        ExpectTileMatchesCodec(tile.data(), depth, tree, c);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// From a store's codes to the MMA's A registers: lane l's element k of a key tile is token
// TileElement(l, k).row, channel .col; of a value tile channel .row, token .col.
TEST(TileFragmentTest, FragmentsCarryTheStoresCodesInMmaOrder) {
  const int w = 8, d = 32;
  const codec::LloydTree tree(w);
  const TileCentroids c = MakeTileCentroids(tree);
  codec::TilePlaneStore store(d, w);
  kvgate::stats::SplitMixRng rng(99);
  const uint64_t codes = uint64_t{1} << w;
  const int tokens = 40;  // two full token tiles and a partial one
  for (int i = 0; i < tokens; ++i) {
    std::vector<uint8_t> k(d), v(d);
    for (int ch = 0; ch < d; ++ch) {
      k[static_cast<size_t>(ch)] = static_cast<uint8_t>(rng.UniformIndex(codes));
      v[static_cast<size_t>(ch)] = static_cast<uint8_t>(rng.UniformIndex(codes));
    }
    store.Append(k, v);
  }
  for (int depth = 1; depth <= w; ++depth) {
    for (int64_t r = 0; r < store.token_tiles(); ++r) {
      for (int g = 0; g < store.groups(); ++g) {
        for (const bool keys : {true, false}) {
          const uint8_t* tile = keys ? store.KeyTile(r, g) : store.ValueTile(r, g);
          for (int lane = 0; lane < 32; ++lane) {
            uint32_t b[kMaxTileDepth] = {};
            for (int p = 0; p < depth; ++p) b[p] = tile[p * kTilePlaneBytes + lane];
            uint32_t out[4];
            Decode(depth, b, c, out);
            for (int k = 0; k < 8; ++k) {
              const codec::TileCell cell = codec::TileElement(lane, k);
              const int64_t token = r * 16 + (keys ? cell.row : cell.col);
              const int channel = g * 16 + (keys ? cell.col : cell.row);
              // Absent tokens of the partial tile hold code prefix 0.
              const uint8_t want_code = token < tokens
                                            ? (keys ? store.KeyCode(token, channel, depth)
                                                    : store.ValueCode(token, channel, depth))
                                            : 0;
              ASSERT_EQ(Half(out, k), ExpectedHalf(tree.centroids(depth)[want_code]))
                  << (keys ? "key" : "value") << " depth " << depth << " tile " << r << "," << g
                  << " lane " << lane << " element " << k;
            }
          }
        }
      }
    }
  }
}

// Byte keys: every code's f16 is (code - 128) / 32 exactly (against the codec's own f16
// conversion), and a byte-key store's tiles decode, with the half cell added back, to the grid's
// value of each element's code (codec::KeyByteValue), element by element in MMA order.
TEST(TileFragmentTest, ByteKeysDecodeToTheGridInMmaOrder) {
  EXPECT_EQ(kKeyByteOuter, codec::kKeyByteOutermost);
  EXPECT_EQ(kKeyByteHalfCell, 0.5f / codec::kKeyByteScale);
  for (uint32_t code = 0; code < 256; ++code) {
    const float want = (static_cast<float>(code) - 128.0f) / 32.0f;
    ASSERT_EQ(KeyByteHalfBits(code), ExpectedHalf(want)) << code;
    ASSERT_EQ(codec::HalfToFloat(static_cast<uint16_t>(KeyByteHalfBits(code))) + kKeyByteHalfCell,
              codec::KeyByteValue(static_cast<uint8_t>(code)))
        << code;
  }
  const int d = 32;
  codec::TilePlaneStore store(d, 8, codec::PlaneLayout::kTilesByteKeys);
  kvgate::stats::SplitMixRng rng(7);
  const int tokens = 40;  // two full token tiles and a partial one
  for (int i = 0; i < tokens; ++i) {
    std::vector<uint8_t> k(d), v(d);
    for (int ch = 0; ch < d; ++ch) {
      k[static_cast<size_t>(ch)] = static_cast<uint8_t>(rng.UniformIndex(256));
      v[static_cast<size_t>(ch)] = static_cast<uint8_t>(rng.UniformIndex(256));
    }
    store.Append(k, v);
  }
  for (int64_t r = 0; r < store.token_tiles(); ++r) {
    for (int g = 0; g < store.groups(); ++g) {
      const uint8_t* tile = store.KeyTile(r, g);
      for (int lane = 0; lane < 32; ++lane) {
        uint32_t lo = 0, hi = 0;
        std::memcpy(&lo, tile + 8 * lane, 4);
        std::memcpy(&hi, tile + 8 * lane + 4, 4);
        uint32_t out[4];
        DecodeByteKeys(lo, hi, out);
        for (int k = 0; k < 8; ++k) {
          const codec::TileCell cell = codec::TileElement(lane, k);
          const int64_t token = r * 16 + cell.row;
          const int channel = g * 16 + cell.col;
          // Absent tokens of the partial tile hold code 0.
          const uint8_t code = token < tokens ? store.KeyCode(token, channel, 8) : 0;
          ASSERT_EQ(codec::HalfToFloat(Half(out, k)) + kKeyByteHalfCell,
                    codec::KeyByteValue(code))
              << "tile " << r << "," << g << " lane " << lane << " element " << k;
        }
      }
    }
  }
}

TEST(TileFragmentTest, HalfConversionIsNearestEven) {
  // Every centroid's f16 is the nearest half (ties to the even one), checked against its
  // neighbours through the decoder, not the encoder.
  for (int w = 1; w <= kMaxTileDepth; ++w) {
    const codec::LloydTree tree(w);
    for (int t = 1; t <= w; ++t) {
      for (const float x : tree.centroids(t)) {
        const uint16_t h = ExpectedHalf(x);
        const int mag = h & 0x7fff;
        ASSERT_EQ((h & 0x8000) != 0, x < 0.0f) << x;
        ASSERT_GT(mag, 0) << x;
        ASSERT_LT(mag, 0x7bff) << x;
        const double err = std::fabs(codec::HalfToFloat(h) - double{x});
        for (const int step : {-1, 1}) {
          const auto other = static_cast<uint16_t>((h & 0x8000) | (mag + step));
          const double other_err = std::fabs(codec::HalfToFloat(other) - double{x});
          ASSERT_TRUE(err < other_err || (err == other_err && mag % 2 == 0))
              << "centroid " << x << " half " << h << " neighbour " << other;
        }
      }
    }
  }
}

}  // namespace
}  // namespace readkv::cuda::tile
