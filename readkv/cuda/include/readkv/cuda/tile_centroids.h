// The standard-Gaussian centroid tables of the tile reader's GPU decode (src/tile_fragment.h) in
// f16, built once on the host from the codec's LloydTree. Plain data: a kernel takes it by value
// (kernel parameter) or copies it to shared memory. Host code; compiled with and without CUDA.
#pragma once

#include <cstdint>

// Declared, not included: the kernels (C++17 under nvcc) include this header, codebook.h needs
// C++20.
namespace readkv::codec {
class LloydTree;
}

namespace readkv::cuda::tile {

inline constexpr int kMaxTileDepth = 8;
// Entries of TileCentroids::table: depth t at [2^t - 1, 2^(t+1) - 1), t = 0..8.
inline constexpr int kTileTableEntries = (2 << kMaxTileDepth) - 1;
inline constexpr int kTileTableVectors = (kTileTableEntries * 2 + 15) / 16;  // 16-byte pieces

struct TileCentroids {
  uint32_t depth1_negative = 0;  // f16x2 of C_1[0] (-c) in both halves
  uint32_t depth2_base = 0;      // f16x2 of C_2[0] (-c_b) in both halves
  uint32_t depth2_flip = 0;      // f16x2 of C_2[0] ^ C_2[1]: the bits where c_b and c_a differ
  // f16 bits (round to nearest even) of C_t[code]; 16-byte aligned so that the kernels copy it
  // to shared memory in kTileTableVectors 16-byte loads (the last one reads 2 padding bytes).
  alignas(16) uint16_t table[kTileTableEntries] = {};
  // f32 C_t's largest centroid (0 at t = 0): what an outlier entry's correction subtracts
  // (tile_outliers.h; codec::OutlierCorrection reads the same float).
  float outermost[kMaxTileDepth + 1] = {};
};

// The tables of `tree` (depths above its store_bits stay zero: a W-bit store has no deeper
// planes). Throws readkv::codec::InvalidArgument("codebook") unless its depth-1 and depth-2
// centroids are antisymmetric in f16 (what the sign paths assume; the Lloyd tree is by
// construction) and ordered -c_b < -c_a < 0 < c_a < c_b.
TileCentroids MakeTileCentroids(const codec::LloydTree& tree);

}  // namespace readkv::cuda::tile
