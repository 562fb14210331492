// The bench's relayout of ReadKV's paged planes into the tile pools (src/tile_relayout.h) and
// the pools' addressing (src/tile_pages.h): the same random codes appended to the codec's
// BitPlaneStore (whose blocks are the paged layout of decode_attention.h) and TilePlaneStore
// (the tile layout), the first store's planes scattered into pages in a shuffled order with every
// bit of absent tokens set. Every tile byte gathered back must equal the second store's (0 past a
// sequence's tokens); PoolByte must put each tile in slot r % 16 of its page (every byte of the
// owned pages once); and the codes scattered bit by bit with TileBitInPage (what TileAppend
// writes) must give pools byte-equal to the gather's. On the CPU in every build; where nvcc is
// found, the same pages through bench::PagesToTiles on the GPU (skipped without one).
#include "tile_relayout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/bitplanes.h"
#include "readkv/codec/tile_planes.h"
#include "tile_pages.h"

#if defined(KVGATE_HAVE_CUDA)
#include "bench_kernels.h"
#include "readkv/cuda/device.h"
#include "test_buffers.h"
#endif

namespace readkv::cuda::bench {
namespace {

constexpr int kHeads = 2, kDim = 32, kBits = 3, kGroups = kDim / 16, kPages = 3;
const std::vector<int> kLens = {300, 17};  // 2 pages (19 tiles, the last partial); 1 page
constexpr int kMaxPages = 2, kMaxTiles = (300 + 15) / 16;
constexpr size_t kTileBytes = static_cast<size_t>(kGroups) * kBits * 32;
constexpr size_t kPoolBytes = static_cast<size_t>(kPages) * kHeads * 16 * kTileBytes;

// Paged planes of kLens under a shuffled page table, and the tile bytes the codec expects.
struct Fixture {
  std::vector<uint8_t> key_pages, value_pages;  // [3 pages][H_kv][...], absent bits all 1
  // Sequence 0: pages 2, 0; sequence 1: page 1, and an unused entry naming sequence 0's page 0.
  std::vector<int32_t> page_table = {2, 0, 1, 0};
  std::vector<int32_t> lens;
  std::vector<uint8_t> key_tiles, value_tiles;  // [B][H_kv][kMaxTiles][G][W][32]
  std::vector<std::vector<uint8_t>> key_codes, value_codes;  // [b H_kv + h][token d + channel]

