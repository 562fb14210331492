// The GPU tile reader's outlier lists (tile_attention.h, "Outlier lists"; docs/readkv.md,
// "Outliers"): how an entry is packed, which lane of an MMA's C fragment corrects which element,
// where a tile's entries live in the page outlier blocks, and the correction itself. Host and
// device, so tests/tile_outliers_test.cc replays the kernels' assignment on the CPU and proves the
// correction equal to codec::OutlierCorrection in f32.
//
// An entry is 4 bytes, little-endian as the codec's serialised entry (outliers.h) but with the
// token counted within its 16-token tile: byte 0 the token in the tile (0..15), byte 1 the
// channel (transformed domain, d <= 256), bytes 2-3 the standardised value z in IEEE fp16.
#pragma once

#include <cstdint>

#include "host_device.h"
#include "tile_pages.h"
#include "readkv/cuda/tile_attention.h"

namespace readkv::cuda::tile {

KVGATE_TILE_HD uint32_t PackOutlierEntry(int token_in_tile, int channel, uint16_t z_half) {
  return static_cast<uint32_t>(token_in_tile) | (static_cast<uint32_t>(channel) << 8) |
         (static_cast<uint32_t>(z_half) << 16);
}
KVGATE_TILE_HD int OutlierToken(uint32_t entry) { return static_cast<int>(entry & 0xffu); }
KVGATE_TILE_HD int OutlierChannel(uint32_t entry) { return static_cast<int>((entry >> 8) & 0xffu); }
KVGATE_TILE_HD uint16_t OutlierZHalf(uint32_t entry) { return static_cast<uint16_t>(entry >> 16); }

// ---- Page outlier blocks (tile_attention.h, "Outlier lists") ----------------------------------

// Word offset in a pool [num_pages][H_kv][kPageOutlierBlockWords] of block (page, h).
KVGATE_TILE_HD int64_t PageOutlierBlockAt(int64_t page, int heads_kv, int h) {
  return (page * heads_kv + h) * kPageOutlierBlockWords;
}

// The block of token tile `tile` of (b, h), through the page table (as tile_pages.h's TileOffset).
KVGATE_TILE_HD const uint32_t* PageOutlierBlockOf(const uint32_t* pool, const int32_t* page_table,
                                                  int max_pages, int heads_kv, int b, int h,
                                                  int tile) {
  const int64_t page = page_table[int64_t{b} * max_pages + tile / 16];
  return pool + PageOutlierBlockAt(page, heads_kv, h);
}

// tile_start[slot], slot in [0, 16]: u16 `slot` of the header, two a word, low half first.
KVGATE_TILE_HD int PageTileStart(const uint32_t* block, int slot) {
  return static_cast<int>((block[slot / 2] >> (16 * (slot % 2))) & 0xffffu);
}
KVGATE_TILE_HD void SetPageTileStart(uint32_t* block, int slot, int value) {
  const int shift = 16 * (slot % 2);
  block[slot / 2] = (block[slot / 2] & ~(0xffffu << shift)) |
                    (static_cast<uint32_t>(value) << shift);
}

// The entries of a block (kPageOutlierEntries words after the header).
KVGATE_TILE_HD const uint32_t* PageEntries(const uint32_t* block) {
  return block + kPageOutlierHeaderWords;
}
KVGATE_TILE_HD uint32_t* PageEntriesMutable(uint32_t* block) {
  return block + kPageOutlierHeaderWords;
}

// ---- Writing page blocks (TileAppend; tile_append.cu) -------------------------------------------

// codec::SelectOutliers' ranking of channel c among d: abs[j] is |z_j| for a value past the
// threshold and -1 otherwise; the rank is the count of channels ranked before c (larger |z|, or
// equal |z| at a lower channel). A channel past the threshold is selected when rank < cap.
KVGATE_TILE_HD int OutlierRank(const float* abs, int d, int c) {
  const float a = abs[c];
  int rank = 0;
  for (int j = 0; j < d; ++j) rank += (abs[j] > a || (abs[j] == a && j < c)) ? 1 : 0;
  return rank;
}

// Appends the staged entries of the token at page slot `slot` (0..255) to a page block: `staged`
// holds `count` entries (token in tile, channel, fp16 z) in rank order (largest |z| first); the
// first min(count, kPageOutlierEntries - n) of them (n: the block's entries so far) are written
// after the block's entries, sorted by channel, and tile_start[slot / 16 + 1 .. 16] move to the
// new count (a block's tiles past its last token all start at its count). Returns the entries
// dropped by the budget, or -1, writing nothing, for a token out of order: its tile before a
// tile that already holds entries, or its slot not after the last entry's token in its tile
// (tokens must arrive in position order within a page; tile_attention.h, TileAppend).
KVGATE_TILE_HD int AppendToPageBlock(uint32_t* block, int slot, const uint32_t* staged, int count) {
  const int tile = slot / 16;
  const int n = PageTileStart(block, 16);
  uint32_t* entries = PageEntriesMutable(block);
  if (PageTileStart(block, tile + 1) < n) return -1;  // a later tile holds entries
  if (n > PageTileStart(block, tile) && OutlierToken(entries[n - 1]) >= slot % 16) return -1;
  const int left = kPageOutlierEntries - n;
  const int keep = count < left ? count : left;
  for (int m = 0; m < keep; ++m) {  // insertion by channel (keep <= 16)
    const uint32_t e = staged[m];
    int at = n + m;
    while (at > n && OutlierChannel(entries[at - 1]) > OutlierChannel(e)) {
      entries[at] = entries[at - 1];
      --at;
    }
    entries[at] = e;
  }
  for (int s = tile + 1; s <= 16; ++s) SetPageTileStart(block, s, n + keep);
  return count - keep;
}

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
