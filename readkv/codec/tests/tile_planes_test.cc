#include "readkv/codec/tile_planes.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/plane_decode.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

struct Codes {
  std::vector<std::vector<uint8_t>> keys, values;  // [token][channel]
};

Codes RandomCodes(int64_t tokens, int d, int w, uint64_t seed) {
  Codes c;
  SplitMixRng rng(seed);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<uint8_t> k(static_cast<size_t>(d)), v(k.size());
    for (auto& x : k) x = static_cast<uint8_t>(rng.Next() & ((1u << w) - 1));
    for (auto& x : v) x = static_cast<uint8_t>(rng.Next() & ((1u << w) - 1));
    c.keys.push_back(k);
    c.values.push_back(v);
  }
  return c;
}

TilePlaneStore Fill(const Codes& c, int d, int w) {
  TilePlaneStore store(d, w);
  for (size_t t = 0; t < c.keys.size(); ++t) store.Append(c.keys[t], c.values[t]);
  return store;
}

TEST(TilePlanesTest, FragmentOrderIsTheMmaM16n8k16AOperand) {
  // PTX ISA, mma.m16n8k16 .f16/.bf16 A fragment: groupID = lane / 4, tig = lane % 4;
  // a0,a1: (groupID, 2 tig + {0,1}); a2,a3: (groupID + 8, ...); a4,a5: (groupID, 2 tig + 8 +
  // {0,1}); a6,a7: (groupID + 8, 2 tig + 8 + {0,1}).
  EXPECT_EQ(TileElement(0, 0).row, 0);
  EXPECT_EQ(TileElement(0, 0).col, 0);
  EXPECT_EQ(TileElement(5, 1).row, 1);  // groupID 1, tig 1
  EXPECT_EQ(TileElement(5, 1).col, 3);
  EXPECT_EQ(TileElement(5, 2).row, 9);
  EXPECT_EQ(TileElement(5, 2).col, 2);
  EXPECT_EQ(TileElement(31, 7).row, 15);
  EXPECT_EQ(TileElement(31, 7).col, 15);
  EXPECT_EQ(TileElement(30, 5).row, 7);  // groupID 7, tig 2, a5
  EXPECT_EQ(TileElement(30, 5).col, 13);
  std::set<int> cells;
  for (int lane = 0; lane < 32; ++lane) {
    for (int bit = 0; bit < 8; ++bit) {
      const TileCell cell = TileElement(lane, bit);
      cells.insert(cell.row * 16 + cell.col);
      EXPECT_EQ(TileBitIndex(cell.row, cell.col), 8 * lane + bit);
    }
  }
  EXPECT_EQ(cells.size(), 256u);  // a bijection onto the tile
}

TEST(TilePlanesTest, EveryPrefixOfEveryCodeReadsBackIncludingAPartialTile) {
  const int d = 32, w = 8;
  const Codes c = RandomCodes(2 * 256 + 37, d, w, 7);
  const TilePlaneStore store = Fill(c, d, w);
  ASSERT_EQ(store.tokens(), 549);
  EXPECT_EQ(store.token_tiles(), 35);
  for (int64_t t = 0; t < store.tokens(); t += 5) {
    for (int ch = 0; ch < d; ++ch) {
      for (int depth = 0; depth <= w; ++depth) {
        const auto i = static_cast<size_t>(t), k = static_cast<size_t>(ch);
        ASSERT_EQ(store.KeyCode(t, ch, depth), c.keys[i][k] >> (w - depth));
        ASSERT_EQ(store.ValueCode(t, ch, depth), c.values[i][k] >> (w - depth));
      }
    }
  }
}

TEST(TilePlanesTest, PlaneBitsSitWhereDocumented) {
  const int d = 32, w = 4;
  const Codes c = RandomCodes(40, d, w, 3);
  const TilePlaneStore store = Fill(c, d, w);
  // Token 21 (tile 1, row 5), channel 19 (group 1, column 3); plane p of tile (1, 1) starts at
  // ((1 * 2 + 1) * 4 + p) * 32 of the key array.
  const int bit_k = TileBitIndex(5, 3), bit_v = TileBitIndex(3, 5);
  for (int p = 0; p < w; ++p) {
    const uint8_t* plane = store.KeyTile(1, 1) + p * kTilePlaneBytes;
    EXPECT_EQ((plane[bit_k / 8] >> (bit_k % 8)) & 1, (c.keys[21][19] >> (w - 1 - p)) & 1);
    const uint8_t* vplane = store.ValueTile(1, 1) + p * kTilePlaneBytes;
    EXPECT_EQ((vplane[bit_v / 8] >> (bit_v % 8)) & 1, (c.values[21][19] >> (w - 1 - p)) & 1);
  }
  EXPECT_EQ(store.KeyTile(1, 1), store.KeyTile(0, 0) + (1 * 2 + 1) * w * kTilePlaneBytes);
}

