// The GPU tile reader with a Value window (tile_attention.h, launch 6): TileWindowValues, which
// does TileSelect's, TileValues' and TileCombine's work for its own chunk and, in the block of a
// row that finishes last, for the row; and FinishRow, the row's finish it shares with
// TileCombine. Internal.
//
// Why: at the served geometry (16K x 16, 8/2/64, an H100) TileSelect and TileCombine, one block
// per row each, took 47 of 158 us, and TileSelect's pass over a row's 1024 blocks is serial in
// the row (docs/performance-notes.md). With a window the cut is per chunk: each Values block
// makes it for its own blocks, in parallel, in the launch that reads them.
//
// Depths are codec::ChooseValueBlockDepths' with the plan's window for the weights this launch
// computed: the same formula as TileSelect's (per tile M, sum e^2; per head the row's maximum and
// sum), the row's statistics formed from TileLogits' per-chunk ones. Every block of a row forms
// them by the same code from the same data, so every block holds the same bits.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv_device.cuh"
#include "tile_kernels.cuh"
#include "tile_read_sums.h"
#include "tile_values.cuh"

namespace readkv::cuda::tile_kernels {

// The row's output for heads [q_lo, q_hi) from the chunks' partials (`chunks` of them):
// per head mu mass + sigma acc / sum plus the residual window's p v (exact BF16), then the
// inverse V transform (FWHT, scale, signs), as the CPU reader's finish. part(k, i) is element i
// (head i / D, channel i % D) of chunk k's partial [G][D]: through L2 (TileWindowValues: another
// block of the same launch may have written it) or another block's shared memory
// (TileWindowPass). head_max, head_inv (1 / sum) and head_mass (the encoded tokens' share) are
// [G]; x is kMaxGroup rows of 128 floats of shared memory. Every thread of the block calls it,
// and the block has kThreads of them.
//
// The heads' sums go kHeadsAtOnce heads a pass: thread i owns elements i, i + kThreads, ... of
// the pass, and issues every load of a batch of chunks for all of them before it adds the
// first, so the block waits about one round trip a batch. The sums keep the chunks' order (the
// same bits).
// Why: with a thread per channel summing a chain over the chunks, head by head, the loads went
// out a few at a time, and the block that ends a row took 3.8-4.5 us in its finish against
// 0.7-0.8 for the others (H100, a98a401: the bench's `last to end` line), on the call's path.
template <int D, int G, int kThreads, int kHeadsAtOnce, typename Partial>
__device__ __forceinline__ void FinishTileRow(const TileArgs& a, int b, int h, int chunks,
                                              int q_lo, int q_hi, const Partial& part,
                                              const float* head_max, const float* head_inv,
                                              const float* head_mass, float (*x)[128]) {
  constexpr int kSpan = kHeadsAtOnce * D;                         // elements a pass sums
  constexpr int kEach = (kSpan + kThreads - 1) / kThreads;        // of them a thread's
  constexpr int kBatch = kEach * 4 >= 16 ? 4 : 16 / kEach;        // chunks a batch: <= 16 loads
  static_assert(kHeadsAtOnce >= 1 && kHeadsAtOnce <= G, "a pass takes 1 to G heads");
  const int tid = threadIdx.x, lo = q_lo * D, hi = q_hi * D;
  const size_t row = RowOf(a, b, h);
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  for (int from = lo; from < hi; from += kSpan) {
    const int to = min(hi, from + kSpan);
    const auto owns = [=](int e) { return from + tid + e * kThreads < to; };
    float acc[kEach];
#pragma unroll
    for (int e = 0; e < kEach; ++e) acc[e] = 0.0f;
    for (int k0 = 0; k0 < chunks; k0 += kBatch) {
      float p[kEach][kBatch];
#pragma unroll
      for (int e = 0; e < kEach; ++e) {
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const bool in = owns(e) && k0 + j < chunks;
          p[e][j] = in ? part(k0 + j, from + tid + e * kThreads) : 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < kEach; ++e) {
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (k0 + j < chunks) acc[e] += p[e][j];
        }
      }
    }
#pragma unroll
    for (int e = 0; e < kEach; ++e) {
      const int idx = from + tid + e * kThreads;
      if (owns(e)) x[idx / D][idx % D] = acc[e];
    }
  }
  // The passes give a thread other elements than the loop below when a pass is narrower than
  // the block (one head of 64 channels, 128 threads), so the sums are made visible first.
  __syncthreads();
  const int residual = a.in.residual_lens[b];
  const uint16_t* values = a.in.residual_values + row * a.max_residual * D;
  for (int idx = lo + tid; idx < hi; idx += kThreads) {
    const int q = idx / D, c = idx % D;
    const size_t channel = static_cast<size_t>(h) * D + c;
    const float mu = a.codec.value_mean[channel], sd = a.codec.value_std[channel];
    float out = mu * head_mass[q] + sd * (x[q][c] * head_inv[q]);
    const float* l = a.logits + (first_q + q) * a.max_residual;
    for (int r = 0; r < residual; ++r) {
      const float p = expf(l[r] - head_max[q]) * head_inv[q];
      out += p * __uint_as_float(uint32_t{values[static_cast<size_t>(r) * D + c]} << 16);
    }
    x[q][c] = out;
  }
  internal::BlockFwhtRows(x + q_lo, q_hi - q_lo, D, a.transform_scale);  // synchronises first
  for (int idx = lo + tid; idx < hi; idx += kThreads) {
    const int q = idx / D, c = idx % D;
    const float sign = a.codec.value_signs[static_cast<size_t>(h) * D + c];
    const float v = x[q][c];
    a.in.out[(first_q + q) * D + c] = sign < 0.0f ? -v : v;
  }
}

