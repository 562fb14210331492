// The tile kernels' reads of the outlier page blocks (tile_attention.h, "Outlier lists";
// tile_outliers.h packs an entry): a warp's tiles' entries, the Key and Value corrections added
// to MMA fragments, and the entries a call's lists hold for the ledgers. Included only through
// tile_attention.cu. Internal.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "readkv_device.cuh"
#include "tile_kernel_args.cuh"

namespace readkv::cuda::tile_kernels {

// ---- Outlier lists (tile_attention.h; tile_outliers.h) ---------------------------------------
//
// A tile's entries are read from its page's outlier block (tile::PageOutlierBlockOf) with plain
// loads, every lane the same word (a broadcast): the lists are rare (~0.03 entries per vector on
// the 16K model), so a tile without entries costs its two tile_start halves (one word). Each entry corrects one row of the tile's C fragment over the heads in its columns;
// only the lanes holding that row add (tile::OutlierRowSlot), in the entries' order, in f32 with
// codec::AddKeyOutlierLogits / AddValueOutlierSums' roundings (no contraction).

// acc[slot] += x0, acc[slot + 1] += x1 for slot 0 or 2 when `on`, by selects: no element is
// indexed at run time, so the fragment stays in registers (a branch per group put TileValues'
// accumulators on the stack).
__device__ __forceinline__ void AddToFragmentRow(float (&acc)[4], int slot, float x0, float x1,
                                                 bool on = true) {
  const bool top = on && slot == 0, bottom = on && slot == 2;
  acc[0] = top ? __fadd_rn(acc[0], x0) : acc[0];
  acc[1] = top ? __fadd_rn(acc[1], x1) : acc[1];
  acc[2] = bottom ? __fadd_rn(acc[2], x0) : acc[2];
  acc[3] = bottom ? __fadd_rn(acc[3], x1) : acc[3];
}

__device__ __forceinline__ float OutlierZ(uint32_t entry) {
  return __half2float(__ushort_as_half(tile::OutlierZHalf(entry)));
}

// The entries [lo, hi) of token tile `tile` of (b, h) in `pool` (a kind's page blocks).
struct TileEntries {
  const uint32_t* entries;
  int lo, hi;
};
__device__ __forceinline__ TileEntries EntriesOfTile(const TileArgs& a, const uint32_t* pool, int b,
                                                     int h, int tile) {
  const uint32_t* block =
      tile::PageOutlierBlockOf(pool, a.in.page_table, a.max_pages, a.heads_kv, b, h, tile);
  return {tile::PageEntries(block), tile::PageTileStart(block, tile % 16),
          tile::PageTileStart(block, tile % 16 + 1)};
}

// A warp's lists, read once for all its tiles: lane i holds those of tile first + i (i < count
// <= 32; none without a pool), so their two dependent loads (page table, then the block's
// header) are in flight together instead of one tile after another (up to 32 round trips to
// memory a warp, between its MMAs, when each tile looked its own up).
static_assert(kTileMaxChunk / 16 / kMmaWarps <= kWarp,
              "a warp's token tiles of a chunk must fit its lanes (LaneEntries, TileValues' depths)");
__device__ __forceinline__ TileEntries LaneEntries(const TileArgs& a, const uint32_t* pool, int b,
                                                   int h, int first, int count, int lane) {
  if (pool == nullptr || lane >= count) return {nullptr, 0, 0};
  return EntriesOfTile(a, pool, b, h, first + lane);
}

// Tile i's lists from the lane that holds them (every lane calls it; the result is uniform).
__device__ __forceinline__ TileEntries EntriesFromLane(const TileEntries& mine, int i) {
  const int lo = __shfl_sync(0xffffffffu, mine.lo, i);
  const int hi = __shfl_sync(0xffffffffu, mine.hi, i);
  const uint64_t at = ShuffleWord64(reinterpret_cast<uintptr_t>(mine.entries), i);
  return {reinterpret_cast<const uint32_t*>(static_cast<uintptr_t>(at)), lo, hi};
}

// A Key tile's list entries: logit_{h,r} += scaled_{h,c} * (sigma_c * correction(z, t_g)) for
// each entry (token r, channel c), acc the tile's logits (C: rows tokens, columns heads; the
// lane's are heads 2 (lane % 4) - head_shift + {0, 1}, head_shift 4 for a pair's second tile).
// depth: the row's group depths; scaled: the row's [D][G] f32 scale q~; key_std: its [D] sigma.
// Byte keys correct against the grid's extreme value instead of the tree's outermost centroid.
template <int G, bool kByteKeys>
__device__ __forceinline__ void AddKeyOutliers(const TileEntries& list, int lane, int head_shift,
                                               const uint8_t* depth, const float* scaled,
                                               const float* key_std,
                                               const tile::TileCentroids& centroids,
                                               float (&acc)[4]) {
  const int h0 = 2 * (lane % 4) - head_shift, h1 = h0 + 1;
  for (int k = list.lo; k < list.hi; ++k) {
    const uint32_t e = list.entries[k];
    const int slot = tile::OutlierRowSlot(lane, tile::OutlierToken(e));
    if (slot < 0) continue;
    const int c = tile::OutlierChannel(e);
    const float outer = kByteKeys ? tile::kKeyByteOuter : centroids.outermost[depth[c / 16]];
    const float delta = __fmul_rn(key_std[c], tile::OutlierCorrectionOf(OutlierZ(e), outer));
    const float x0 = h0 < G ? __fmul_rn(scaled[c * G + h0], delta) : 0.0f;
    const float x1 = h1 < G ? __fmul_rn(scaled[c * G + h1], delta) : 0.0f;
    AddToFragmentRow(acc, slot, x0, x1);
  }
}

// A Value tile's list entries, the tile read at depth t and staged at `staged` (its e values
// [G][16] f16, then its maxima M [G]): acc_{h,c} += p_{h,r} * correction(z, t) for each entry
// (token r, channel c), p = e exp(M - max) in f16 exactly as the MMA's B operand took it; acc:
// the warp's accumulators (C: rows channels 16 g + lane / 4 (+ 8), columns heads).
template <int D, int G>
__device__ __forceinline__ void AddValueOutliers(const TileEntries& list, int lane, int t,
                                                 const uint8_t* staged, const float* head_max,
                                                 const tile::TileCentroids& centroids,
                                                 float (&acc)[D / 16][4]) {
  const auto* e_values = reinterpret_cast<const __half*>(staged);
  const auto* tile_max = reinterpret_cast<const float*>(staged + G * 32);
  const int h0 = 2 * (lane % 4), h1 = h0 + 1;
  const auto p = [&](int h, int r) {  // the B operand's f16 e exp(M - max) of head h, token r
    return __half2float(
        __float2half_rn(__half2float(e_values[h * 16 + r]) * __expf(tile_max[h] - head_max[h])));
  };
  const float outer = centroids.outermost[t];
  for (int k = list.lo; k < list.hi; ++k) {
    const uint32_t e = list.entries[k];
    const int c = tile::OutlierChannel(e);
    const int slot = tile::OutlierRowSlot(lane, c % 16);
    if (slot < 0) continue;
    const int r = tile::OutlierToken(e);
    const float delta = tile::OutlierCorrectionOf(OutlierZ(e), outer);
    const float x0 = h0 < G ? __fmul_rn(p(h0, r), delta) : 0.0f;
    const float x1 = h1 < G ? __fmul_rn(p(h1, r), delta) : 0.0f;
#pragma unroll
    for (int g = 0; g < D / 16; ++g) AddToFragmentRow(acc[g], slot, x0, x1, g == c / 16);
  }
}

// Adds to debug.outlier_entries the entries that pages [page_lo, page_hi) of (b, h) hold, of
// each kind the call has (each page block's tile_start[16]): what a server's ledgers count as
// the lists' reads. Every thread of the block calls it (uniform); one atomic add per block.
__device__ __forceinline__ void CountListEntries(const TileArgs& a, int b, int h, int page_lo,
                                                 int page_hi, long long* scratch) {
  const uint32_t* key_lists = a.in.key_outlier_pages;
  const uint32_t* value_lists = a.in.value_outlier_pages;
  if (a.debug.outlier_entries == nullptr || (key_lists == nullptr && value_lists == nullptr)) {
    return;
  }
  long long entries = 0;
  for (int j = page_lo + static_cast<int>(threadIdx.x); j < page_hi;
       j += static_cast<int>(blockDim.x)) {
    const int64_t page = a.in.page_table[static_cast<int64_t>(b) * a.max_pages + j];
    const int64_t at = tile::PageOutlierBlockAt(page, a.heads_kv, h);
    if (key_lists != nullptr) entries += tile::PageTileStart(key_lists + at, 16);
    if (value_lists != nullptr) entries += tile::PageTileStart(value_lists + at, 16);
  }
  entries = internal::BlockSumLL(entries, scratch);
  if (threadIdx.x == 0 && entries > 0) {
    atomicAdd(a.debug.outlier_entries, static_cast<unsigned long long>(entries));
  }
}

}  // namespace readkv::cuda::tile_kernels
