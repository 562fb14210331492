// The tile pools' addressing (src/tile_pages.h), which TileAppend and the tile kernels use, on
// the CPU against the codec: random codes appended to the codec's TilePlaneStore (the tile
// layout) per (sequence, KV head), under a shuffled page table. TileOffset must put each token
// tile in slot r % 16 of its page (every byte of the owned pages once); the codes scattered bit
// by bit with TileBitInPage (what TileAppend writes) must give pools byte-equal to the stores'
// tiles at those offsets (0 past a sequence's tokens); and the bit positions and byte keys'
// bytes are the codec's (TileBitIndex, the byte-key store's order).
#include "tile_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/tile_planes.h"

namespace readkv::cuda {
namespace {

constexpr int kHeads = 2, kDim = 32, kBits = 3, kGroups = kDim / 16, kPages = 3;
const std::vector<int> kLens = {300, 17};  // 2 pages (19 tiles, the last partial); 1 page
constexpr int kMaxPages = 2;
constexpr size_t kTileBytes = static_cast<size_t>(kGroups) * kBits * 32;
constexpr size_t kPoolBytes = static_cast<size_t>(kPages) * kHeads * 16 * kTileBytes;

// Random codes of kLens per KV head, the codec's tile stores of them, and a shuffled page table.
struct Fixture {
  // Sequence 0: pages 2, 0; sequence 1: page 1, and an unused entry naming sequence 0's page 0.
  std::vector<int32_t> page_table = {2, 0, 1, 0};
  std::vector<codec::TilePlaneStore> stores;                 // [b H_kv + h]
  std::vector<std::vector<uint8_t>> key_codes, value_codes;  // [b H_kv + h][token d + channel]

