// The GPU tile reader's outlier lists (tile_attention.h, "Outlier lists"; docs/readkv.md,
// "Outliers"): how an entry is packed, which lane of an MMA's C fragment corrects which element,
// and the correction itself. Host and device, so tests/tile_outliers_test.cc replays the kernels'
// assignment on the CPU and proves the correction equal to codec::OutlierCorrection in f32.
//
// An entry is 4 bytes, little-endian as the codec's serialised entry (outliers.h) but with the
// token counted within its 16-token tile: byte 0 the token in the tile (0..15), byte 1 the
// channel (transformed domain, d <= 256), bytes 2-3 the standardised value z in IEEE fp16.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace readkv::cuda::tile {

KVGATE_TILE_HD uint32_t PackOutlierEntry(int token_in_tile, int channel, uint16_t z_half) {
  return static_cast<uint32_t>(token_in_tile) | (static_cast<uint32_t>(channel) << 8) |
         (static_cast<uint32_t>(z_half) << 16);
}
KVGATE_TILE_HD int OutlierToken(uint32_t entry) { return static_cast<int>(entry & 0xffu); }
KVGATE_TILE_HD int OutlierChannel(uint32_t entry) { return static_cast<int>((entry >> 8) & 0xffu); }
KVGATE_TILE_HD uint16_t OutlierZHalf(uint32_t entry) { return static_cast<uint16_t>(entry >> 16); }

// fp16(z) - (the outermost centroid of depth t on z's side), given z as a float and `outermost`
// = C_t's last (largest) centroid, 0 at t = 0: codec::OutlierCorrection's arithmetic exactly (one
// f32 subtraction; at t = 0, z - 0 = z).
KVGATE_TILE_HD float OutlierCorrectionOf(float z, float outermost) {
  return z - (z >= 0.0f ? outermost : -outermost);
}

// The C fragment of m16n8k16 (f32): element k of lane l is row l / 4 + 8 (k / 2), column
// 2 (l % 4) + k % 2. An entry corrects one row (a key tile's token, or a value tile's channel
// within its 16-channel group) over the heads in the columns: the lanes whose l / 4 is the row
// modulo 8 hold it, at elements OutlierRowSlot(l, row) + {0, 1} (columns 2 (l % 4) + {0, 1});
// every other lane gets -1 and adds nothing.
KVGATE_TILE_HD int OutlierRowSlot(int lane, int row) {
  return row % 8 == lane / 4 ? 2 * (row / 8) : -1;
}

}  // namespace readkv::cuda::tile