// FinishTileRow's partials from the workspace, read through L2 (other blocks wrote them).
template <int D>
struct WorkspacePartials {
  const float* row;  // chunk 0's [kMaxGroup][D]
  __device__ __forceinline__ WorkspacePartials(const TileArgs& a, int b, int h)
      : row(a.partials + RowOf(a, b, h) * a.chunks * kMaxGroup * D) {}
  __device__ __forceinline__ float operator()(int k, int i) const {
    return __ldcg(row + static_cast<size_t>(k) * kMaxGroup * D + i);
  }
};

// What a window's Values block reads of the Logits' work: chunk k's statistics (M [G], then
// sum e [G]) at chunk_stats(k), and its own tiles' e values and maxima M, either in the
// workspace (heads null: TileLogits wrote them) or on chip (heads: tile first + i's at
// heads + i * ValueHeadBytes(G), TileWindowPass's epilogue wrote them there).
// `lanes` is LookUpValueLanes over the window's tiles (the block's warp shares).
// `encoded` and `residual` are the row's lengths (in.encoded_lens[b], in.residual_lens[b]),
// read by the caller, before TileWindowPass's cluster barrier, so they are not read after it.
// `partial` is where the block's sums go ([kMaxGroup][D] floats): its workspace slot, or for
// TileWindowPass its staging ring (kPassPartialAt).
template <typename ChunkStats>
struct WindowSources {
  ChunkStats chunk_stats;  // k -> const float*
  const uint8_t* heads;
  ValueLaneLookups lanes;
  int encoded, residual;
  float* partial;
};

// LookUpValueLanes over window `chunk` of row (b, h) (none past the sequence's end).
template <int D>
__device__ __forceinline__ ValueLaneLookups WindowLanes(const TileArgs& a, int chunk, int h,
                                                        int b) {
  const int tiles = (a.in.encoded_lens[b] + 15) / 16;
  const int first = chunk * (a.chunk_tokens / 16);
  return LookUpValueLanes<D>(a, b, h, first, max(first, min(tiles, first + a.chunk_tokens / 16)));
}

// The Value cut's shared scratch (steps 1-2 below): the window's block weights, the policy's
// increments, BlockSumLL's and BlockSelect's space. Kept in the staging ring, which is idle then,
// so a one-pass block fits five to an SM (tile_window_pass.cuh).
template <int kTiles>
struct WindowCutShared {
  double weights[kTiles];
  double inc[kMaxSteps];
  long long lscratch[32];
  internal::SelectShared selection;
};