  PagedPlanes Planes() const {
    return PagedPlanes{key_pages.data(), value_pages.data(), page_table.data(), kHeads, kDim, kBits,
                       kMaxPages};
  }
  static size_t TileByte(int b, int h, int tile, int group, int plane, int lane) {
    const size_t row = static_cast<size_t>(b) * kHeads + h;
    return (((row * kMaxTiles + tile) * kGroups + group) * kBits + plane) * 32 + lane;
  }
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
  const size_t key_page = static_cast<size_t>(kHeads) * kDim * kBits * 32;
  const size_t value_page = static_cast<size_t>(kHeads) * kPageTokens * kBits * (kDim / 8);
  f.key_pages.assign(kPages * key_page, 0xFF);
  f.value_pages.assign(kPages * value_page, 0xFF);
  f.key_tiles.assign(kLens.size() * kHeads * kMaxTiles * kTileBytes, 0);
  f.value_tiles.assign(f.key_tiles.size(), 0);
  kvgate::stats::SplitMixRng rng(kvgate::stats::DeriveSeed(37, 1));
  for (size_t b = 0; b < kLens.size(); ++b) {
    f.lens.push_back(kLens[b]);
    for (int h = 0; h < kHeads; ++h) {
      codec::BitPlaneStore planes(kDim, kBits);
      codec::TilePlaneStore tiles(kDim, kBits);
      std::vector<uint8_t> key(kDim), value(kDim);
      f.key_codes.emplace_back();
      f.value_codes.emplace_back();
      for (int i = 0; i < kLens[b]; ++i) {
        for (int c = 0; c < kDim; ++c) {
          key[c] = static_cast<uint8_t>(rng.UniformIndex(1u << kBits));
          value[c] = static_cast<uint8_t>(rng.UniformIndex(1u << kBits));
        }
        planes.Append(key, value);
        tiles.Append(key, value);
        f.key_codes.back().insert(f.key_codes.back().end(), key.begin(), key.end());
        f.value_codes.back().insert(f.value_codes.back().end(), value.begin(), value.end());
      }
      for (int64_t j = 0; j < planes.blocks(); ++j) {
        const int64_t page = f.page_table[b * kMaxPages + j];
        const int64_t present = std::min<int64_t>(kPageTokens, kLens[b] - j * kPageTokens);
        for (int c = 0; c < kDim; ++c) {
          for (int p = 0; p < kBits; ++p) {
            uint8_t* dst = f.key_pages.data() + page * key_page +
                           ((static_cast<size_t>(h) * kDim + c) * kBits + p) * 32;
            std::memcpy(dst, planes.KeyPlane(j, c, p), 32);  // little-endian words
            for (int64_t s = present; s < kPageTokens; ++s) dst[s / 8] |= 1u << (s % 8);
          }
        }
        for (int64_t s = 0; s < present; ++s) {
          for (int p = 0; p < kBits; ++p) {
            std::memcpy(f.value_pages.data() + page * value_page +
                            ((static_cast<size_t>(h) * kPageTokens + s) * kBits + p) * (kDim / 8),
                        planes.ValuePlane(j * kPageTokens + s, p), kDim / 8);
          }
        }
      }
      for (int64_t r = 0; r < tiles.token_tiles(); ++r) {
        for (int g = 0; g < kGroups; ++g) {
          const size_t at = Fixture::TileByte(static_cast<int>(b), h, static_cast<int>(r), g, 0, 0);
          std::memcpy(f.key_tiles.data() + at, tiles.KeyTile(r, g), kBits * 32);
          std::memcpy(f.value_tiles.data() + at, tiles.ValueTile(r, g), kBits * 32);
        }
      }
    }
  }
  return f;
}

// The pools as the gather fills them: every byte of every tile of a sequence's pages at
// PoolByte (what PagesToTiles writes), the rest of the pools `fill`.
struct Pools {
  std::vector<uint8_t> keys, values;
};
Pools GatherPools(const Fixture& f, uint8_t fill) {
  const PagedPlanes src = f.Planes();
  Pools pools{std::vector<uint8_t>(kPoolBytes, fill), std::vector<uint8_t>(kPoolBytes, fill)};
  for (int b = 0; b < static_cast<int>(kLens.size()); ++b) {
    for (int h = 0; h < kHeads; ++h) {
      for (int r = 0; r < PagedTiles(kLens[b]); ++r) {
        for (int g = 0; g < kGroups; ++g) {
          for (int p = 0; p < kBits; ++p) {
            for (int lane = 0; lane < 32; ++lane) {
              const auto at = static_cast<size_t>(PoolByte(src, b, h, r, g, p, lane));
              pools.keys[at] = TileByteFromPages(src, true, b, h, kLens[b], r, g, p, lane);
              pools.values[at] = TileByteFromPages(src, false, b, h, kLens[b], r, g, p, lane);
            }
          }
        }
      }
    }
  }
  return pools;
}

TEST(TileRelayoutTest, EveryTileByteMatchesTheCodecTileStore) {
  const Fixture f = MakeFixture();
  const PagedPlanes src = f.Planes();
  int64_t set_bits = 0;
  for (int b = 0; b < static_cast<int>(kLens.size()); ++b) {
    for (int h = 0; h < kHeads; ++h) {
      for (int r = 0; r < kMaxTiles; ++r) {
        for (int g = 0; g < kGroups; ++g) {
          for (int p = 0; p < kBits; ++p) {
            for (int lane = 0; lane < 32; ++lane) {
              const size_t at = Fixture::TileByte(b, h, r, g, p, lane);
              const uint8_t key = TileByteFromPages(src, true, b, h, kLens[b], r, g, p, lane);
              const uint8_t value = TileByteFromPages(src, false, b, h, kLens[b], r, g, p, lane);
              ASSERT_EQ(key, f.key_tiles[at])
                  << "key: sequence " << b << " head " << h << " tile " << r << " group " << g
                  << " plane " << p << " lane " << lane;
              ASSERT_EQ(value, f.value_tiles[at])
                  << "value: sequence " << b << " head " << h << " tile " << r << " group " << g
                  << " plane " << p << " lane " << lane;
              set_bits += std::popcount(key) + std::popcount(value);
            }
          }
        }
      }
    }
  }
  EXPECT_GT(set_bits, 0);  // random codes: the comparison is not between zeros
}

TEST(TileRelayoutTest, EachTileSitsInSlotTileMod16OfItsPage) {
  const Fixture f = MakeFixture();
  const PagedPlanes src = f.Planes();
  std::vector<int> hits(kPoolBytes, 0);
  for (int b = 0; b < static_cast<int>(kLens.size()); ++b) {
    EXPECT_EQ(PagedTiles(kLens[b]), 16 * ((kLens[b] + 255) / 256)) << "sequence " << b;
    for (int h = 0; h < kHeads; ++h) {
      for (int r = 0; r < PagedTiles(kLens[b]); ++r) {
        // The tile's start through the page table, as the kernels take it.
        const int64_t tile_at = tile::TileOffset(f.page_table.data(), kMaxPages, kHeads,
                                                 tile::TokenTileBytes(kDim, kBits), b, h, r);
        ASSERT_EQ(static_cast<size_t>(tile_at), f.PoolAt(b, h, r, 0, 0, 0))
            << "sequence " << b << " head " << h << " tile " << r;
        for (int g = 0; g < kGroups; ++g) {
          for (int p = 0; p < kBits; ++p) {
            for (int lane = 0; lane < 32; ++lane) {
              const int64_t at = PoolByte(src, b, h, r, g, p, lane);
              ASSERT_EQ(static_cast<size_t>(at), f.PoolAt(b, h, r, g, p, lane));
              ++hits[static_cast<size_t>(at)];
            }
          }
        }
      }
    }
  }
  // The 3 owned pages hold every pool byte once: no sequence writes into another's page (the
  // page table's unused entry names sequence 0's page 0).
  EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(tile::PageHeadBytes(kDim, kBits), static_cast<int64_t>(16 * kTileBytes));
}

// TileAppend's placement replayed on the CPU: each code bit (token slot, channel, plane) ORed
// into zeroed pools at TileBitInPage gives exactly the gather's pools, every byte.
TEST(TileRelayoutTest, TileBitInPageScattersWhereTheGatherPutsEveryByte) {
  const Fixture f = MakeFixture();
  const Pools want = GatherPools(f, 0);
  Pools got{std::vector<uint8_t>(kPoolBytes, 0), std::vector<uint8_t>(kPoolBytes, 0)};
  const auto block_bytes = static_cast<size_t>(tile::PageHeadBytes(kDim, kBits));
  int64_t set_bits = 0;
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
            got.keys[block + static_cast<size_t>(key.byte)] |=
                static_cast<uint8_t>(((f.key_codes[row][code] >> shift) & 1u) << key.bit);
            got.values[block + static_cast<size_t>(value.byte)] |=
                static_cast<uint8_t>(((f.value_codes[row][code] >> shift) & 1u) << value.bit);
          }
        }
      }
    }
  }
  for (size_t at = 0; at < kPoolBytes; ++at) {
    ASSERT_EQ(got.keys[at], want.keys[at]) << "key pool byte " << at;
    ASSERT_EQ(got.values[at], want.values[at]) << "value pool byte " << at;
    set_bits += std::popcount(got.keys[at]) + std::popcount(got.values[at]);
  }
  EXPECT_GT(set_bits, 0);
}