  // The pools' layout spelled out: [page][H_kv][16][G][W][32].
  size_t PoolAt(int b, int h, int tile, int group, int plane, int lane) const {
    const auto page =
        static_cast<size_t>(page_table[static_cast<size_t>(b) * kMaxPages + tile / 16]);
    return (((page * kHeads + h) * 16 + tile % 16) * kGroups + group) * kBits * 32 +
           static_cast<size_t>(plane) * 32 + lane;
  }
};

Fixture MakeFixture() {
  Fixture f;
  kvgate::stats::SplitMixRng rng(kvgate::stats::DeriveSeed(37, 1));
  for (size_t b = 0; b < kLens.size(); ++b) {
    for (int h = 0; h < kHeads; ++h) {
      codec::TilePlaneStore tiles(kDim, kBits);
      std::vector<uint8_t> key(kDim), value(kDim);
      f.key_codes.emplace_back();
      f.value_codes.emplace_back();
      for (int i = 0; i < kLens[b]; ++i) {
        for (int c = 0; c < kDim; ++c) {
          key[c] = static_cast<uint8_t>(rng.UniformIndex(1u << kBits));
          value[c] = static_cast<uint8_t>(rng.UniformIndex(1u << kBits));
        }
        tiles.Append(key, value);
        f.key_codes.back().insert(f.key_codes.back().end(), key.begin(), key.end());
        f.value_codes.back().insert(f.value_codes.back().end(), value.begin(), value.end());
      }
      f.stores.push_back(std::move(tiles));
    }
  }
  return f;
}

TEST(TilePagesTest, EachTileSitsInSlotTileMod16OfItsPage) {
  const Fixture f = MakeFixture();
  std::vector<int> hits(kPoolBytes, 0);
  const int64_t tile_bytes = tile::TokenTileBytes(kDim, kBits);
  ASSERT_EQ(tile_bytes, static_cast<int64_t>(kTileBytes));
  for (int b = 0; b < static_cast<int>(kLens.size()); ++b) {
    const int owned = 16 * ((kLens[b] + 255) / 256);  // the tiles of the sequence's whole pages
    for (int h = 0; h < kHeads; ++h) {
      for (int r = 0; r < owned; ++r) {
        // The tile's start through the page table, as the kernels take it.
        const int64_t tile_at =
            tile::TileOffset(f.page_table.data(), kMaxPages, kHeads, tile_bytes, b, h, r);
        ASSERT_EQ(static_cast<size_t>(tile_at), f.PoolAt(b, h, r, 0, 0, 0))
            << "sequence " << b << " head " << h << " tile " << r;
        for (int64_t at = tile_at; at < tile_at + tile_bytes; ++at) ++hits[static_cast<size_t>(at)];
      }
    }
  }
  // The 3 owned pages hold every pool byte once: no sequence writes into another's page (the
  // page table's unused entry names sequence 0's page 0).
  EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(tile::PageHeadBytes(kDim, kBits), static_cast<int64_t>(16 * kTileBytes));
}

// TileAppend's placement replayed on the CPU: each code bit (token slot, channel, plane) ORed
// into zeroed pools at TileBitInPage gives, every byte, the codec's tile stores of the same codes
// at their tiles' offsets, and zeros past each sequence's tokens.
TEST(TilePagesTest, TileBitInPageScattersEveryBitWhereTheCodecTileStoreHasIt) {
  const Fixture f = MakeFixture();
  std::vector<uint8_t> want_k(kPoolBytes, 0), want_v(kPoolBytes, 0);
  for (int b = 0; b < static_cast<int>(kLens.size()); ++b) {
    for (int h = 0; h < kHeads; ++h) {
      const codec::TilePlaneStore& store = f.stores[static_cast<size_t>(b) * kHeads + h];
      for (int64_t r = 0; r < store.token_tiles(); ++r) {
        for (int g = 0; g < kGroups; ++g) {
          const size_t at = f.PoolAt(b, h, static_cast<int>(r), g, 0, 0);
          std::memcpy(want_k.data() + at, store.KeyTile(r, g), kBits * 32);
          std::memcpy(want_v.data() + at, store.ValueTile(r, g), kBits * 32);
        }
      }
    }
  }
  std::vector<uint8_t> got_k(kPoolBytes, 0), got_v(kPoolBytes, 0);
  const auto block_bytes = static_cast<size_t>(tile::PageHeadBytes(kDim, kBits));
  for (int b = 0; b < static_cast<int>(kLens.size()); ++b) {
    for (int h = 0; h < kHeads; ++h) {
      const size_t row = static_cast<size_t>(b) * kHeads + h;
      for (int i = 0; i < kLens[b]; ++i) {
        const auto page = static_cast<size_t>(f.page_table[static_cast<size_t>(b) * kMaxPages +
                                                            i / kPageTokens]);
        const size_t block = (page * kHeads + h) * block_bytes;
        for (int c = 0; c < kDim; ++c) {
          const size_t code = static_cast<size_t>(i) * kDim + c;
          for (int p = 0; p < kBits; ++p) {
            const int shift = kBits - 1 - p;
            const tile::TileBit key = tile::TileBitInPage(true, i % kPageTokens, c, p, kDim, kBits);
            const tile::TileBit value =
                tile::TileBitInPage(false, i % kPageTokens, c, p, kDim, kBits);
            ASSERT_LT(static_cast<size_t>(key.byte), block_bytes);
            ASSERT_LT(static_cast<size_t>(value.byte), block_bytes);
            got_k[block + static_cast<size_t>(key.byte)] |=
                static_cast<uint8_t>(((f.key_codes[row][code] >> shift) & 1u) << key.bit);
            got_v[block + static_cast<size_t>(value.byte)] |=
                static_cast<uint8_t>(((f.value_codes[row][code] >> shift) & 1u) << value.bit);
          }
        }
      }
    }
  }
  int64_t set_bits = 0;
  for (size_t at = 0; at < kPoolBytes; ++at) {
    ASSERT_EQ(got_k[at], want_k[at]) << "key pool byte " << at;
    ASSERT_EQ(got_v[at], want_v[at]) << "value pool byte " << at;
    set_bits += std::popcount(got_k[at]) + std::popcount(got_v[at]);
  }
  EXPECT_GT(set_bits, 0);  // random codes: the comparison is not between zeros
}

// The 16 channels of a key group (one token, one plane) land in one 32-bit word, a value group's
// in 8 (channels c and c + 8 share a byte): TileAppend's atomics per token and plane are one a
// key group and eight a value group.
TEST(TilePagesTest, TileBitInPageWordsPerGroup) {
  for (int slot : {0, 7, 8, 15, 16, 255}) {
    for (int g = 0; g < 8; ++g) {
      std::vector<int64_t> key_words, value_words;
      for (int c = 16 * g; c < 16 * g + 16; ++c) {
        key_words.push_back(tile::TileBitInPage(true, slot, c, 5, 128, 8).byte / 4);
        value_words.push_back(tile::TileBitInPage(false, slot, c, 5, 128, 8).byte / 4);
      }
      std::sort(key_words.begin(), key_words.end());
      std::sort(value_words.begin(), value_words.end());
      EXPECT_EQ(std::unique(key_words.begin(), key_words.end()) - key_words.begin(), 1);
      EXPECT_EQ(std::unique(value_words.begin(), value_words.end()) - value_words.begin(), 8);
    }
  }
}

// The bit position is the codec's: TileBitIndex(row, col) (tile_planes.h) of the fragment cell,
// token x channel for keys and channel x token for values, at every plane and group.
TEST(TilePagesTest, TileBitInPageIsTheCodecsTileBitIndex) {
  constexpr int kD = 128, kW = 8;
  for (int row = 0; row < 16; ++row) {
    for (int col = 0; col < 16; ++col) {
      const int want = codec::TileBitIndex(row, col);
      for (const int tile : {0, 5, 15}) {
        for (const int group : {0, 7}) {
          for (const int plane : {0, 6}) {
            const int64_t plane_at = ((int64_t{tile} * (kD / 16) + group) * kW + plane) * 32;
            const tile::TileBit key =
                tile::TileBitInPage(true, 16 * tile + row, 16 * group + col, plane, kD, kW);
            const tile::TileBit value =
                tile::TileBitInPage(false, 16 * tile + col, 16 * group + row, plane, kD, kW);
            ASSERT_EQ((key.byte - plane_at) * 8 + key.bit, want) << row << " " << col;
            ASSERT_EQ((value.byte - plane_at) * 8 + value.bit, want) << row << " " << col;
          }
        }
      }
    }
  }
}

// Byte keys: a (page, KV head) block scattered byte by byte with KeyByteInPage is the codec's
// byte-key store of the page's 256 tokens, byte for byte (its tiles are the page's slots).
TEST(TilePagesTest, KeyByteInPageIsTheByteKeyStoresOrder) {
  for (const int d : {64, 128}) {
    codec::TilePlaneStore store(d, 8, codec::PlaneLayout::kTilesByteKeys);
    std::vector<std::vector<uint8_t>> codes;
    for (int t = 0; t < kPageTokens; ++t) {
      std::vector<uint8_t> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
      for (int c = 0; c < d; ++c) {
        k[static_cast<size_t>(c)] = static_cast<uint8_t>((t * 131 + c * 7 + t * c) & 0xff);
      }
      store.Append(k, v);
      codes.push_back(k);
    }
    std::vector<uint8_t> page(static_cast<size_t>(tile::PageHeadBytes(d, 8)), 0);
    std::vector<int> written(page.size(), 0);
    for (int t = 0; t < kPageTokens; ++t) {
      for (int c = 0; c < d; ++c) {
        const auto at = static_cast<size_t>(tile::KeyByteInPage(t, c, d));
        ASSERT_LT(at, page.size());
        page[at] = codes[static_cast<size_t>(t)][static_cast<size_t>(c)];
        ++written[at];
      }
    }
    for (const int n : written) ASSERT_EQ(n, 1);  // every byte once: a plain store, no atomics
    ASSERT_EQ(std::memcmp(page.data(), store.KeyTile(0, 0), page.size()), 0) << "d " << d;
  }
}

}  // namespace
}  // namespace readkv::cuda
