// The bench's relayout of ReadKV's paged planes into the tile layout (src/tile_relayout.h): the
// same random codes appended to the codec's BitPlaneStore (whose blocks are the paged layout of
// decode_attention.h) and TilePlaneStore (the tile layout), the first store's planes scattered
// into pages in a shuffled order with every bit of absent tokens set, and every tile byte gathered
// back must equal the second store's (0 past a sequence's tiles). On the CPU in every build; where
// nvcc is found, the same pages through bench::PagesToTiles on the GPU (skipped without one).
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

#if defined(KVGATE_HAVE_CUDA)
#include "bench_kernels.h"
#include "readkv/cuda/device.h"
#include "test_buffers.h"
#endif

namespace readkv::cuda::bench {
namespace {

constexpr int kHeads = 2, kDim = 32, kBits = 3, kGroups = kDim / 16;
const std::vector<int> kLens = {300, 17};  // 2 pages (19 tiles, the last partial); 1 page
constexpr int kMaxPages = 2, kMaxTiles = (300 + 15) / 16;

// Paged planes of kLens under a shuffled page table, and the tile bytes the codec expects.
struct Fixture {
  std::vector<uint8_t> key_pages, value_pages;  // [3 pages][H_kv][...], absent bits all 1
  std::vector<int32_t> page_table = {2, 0, 1, 0};  // sequence 0: pages 2, 0; sequence 1: page 1
  std::vector<int32_t> lens;
  std::vector<uint8_t> key_tiles, value_tiles;  // [B][H_kv][kMaxTiles][G][W][32]

  PagedPlanes Planes() const {
    return PagedPlanes{key_pages.data(), value_pages.data(), page_table.data(), kHeads, kDim, kBits,
                       kMaxPages};
  }
  static size_t TileByte(int b, int h, int tile, int group, int plane, int lane) {
    const size_t row = static_cast<size_t>(b) * kHeads + h;
    return (((row * kMaxTiles + tile) * kGroups + group) * kBits + plane) * 32 + lane;
  }
};

Fixture MakeFixture() {
  Fixture f;
  const size_t key_page = static_cast<size_t>(kHeads) * kDim * kBits * 32;
  const size_t value_page = static_cast<size_t>(kHeads) * kPageTokens * kBits * (kDim / 8);
  f.key_pages.assign(3 * key_page, 0xFF);
  f.value_pages.assign(3 * value_page, 0xFF);
  f.key_tiles.assign(kLens.size() * kHeads * kMaxTiles * kGroups * kBits * 32, 0);
  f.value_tiles.assign(f.key_tiles.size(), 0);
  kvgate::stats::SplitMixRng rng(kvgate::stats::DeriveSeed(37, 1));
  for (size_t b = 0; b < kLens.size(); ++b) {
    f.lens.push_back(kLens[b]);
    for (int h = 0; h < kHeads; ++h) {
      codec::BitPlaneStore planes(kDim, kBits);
      codec::TilePlaneStore tiles(kDim, kBits);
      std::vector<uint8_t> key(kDim), value(kDim);
      for (int i = 0; i < kLens[b]; ++i) {
        for (int c = 0; c < kDim; ++c) {
          key[c] = static_cast<uint8_t>(rng.UniformIndex(1u << kBits));
          value[c] = static_cast<uint8_t>(rng.UniformIndex(1u << kBits));
        }
        planes.Append(key, value);
        tiles.Append(key, value);
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

#if defined(KVGATE_HAVE_CUDA)
TEST(TileRelayoutTest, GpuRelayoutMatchesTheHostGather) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const Fixture f = MakeFixture();
  DeviceBuffer<uint8_t> keys(f.key_pages), values(f.value_pages);
  DeviceBuffer<int32_t> table(f.page_table), lens(f.lens);
  DeviceBuffer<uint8_t> key_tiles(f.key_tiles.size()), value_tiles(f.value_tiles.size());
  const PagedPlanes src{keys.get(), values.get(), table.get(), kHeads, kDim, kBits, kMaxPages};
  ASSERT_EQ(PagesToTiles(src, lens.get(), static_cast<int>(kLens.size()), kMaxTiles,
                         key_tiles.get(), value_tiles.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(key_tiles.Download(f.key_tiles.size()), f.key_tiles);
  EXPECT_EQ(value_tiles.Download(f.value_tiles.size()), f.value_tiles);
}
#endif

}  // namespace
}  // namespace readkv::cuda::bench