TEST(TilePlanesTest, TileDecodeReadsOnlyTheFirstTPlanes) {
  const int d = 16, w = 8;
  const Codes c = RandomCodes(16, d, w, 11);
  const TilePlaneStore store = Fill(c, d, w);
  for (int depth = 0; depth <= w; ++depth) {
    // Planes past the depth are poisoned in a copy: the decode must not see them.
    std::vector<uint8_t> tile(store.KeyTile(0, 0), store.KeyTile(0, 0) + w * kTilePlaneBytes);
    for (size_t b = static_cast<size_t>(depth) * kTilePlaneBytes; b < tile.size(); ++b) {
      tile[b] = 0xA5;
    }
    uint8_t codes[256];
    DecodeTileCodes(tile.data(), depth, codes);
    for (int lane = 0; lane < 32; ++lane) {
      for (int bit = 0; bit < 8; ++bit) {
        const TileCell cell = TileElement(lane, bit);
        ASSERT_EQ(
            codes[8 * lane + bit],
            c.keys[static_cast<size_t>(cell.row)][static_cast<size_t>(cell.col)] >> (w - depth))
            << "depth " << depth << " lane " << lane << " bit " << bit;
      }
    }
  }
}

TEST(TilePlanesTest, BlockBytesRoundTripWholeAndPartialBlocks) {
  const int d = 32, w = 8;
  const Codes c = RandomCodes(256 + 100, d, w, 5);
  const TilePlaneStore store = Fill(c, d, w);
  EXPECT_EQ(store.BlockByteSize(), 2 * 16 * 2 * 8 * 32);
  const auto b0 = store.BlockBytes(0), b1 = store.BlockBytes(1);
  EXPECT_EQ(static_cast<int64_t>(b0.size()), store.BlockByteSize());
  EXPECT_EQ(static_cast<int64_t>(b1.size()), TilePlaneStore::BlockByteSize(d, w, 100));
  EXPECT_EQ(b1.size(), 2u * 7 * 2 * 8 * 32);  // ceil(100 / 16) = 7 token tiles
  TilePlaneStore back(d, w);
  back.AppendBlockBytes(b0, 256);
  back.AppendBlockBytes(b1, 100);
  EXPECT_EQ(back.tokens(), store.tokens());
  EXPECT_EQ(back.BlockBytes(0), b0);
  EXPECT_EQ(back.BlockBytes(1), b1);
  EXPECT_EQ(back.PayloadBytes(), store.PayloadBytes());
  for (int64_t t = 0; t < back.tokens(); t += 7) {
    EXPECT_EQ(back.ValueCode(t, 9, w), c.values[static_cast<size_t>(t)][9]);
  }
}

TEST(TilePlanesTest, RefusesBadGeometryCodesAndBlocks) {
  EXPECT_THROW(TilePlaneStore(8, 8), InvalidArgument);   // a group needs 16 channels
  EXPECT_THROW(TilePlaneStore(48, 8), InvalidArgument);  // not a power of two
  EXPECT_THROW(TilePlaneStore(16, 9), InvalidArgument);
  TilePlaneStore store(16, 4);
  std::vector<uint8_t> ok(16, 3), big(16, 16), short_codes(15, 0);
  EXPECT_THROW(store.Append(big, ok), InvalidArgument);
  EXPECT_THROW(store.Append(ok, short_codes), InvalidArgument);
  EXPECT_THROW(store.KeyCode(0, 0, 1), InvalidArgument);  // empty store

  const Codes c = RandomCodes(20, 16, 4, 9);
  const auto bytes = Fill(c, 16, 4).BlockBytes(0);
  TilePlaneStore target(16, 4);
  EXPECT_THROW(target.AppendBlockBytes(bytes, 33), CorruptObject);  // 2 token tiles, not 3
  std::vector<uint8_t> dirty = bytes;
  // Token 20 is absent: set its key bit at row 4 of the second token tile.
  const int bit = TileBitIndex(20 % 16, 0);
  dirty[static_cast<size_t>(1 * 4 * 32 + bit / 8)] |= static_cast<uint8_t>(1 << (bit % 8));
  EXPECT_THROW(target.AppendBlockBytes(dirty, 20), CorruptObject);
  target.AppendBlockBytes(bytes, 20);
  EXPECT_THROW(target.AppendBlockBytes(bytes, 20), InvalidArgument);  // not on a block boundary
  EXPECT_EQ(ParsePlaneLayout("tiles16"), PlaneLayout::kTiles);
  EXPECT_EQ(PlaneLayoutName(PlaneLayout::kPlanes), "planes");
  EXPECT_THROW(ParsePlaneLayout("tiles"), InvalidArgument);
}


