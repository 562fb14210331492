// Keys as uniform bytes: the second key format of the tile layout (PlaneLayout::kTilesByteKeys,
// tile_planes.h; docs/readkv.md, "Byte keys").
//
// Why: every served split so far reads the keys whole (R_K = W = 8), and a whole Lloyd-tree code
// costs the GPU reader its 8 x 8 bit transpose and a table read per element, ~5x FP8's decode
// (docs/performance-notes.md, "The served geometry's keys"). Stored instead as one byte per
// element on a uniform grid, a key decodes with a byte permute and one f16 fma per pair, as
// FP8's does, and the planes' progressive read is given up for keys only (values stay tree
// planes, read at chosen depths).
//
// The grid: the standardised, transformed key z (as the tree encodes it) is clamped to [-4, 4)
// in steps of 1/32, code = clamp(floor(32 z) + 128, 0, 255), read back at the cell's midpoint
// (code - 127.5) / 32: every value is exact in f16 and in float, and |z - value| <= 1/64 inside
// the grid. Gaussian MSE per element 8.8e-5 against the depth-8 tree's 4.5e-5 and FP8 e4m3's
// 7.0e-4 (readkv/cuda/bench/key_byte_formats_mse.py). Past the grid the outlier lists correct as
// they do for the tree: every z with |z| > 3.96875 has an extreme code, and the lists' threshold
// is never below the W = 8 tree's outermost threshold (3.99), so an entry's correction needs
// only z's sign: fp16(z) - (+-3.984375).
// Pure and constexpr where it can be.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace readkv::codec {

inline constexpr int kKeyByteStoreBits = 8;  // byte keys exist for W = 8 only
inline constexpr float kKeyByteScale = 32.0f;           // grid cells per unit of z
inline constexpr float kKeyByteOutermost = 127.5f / 32.0f;  // the extreme codes' value

inline uint8_t EncodeKeyByte(float z) {
  if (std::isnan(z)) return 0;  // as LloydTree::Encode
  return static_cast<uint8_t>(std::clamp(std::floor(z * kKeyByteScale) + 128.0f, 0.0f, 255.0f));
}

constexpr float KeyByteValue(uint8_t code) {
  return (static_cast<float>(code) - 127.5f) / kKeyByteScale;
}

}  // namespace readkv::codec
