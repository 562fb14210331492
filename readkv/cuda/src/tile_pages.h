// Where the tile reader's planes live in its paged pools (tile_attention.h, "The tile pools"):
// the address of a token tile through the page table, and the byte and bit of one code bit
// (token slot, channel, plane) inside a page. Host and device: the kernels (tile_kernels.cuh,
// tile_append.cu) address the pools with these, and tests/tile_pages_test.cc replays them on the
// CPU against the codec's TilePlaneStore.
// Internal to readkv/cuda (C++17: nvcc compiles it).
#pragma once

#include <cstdint>

#include "host_device.h"
#include "readkv/cuda/decode_attention.h"

namespace readkv::cuda::tile {

// Token tiles of a page: a page is kPageTokens = 256 tokens, as ReadKV's.
inline constexpr int kPageTiles = kPageTokens / 16;

// Bytes of one token tile of one KV head: d / 16 groups x W planes x 32 bytes.
KVGATE_TILE_HD int64_t TokenTileBytes(int head_dim, int store_bits) {
  return int64_t{head_dim / 16} * store_bits * 32;
}

// Bytes of one (page, KV head) block of a pool: its 16 token tiles.
KVGATE_TILE_HD int64_t PageHeadBytes(int head_dim, int store_bits) {
  return kPageTiles * TokenTileBytes(head_dim, store_bits);
}

// Byte offset in a pool [num_pages][H_kv][16][d / 16][W][32] of token tile `tile` of KV head h
// of sequence b: slot tile % 16 of page page_table[b * max_pages + tile / 16].
KVGATE_TILE_HD int64_t TileOffset(const int32_t* page_table, int max_pages, int heads_kv,
                                  int64_t tile_bytes, int b, int h, int tile) {
  const int64_t page = page_table[int64_t{b} * max_pages + tile / kPageTiles];
  return ((page * heads_kv + h) * kPageTiles + tile % kPageTiles) * tile_bytes;
}

// One code bit's place in a (page, KV head) block: bit `bit` of byte `byte`.
struct TileBit {
  int64_t byte = 0;
  int bit = 0;
};

// Bit `plane` (from the most significant) of the code of the token in page slot `slot`
// (0..255) at channel `channel` (0..d-1), of keys or of values: the tile slot / 16, group
// channel / 16, plane, then the fragment cell (row, col) = (token, channel) % 16 for a key tile,
// (channel, token) % 16 for a value tile, which m16n8k16's A fragment gives to byte
// lane = 4 (row % 8) + (col % 8) / 2 of the plane, bit col % 2 + 2 (row / 8) + 4 (col / 8)
// (codec::TileBitIndex, the inverse of codec::TileElement).
KVGATE_TILE_HD TileBit TileBitInPage(bool keys, int slot, int channel, int plane, int head_dim,
                                     int store_bits) {
  const int row = keys ? slot % 16 : channel % 16;
  const int col = keys ? channel % 16 : slot % 16;
  const int lane = 4 * (row % 8) + (col % 8) / 2;
  const int64_t plane_at =
      (int64_t{slot / 16} * (head_dim / 16) + channel / 16) * store_bits + plane;
  return TileBit{plane_at * 32 + lane, col % 2 + 2 * (row / 8) + 4 * (col / 8)};
}

// The byte of a byte key (codec::PlaneLayout::kTilesByteKeys, W = 8) in a (page, KV head) block
// of the key pool: the token tile slot / 16 and group channel / 16 as TileBitInPage's, then byte
// 8 lane + k of the tile's 256, (lane, k) the fragment cell of (token, channel) % 16 (what
// TileBitInPage gives as its byte in the plane and its bit).
KVGATE_TILE_HD int64_t KeyByteInPage(int slot, int channel, int head_dim) {
  const TileBit at = TileBitInPage(true, slot, channel, 0, head_dim, 8);
  const int64_t lane = at.byte % 32;
  return at.byte - lane + 8 * lane + at.bit;
}

}  // namespace readkv::cuda::tile
