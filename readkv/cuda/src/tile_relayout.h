// The bench's relayout of ReadKV's paged bit planes (decode_attention.h, ReadKvCache) into the
// tile reader's paged pools (tile_attention.h; docs/readkv.md, "The tile layout") under the same
// page table: one byte of a tile plane gathered from the paged planes, and where it goes in the
// pools, on the host and the device. bench_kernels.cu's PagesToTiles runs it once per byte;
// tests/tile_relayout_test.cc proves the gather on the CPU against the codec's BitPlaneStore and
// TilePlaneStore holding the same codes, and tile_pages.h's bit positions (what TileAppend
// writes) against the gather. Internal to readkv/cuda
// (C++17: nvcc compiles it, so it spells TileElement's formula out rather than including the
// codec's C++20 header).
#pragma once

#include <cstdint>

#include "host_device.h"
#include "readkv/cuda/decode_attention.h"
#include "tile_pages.h"

namespace readkv::cuda::bench {

// One ReadKV cache in the paged layout and its page table (device or host memory, read only).
struct PagedPlanes {
  const uint8_t* key_planes = nullptr;    // [P][H_kv][d][W][32]: token j of a page is bit j % 8
                                          // of byte j / 8 of a plane
  const uint8_t* value_planes = nullptr;  // [P][H_kv][256][W][d / 8]: channel c is bit c % 8 of
                                          // byte c / 8
  const int32_t* page_table = nullptr;    // [B][max_pages]
  int heads_kv = 0, head_dim = 0, store_bits = 0, max_pages = 0;
};

// Byte `lane` of plane `plane` of tile (token tile `tile`, channel group `group`) of KV head h of
// sequence b, holding `tokens` tokens: bit k is fragment element (row lane / 4 + 8 ((k / 2) % 2),
// column 2 (lane % 4) + k % 2 + 8 (k / 4)) (codec::TileElement), a token x channel cell of a key
// tile or a channel x token cell of a value tile. Bits of tokens at or past `tokens` are 0.
KVGATE_TILE_HD uint8_t TileByteFromPages(const PagedPlanes& src, bool keys, int b, int h,
                                         int tokens, int tile, int group, int plane, int lane) {
  unsigned byte = 0;
  for (int k = 0; k < 8; ++k) {
    const int row = lane / 4 + 8 * ((k / 2) % 2);
    const int col = 2 * (lane % 4) + k % 2 + 8 * (k / 4);
    const int token = 16 * tile + (keys ? row : col);
    const int channel = 16 * group + (keys ? col : row);
    if (token >= tokens) continue;
    const int64_t page =
        src.page_table[static_cast<int64_t>(b) * src.max_pages + token / kPageTokens];
    const int slot = token % kPageTokens;
    unsigned bit = 0;
    if (keys) {
      const int64_t at =
          (((page * src.heads_kv + h) * src.head_dim + channel) * src.store_bits + plane) * 32 +
          slot / 8;
      bit = (src.key_planes[at] >> (slot % 8)) & 1u;
    } else {
      const int64_t at =
          (((page * src.heads_kv + h) * kPageTokens + slot) * src.store_bits + plane) *
              (src.head_dim / 8) +
          channel / 8;
      bit = (src.value_planes[at] >> (channel % 8)) & 1u;
    }
    byte |= bit << k;
  }
  return static_cast<uint8_t>(byte);
}

// The token tiles a sequence of `tokens` owns in the pools: its whole pages' (the tiles of its
// last page past its tokens hold zeros).
KVGATE_TILE_HD int PagedTiles(int tokens) {
  return (tokens + kPageTokens - 1) / kPageTokens * tile::kPageTiles;
}

// Where TileByteFromPages(src, keys, b, h, tokens, tile, group, plane, lane) goes in a pool
// [num_pages][H_kv][16][d / 16][W][32] under src's page table (tile < PagedTiles(tokens)).
KVGATE_TILE_HD int64_t PoolByte(const PagedPlanes& src, int b, int h, int tile, int group,
                                int plane, int lane) {
  const int64_t tile_bytes = tile::TokenTileBytes(src.head_dim, src.store_bits);
  return tile::TileOffset(src.page_table, src.max_pages, src.heads_kv, tile_bytes, b, h, tile) +
         (int64_t{group} * src.store_bits + plane) * 32 + lane;
}

}  // namespace readkv::cuda::bench