// TileWindowValues' work for block (chunk, h, b), chunk_tokens = the window:
//   1. the row's softmax statistics, a warp per head: the maximum of the chunks' maxima and the
//      residual window's logits, the sum of the chunks' sums rescaled to it plus the window's;
//   2. the window's Value block weights (thread j: block j) and depths: FloorBudget(R_V, its
//      blocks) block-planes, the cut by BlockSelect as TileSelect's over the row;
//   3. ValueSumsOfChunk with those depths;
//   4. finish(active, head_max, head_inv, head_mass): the row's output from the partials, by
//      the caller's schedule (FinishByLastBlock, or TileWindowPass's through the cluster).
// Blocks past a sequence's end do 1 and 4 only (they must take part in 4: the last one may be
// one). after_stats() runs once step 1 has read every chunk's statistics (TileWindowPass: its
// blocks may then leave). `table` and `ring_bytes` as LogitsOfChunk's; every thread calls it.
template <int D, int G, bool kOnChip, typename ChunkStats, typename AfterStats, typename Finish>
__device__ __forceinline__ void WindowValuesOfChunk(const TileArgs& a,
                                                    const tile::TileCentroids& centroids,
                                                    uint16_t* table, uint8_t* ring_bytes,
                                                    int chunk, int h, int b,
                                                    const WindowSources<ChunkStats>& from,
                                                    const AfterStats& after_stats,
                                                    const Finish& finish) {
  constexpr int kWindowTiles = kTileMaxChunk / 16;
  constexpr int kHeadBytes = tile::ValueHeadBytes(G);
  static_assert(kWindowTiles <= kMmaThreads, "a thread per block of the window");
  __shared__ float head_max[kMaxGroup], head_invf[kMaxGroup], head_mass[kMaxGroup];
  __shared__ double head_inv[kMaxGroup];
  __shared__ uint8_t depths[kWindowTiles];
  // The cut's scratch lives in the ring, idle from the Logits' last stage (or the block's start)
  // to the Value stream's first issue, after the barrier that ends step 2.
  using CutShared = WindowCutShared<kWindowTiles>;
  static_assert(sizeof(CutShared) <= kMmaWarps * kStages * kStageBytes,
                "the cut's scratch fits the ring");
  CutShared& cut_shared = *reinterpret_cast<CutShared*>(ring_bytes);
  double* const weights = cut_shared.weights;
  double* const inc = cut_shared.inc;
  long long* const lscratch = cut_shared.lscratch;
  internal::SelectShared& selection = cut_shared.selection;
  static_assert(sizeof(float) * kMaxGroup * 128 <= kMmaWarps * kStages * kStageBytes,
                "FinishTileRow's rows reuse the ring");
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const size_t row = RowOf(a, b, h);
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const int encoded = from.encoded, residual = from.residual;
  const int tiles = (encoded + 15) / 16;
  const int active = (encoded + a.chunk_tokens - 1) / a.chunk_tokens;  // chunks with tokens
  const int first = chunk * (a.chunk_tokens / 16);
  const int n = max(0, min(tiles, first + a.chunk_tokens / 16) - first);  // the window's blocks
  if (tid < kMaxSteps) inc[tid] = tid < a.policy.value_steps ? a.policy.value_increments[tid] : 0.0;
  if (n > 0 && !kOnChip) LoadTable(centroids, table);  // TileWindowPass loaded it

  // 1. The row's statistics (the same bits in every block of the row).
  for (int q = warp; q < G; q += kMmaWarps) {
    const float* window = a.logits + (first_q + q) * a.max_residual;
    // Lane k's chunk's M and sum e are read together, once (the chunks' statistics may be
    // another block's shared memory); lanes past the first 32 chunks read theirs again below.
    float m = -INFINITY, first_max = -INFINITY, first_sum = 0.0f;
    for (int k = lane; k < active; k += kWarp) {
      const float* st = from.chunk_stats(k);
      const float mk = st[q];
      if (k == lane) {
        first_max = mk;
        first_sum = st[G + q];
      }
      m = fmaxf(m, mk);
    }
    for (int i = lane; i < residual; i += kWarp) m = fmaxf(m, window[i]);
    for (int o = kWarp / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    double enc = 0.0, in_window = 0.0;
    for (int k = lane; k < active; k += kWarp) {
      const float* st = k == lane ? nullptr : from.chunk_stats(k);
      const float mk = st == nullptr ? first_max : st[q];
      const float sk = st == nullptr ? first_sum : st[G + q];
      enc += static_cast<double>(sk) * expf(mk - m);
    }
    for (int i = lane; i < residual; i += kWarp) in_window += expf(window[i] - m);
    for (int o = kWarp / 2; o > 0; o /= 2) {
      enc += __shfl_xor_sync(0xffffffffu, enc, o);
      in_window += __shfl_xor_sync(0xffffffffu, in_window, o);
    }
    if (lane == 0) {
      const double all = enc + in_window;
      head_max[q] = m;
      head_inv[q] = 1.0 / all;
      head_invf[q] = static_cast<float>(1.0 / all);
      head_mass[q] = static_cast<float>(enc / all);
    }
    if (chunk == 0 && a.debug.logits != nullptr) {  // the window's (TileLogits wrote the rest)
      float* out = a.debug.logits + (first_q + q) * a.logit_stride + encoded;
      for (int i = lane; i < residual; i += kWarp) out[i] = window[i];
    }
  }
  after_stats();
  __syncthreads();
  if constexpr (kOnChip) StampPhase(a, kStampStatistics);

  // 2. The window's weights and depths.
  const int spo = a.policy.value_steps;
  int positive_steps = 0;
  if (tid < n) {
    const size_t tile = static_cast<size_t>(first + tid);
    const float* tile_max;  // the tile's M [G] and e values [G][16]: on chip or in the workspace
    const __half* tile_probs;
    if constexpr (kOnChip) {
      const uint8_t* head = from.heads + tid * kHeadBytes;
      tile_max = reinterpret_cast<const float*>(head + G * 32);
      tile_probs = reinterpret_cast<const __half*>(head);
    } else {
      tile_max = a.tile_stats + (row * a.max_tiles + tile) * 3 * G;
      tile_probs = a.probs + (row * a.max_tiles + tile) * G * 16;
    }
    const double w = ValueBlockWeightOfProbs<G>(tile_max, tile_probs, head_max, head_inv);
    weights[tid] = w;
    if (a.debug.block_weights != nullptr) a.debug.block_weights[row * a.max_tiles + first + tid] = w;
    positive_steps = internal::CountAbove(w, 0.0, inc, spo, 0);
  }
  const long long positive = internal::BlockSumLL(positive_steps, lscratch);
  const ValueCut cut = CutValueBlocks(weights, n, positive, a.policy.value_bits, inc, spo, selection);
  tile::ReadSums reads;  // this thread's block's share of debug.totals
  if (tid < n) {
    const uint8_t depth = ValueBlockDepth(cut, weights[tid], tid, inc, spo);
    depths[tid] = depth;
    if (a.debug.value_depths != nullptr) a.debug.value_depths[row * a.max_tiles + first + tid] = depth;
    reads = tile::ValueTileReads(encoded, first + tid, depth, D);
  }
  if (a.debug.totals != nullptr) {  // uniform over the block
    const long long bits = internal::BlockSumLL(reads.bits, lscratch);
    const long long bytes = internal::BlockSumLL(reads.bytes, lscratch);
    if (tid == 0 && n > 0) {
      atomicAdd(a.debug.totals, static_cast<unsigned long long>(bits));
      atomicAdd(a.debug.totals + 1, static_cast<unsigned long long>(bytes));
    }
  }
  // The window's pages' lists (a window is whole pages: 512 tokens are two).
  CountListEntries(a, b, h, first / 16, (first + n + 15) / 16, lscratch);
  __syncthreads();  // depths[] and the table are complete
  if constexpr (kOnChip) StampPhase(a, kStampCut);

  // 3. The chunk's sums.
  if (n > 0) {
    ValueSumsOfChunk<D, G, kOnChip>(a, centroids, table, head_max, depths, b, h, first, first + n,
                                    from.lanes, ring_bytes, from.heads, from.partial);
  }
  if constexpr (kOnChip) StampPhase(a, kStampValues);

  // 4. The row's finish.
  finish(active, head_max, head_invf, head_mass);
}

// TileWindowValues' finish: the last block of the row to arrive (arrivals) sums the partials
// from the workspace, where every block wrote its own. `ring_bytes` holds the rows x.
template <int D, int G>
struct FinishByLastBlock {
  const TileArgs& a;
  int b, h;
  uint8_t* ring_bytes;
  __device__ __forceinline__ void operator()(int active, const float* head_max,
                                             const float* head_inv, const float* head_mass) const {
    const size_t row = RowOf(a, b, h);
    if (!internal::ArriveLast(a.arrivals + row, a.chunks)) return;
    FinishTileRow<D, G, kMmaThreads, G>(a, b, h, active, 0, G, WorkspacePartials<D>(a, b, h),
                                        head_max, head_inv, head_mass,
                                        reinterpret_cast<float(*)[128]>(ring_bytes));
  }
};

// Launch 6: WindowValuesOfChunk over the workspace TileLogits wrote. Grid (chunks, H_kv, B) x 128.
template <int D, int G>
__global__ void __launch_bounds__(kMmaThreads)
    TileWindowValues(TileArgs a, const __grid_constant__ tile::TileCentroids centroids) {
  __shared__ MmaBlockShared shared;
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const float* chunk_stats = a.chunk_stats + RowOf(a, b, h) * a.chunks * 2 * G;
  const auto stats_of = [chunk_stats](int k) { return chunk_stats + k * 2 * G; };
  float* const partial = a.partials + (RowOf(a, b, h) * a.chunks + chunk) * kMaxGroup * D;
  const WindowSources<decltype(stats_of)> from{stats_of, nullptr, WindowLanes<D>(a, chunk, h, b),
                                               a.in.encoded_lens[b], a.in.residual_lens[b],
                                               partial};
  WindowValuesOfChunk<D, G, false>(a, centroids, shared.table, &shared.ring[0][0][0], chunk, h, b,
                                   from, [] {},
                                   FinishByLastBlock<D, G>{a, b, h, &shared.ring[0][0][0]});
}

}  // namespace readkv::cuda::tile_kernels
