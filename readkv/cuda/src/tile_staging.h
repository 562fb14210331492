// Where the tile reader's Logits and Values warps put their staged bytes (tile_kernels.cuh): a
// warp's share of a chunk's token tiles, the compact run of a key tile's chosen planes, the
// stages of value tiles of varying depth. Host and device, so tests/tile_staging_test.cc replays
// the kernels' copies and reads on the CPU against the tile layout itself, and the traffic model
// (traffic.cc) counts the same stages.
//
// Tile layout (tile_attention.h): a token tile of one row is d / 16 groups x W planes x 32 bytes;
// a copy moves 16-byte pieces (cp.async), two per plane.
#pragma once

#include <cstdint>

#include "host_device.h"
#include "tile_plan.h"

namespace readkv::cuda::tile {

// A warp's contiguous share [lo, hi) of the token tiles [first, end): kTileBlockWarps warps, the
// first ones one tile more when the count does not divide; empty when end <= first (a chunk
// past the sequence).
struct WarpShare {
  int lo = 0, hi = 0;
  KVGATE_TILE_HD int count() const { return hi - lo; }
};
KVGATE_TILE_HD WarpShare ShareOfWarp(int first, int end, int warp) {
  if (end <= first) return WarpShare{first, first};
  const int per_warp = (end - first + internal::kTileBlockWarps - 1) / internal::kTileBlockWarps;
  const int lo = first + warp * per_warp < end ? first + warp * per_warp : end;
  return WarpShare{lo, lo + per_warp < end ? lo + per_warp : end};
}

// ---- Keys: every token tile of a row is read at the same group depths ----------------------------

// A staged key tile holds group g's planes [0, t_g) at planes [plane_at[g], plane_at[g] + t_g):
// 16-byte piece o of the staged tile (o < 2 x planes) comes from byte piece[o] x 16 of the token
// tile. Returns planes = sum_g t_g. plane_at has `groups` entries, piece 2 x planes.
KVGATE_TILE_HD int PlanKeyStaging(const uint8_t* depth, int groups, int store_bits,
                                  uint8_t* plane_at, uint16_t* piece) {
  int at = 0;
  for (int g = 0; g < groups; ++g) {
    plane_at[g] = static_cast<uint8_t>(at);
    for (int p = 0; p < depth[g]; ++p, ++at) {
      piece[2 * at] = static_cast<uint16_t>(2 * (g * store_bits + p));
      piece[2 * at + 1] = static_cast<uint16_t>(2 * (g * store_bits + p) + 1);
    }
  }
  return at;
}

// Key tiles a stage holds: as many as fit kTileStageBytes, at most kTileStageTiles, at least 1.
KVGATE_TILE_HD int KeyTilesPerStage(int planes) {
  const int fit = internal::kTileStageBytes / (32 * (planes > 0 ? planes : 1));
  return fit < 1 ? 1 : (fit > internal::kTileStageTiles ? internal::kTileStageTiles : fit);
}

// ---- Values: each token tile has its own depth --------------------------------------------------

// A staged value tile: its e values and maxima (`head_bytes`: G x 16 f16, then G floats padded to
// 16 bytes), then its d / 16 group runs of t planes back to back.
KVGATE_TILE_HD constexpr int ValueHeadBytes(int group) {
  return group * 32 + (group * 4 + 15) / 16 * 16;
}
KVGATE_TILE_HD int ValueTileBytes(int depth, int groups, int head_bytes) {
  return head_bytes + groups * depth * 32;
}

// Byte offset in the token tile of the staged plane run's 16-byte piece o at depth t: group
// o / 2t, plane (o % 2t) / 2, half o % 2.
KVGATE_TILE_HD int ValuePieceSource(int o, int depth, int store_bits) {
  return (o / (2 * depth)) * store_bits * 32 + (o % (2 * depth)) * 16;
}

// The value tiles of the stage that starts at the warp's tile s (of `count`): consecutive tiles
// while their bytes fit kTileStageBytes (the first always), at most kTileStageTiles.
// depth_of(i) gives the depth of the warp's tile i (a shuffle on the GPU).
// The same without a division per piece: recip = PieceRunReciprocal(depth), and o / (2 depth)
// is (o recip) >> 16, exact for o < 2^10 and 2 depth <= 16 (the error o / 2^16 stays below the
// 1 / (2 depth) a quotient step needs).
KVGATE_TILE_HD uint32_t PieceRunReciprocal(int depth) {
  return depth > 0 ? 65536u / static_cast<uint32_t>(2 * depth) + 1u : 0u;
}
KVGATE_TILE_HD int ValuePieceSourceBy(int o, int depth, uint32_t recip, int store_bits) {
  const int run = static_cast<int>((static_cast<uint32_t>(o) * recip) >> 16);
  return run * store_bits * 32 + (o - run * 2 * depth) * 16;
}

template <typename DepthOf>
KVGATE_TILE_HD int ValueStageTiles(const DepthOf& depth_of, int s, int count, int groups,
                                   int head_bytes) {
  int n = 0, bytes = 0;
  while (n < internal::kTileStageTiles && s + n < count) {
    const int tile_bytes = ValueTileBytes(depth_of(s + n), groups, head_bytes);
    if (n > 0 && bytes + tile_bytes > internal::kTileStageBytes) break;
    bytes += tile_bytes;
    ++n;
  }
  return n;
}

}  // namespace readkv::cuda::tile