// Byte keys (key_bytes.h): a key tile's 256 bytes are its codes in fragment order, read whole;
// value tiles are planes as before, and the block bytes keep their size.
TEST(TilePlanesTest, ByteKeysSitInFragmentOrderAndReadWhole) {
  const int d = 32, w = 8;
  const Codes c = RandomCodes(256 + 100, d, w, 13);
  TilePlaneStore store(d, w, PlaneLayout::kTilesByteKeys);
  EXPECT_TRUE(store.byte_keys());
  for (size_t t = 0; t < c.keys.size(); ++t) store.Append(c.keys[t], c.values[t]);
  for (int64_t t = 0; t < store.tokens(); t += 5) {
    for (int ch = 0; ch < d; ch += 3) {
      const uint8_t key = c.keys[static_cast<size_t>(t)][static_cast<size_t>(ch)];
      EXPECT_EQ(store.KeyCode(t, ch, 8), key);
      const uint8_t* tile = store.KeyTile(t / 16, ch / 16);
      EXPECT_EQ(tile[TileBitIndex(static_cast<int>(t % 16), ch % 16)], key);
      for (int depth = 0; depth <= 8; ++depth) {
        EXPECT_EQ(store.ValueCode(t, ch, depth),
                  c.values[static_cast<size_t>(t)][static_cast<size_t>(ch)] >> (8 - depth));
      }
    }
  }
  EXPECT_THROW(store.KeyCode(0, 0, 7), InvalidArgument);  // no prefix of a byte key
  EXPECT_EQ(store.PayloadBytes(), Fill(c, d, w).PayloadBytes());
  EXPECT_EQ(store.BlockByteSize(), TilePlaneStore(d, w).BlockByteSize());

  TilePlaneStore back(d, w, PlaneLayout::kTilesByteKeys);
  back.AppendBlockBytes(store.BlockBytes(0), 256);
  auto partial = store.BlockBytes(1);
  back.AppendBlockBytes(partial, 100);
  EXPECT_EQ(back.BlockBytes(1), partial);
  for (int64_t t = 256; t < back.tokens(); t += 11) {
    EXPECT_EQ(back.KeyCode(t, 17, 8), c.keys[static_cast<size_t>(t)][17]);
  }
  // Token 100 of the partial block is absent: a nonzero byte of its key is damage.
  TilePlaneStore target(d, w, PlaneLayout::kTilesByteKeys);
  target.AppendBlockBytes(store.BlockBytes(0), 256);
  const int64_t last_row = static_cast<int64_t>(partial.size()) / 2 - 2 * 256;
  partial[static_cast<size_t>(last_row + TileBitIndex(100 % 16, 3))] = 1;
  EXPECT_THROW(target.AppendBlockBytes(partial, 100), CorruptObject);

  EXPECT_THROW(TilePlaneStore(d, 4, PlaneLayout::kTilesByteKeys), InvalidArgument);  // W = 8
  EXPECT_THROW(TilePlaneStore(d, w, PlaneLayout::kPlanes), InvalidArgument);
  EXPECT_EQ(ParsePlaneLayout("tiles16-kbytes"), PlaneLayout::kTilesByteKeys);
  EXPECT_EQ(PlaneLayoutName(PlaneLayout::kTilesByteKeys), "tiles16-kbytes");
}

}  // namespace
}  // namespace readkv::codec
