// The tile reader's depth-dependent ledgers as the kernels sum them (TileDecodeDebug::totals,
// tile_attention.h): logical plane bits and plane payload bytes of one Key row or one Value
// tile. Host and device: TilePrepare and TileSelect add these, and tests/tile_ledgers_test.cc
// proves their sums equal to the codec's TileAttend ledgers on the CPU reader's own depths.
// Internal to readkv/cuda (C++17: nvcc compiles it).
#pragma once

#include "host_device.h"

namespace readkv::cuda::tile {

struct ReadSums {
  long long bits = 0;   // logical: t bits a scalar read at depth t (a partial tile counts its
                        // tokens only)
  long long bytes = 0;  // payload: whole 32-byte plane sectors (a partial tile's are whole)
};

// A row's Key planes: `depth_sum` = sum of its d / 16 group depths, over `encoded` tokens
// (16 channels a group).
KVGATE_TILE_HD ReadSums KeyRowReads(long long encoded, long long depth_sum) {
  return {16 * encoded * depth_sum, 32 * ((encoded + 15) / 16) * depth_sum};
}

// Value tile j of a row of `encoded` tokens, read at `depth`, head dim d: its min(16, E - 16 j)
// tokens' d scalars, and d / 16 groups of `depth` whole sectors.
KVGATE_TILE_HD ReadSums ValueTileReads(long long encoded, int j, int depth, int head_dim) {
  const long long left = encoded - 16LL * j;
  const long long tokens = left < 16 ? left : 16;
  return {depth * tokens * head_dim, static_cast<long long>(depth) * (head_dim / 16) * 32};
}

}  // namespace readkv::cuda::tile