// The 16 channels of a key group (one token, one plane) land in one 32-bit word, a value group's
// in 8 (channels c and c + 8 share a byte): TileAppend's atomics per token and plane are one a
// key group and eight a value group.
TEST(TileRelayoutTest, TileBitInPageWordsPerGroup) {
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
TEST(TileRelayoutTest, TileBitInPageIsTheCodecsTileBitIndex) {
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
TEST(TileRelayoutTest, KeyByteInPageIsTheByteKeyStoresOrder) {
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

#if defined(KVGATE_HAVE_CUDA)
TEST(TileRelayoutTest, GpuRelayoutMatchesTheHostGather) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const Fixture f = MakeFixture();
  // Poisoned pools: the 3 pages are all owned, so every byte must be written.
  const Pools want = GatherPools(f, 0xAB);
  DeviceBuffer<uint8_t> keys(f.key_pages), values(f.value_pages);
  DeviceBuffer<int32_t> table(f.page_table), lens(f.lens);
  DeviceBuffer<uint8_t> key_pool(std::vector<uint8_t>(kPoolBytes, 0xAB));
  DeviceBuffer<uint8_t> value_pool(std::vector<uint8_t>(kPoolBytes, 0xAB));
  const PagedPlanes src{keys.get(), values.get(), table.get(), kHeads, kDim, kBits, kMaxPages};
  ASSERT_EQ(PagesToTiles(src, lens.get(), static_cast<int>(kLens.size()), key_pool.get(),
                         value_pool.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(key_pool.Download(kPoolBytes), want.keys);
  EXPECT_EQ(value_pool.Download(kPoolBytes), want.values);
}
#endif

}  // namespace
}  // namespace readkv::cuda::bench
