// The GPU tile reader's kernels (tile_attention.h says what each launch does): the pieces they
// share and TileLogits; TileValues is in tile_values.cuh, TileWindowValues in tile_window.cuh.
// Included only through tile_attention.cu, which launches them. Internal.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/tile_attention.h"
#include "readkv_device.cuh"
#include "tile_fragment.h"
#include "tile_outliers.h"
#include "tile_pages.h"
#include "tile_plan.h"
#include "tile_staging.h"

namespace readkv::cuda::tile_kernels {

using internal::kWarp;
inline constexpr int kMaxGroup = 8;  // query heads per KV head: the MMA's N
inline constexpr int kStepBits = 3;  // an object's steps <= 7 (W <= 8, step 1)
inline constexpr int kMaxSteps = (1 << kStepBits) - 1;
inline constexpr int kMmaWarps = internal::kTileBlockWarps;  // warps of a Logits or Values block
inline constexpr int kMmaThreads = kMmaWarps * 32;
inline constexpr int kWarpTiles = internal::kTileStageTiles;  // token tiles of a stage, at most
inline constexpr int kSelectThreads = 256;

// Everything a launch reads: the call's inputs and the workspace sections (tile_plan.h).
struct TileArgs {
  int heads_q, heads_kv, store_bits, max_tiles, chunk_tokens, chunks, max_residual;
  int max_pages;  // columns of in.page_table
  long long logit_stride;
  float attention_scale;  // 1 / sqrtf(d), as the CPU reader's
  float transform_scale;  // (float)(1 / sqrt((double)d)), as HadamardTransform's
  TileDecodeInputs in;
  ReadKvCodec codec;
  ReadKvReadPolicy policy;
  TileDecodeDebug debug;
  uint32_t* fragments;
  uint8_t* key_depths;
  float* logits;  // [B][H_q][max_residual]: the residual window's exact logits
  float* stats;
  double* block_weights;
  uint8_t* value_depths;
  float* partials;
  float* tile_stats;  // [B][H_kv][max_tiles][3][G]: per tile and head M, sum e, sum e^2
  __half* probs;      // [B][H_kv][max_tiles][G][16]: e = exp(l - M) per tile, head and token
  float* scaled_queries;  // [B][H_kv][D][G]: scale q~ (f32), written only with Key lists
  float* chunk_stats;     // [B][H_kv][chunks][2][G]: per chunk and head M, sum e, written by
                          // TileLogits with a Value window only (null without)
  unsigned* arrivals;     // [B][H_kv]: TileWindowValues' blocks done (TilePrepare zeroes them)
};

__device__ __forceinline__ size_t RowOf(const TileArgs& a, int b, int h) {
  return static_cast<size_t>(b) * a.heads_kv + h;
}

// Token tile `tile` of (b, h) in a tile pool, through the page table (tile_pages.h).
__device__ __forceinline__ const uint8_t* TileAt(const TileArgs& a, const uint8_t* pool,
                                                 int64_t tile_bytes, int b, int h, int tile) {
  return pool + tile::TileOffset(a.in.page_table, a.max_pages, a.heads_kv, tile_bytes, b, h, tile);
}

// 16 bytes global -> shared without registers (cp.async.cg: L2 only, the planes are read once).
__device__ __forceinline__ void CpAsync16(void* shared, const void* global) {
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(global) : "memory");
}
// 4 bytes (cp.async.ca: the only sizes below 16 go through L1).
__device__ __forceinline__ void CpAsync4(void* shared, const void* global) {
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(to), "l"(global) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Each warp of a Logits or Values block streams its own token tiles through a private ring of
// two stages in shared memory: while it decodes one stage the next is in flight (cp.async), so
// every SM keeps tens of KB of plane reads outstanding (one byte load per lane kept only ~8 KB
// in flight and the kernels ran at ~15% of DRAM bandwidth, ncu 2026-12-05).
inline constexpr int kStageBytes = internal::kTileStageBytes;
inline constexpr int kStages = 2;

// D += A B on tensor cores, m16n8k16, f16 inputs, f32 accumulate.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The f16 centroid table in shared memory (depths >= 3), read by entry.
struct SharedTable {
  const uint16_t* table;
  KVGATE_TILE_HD uint32_t operator()(uint32_t entry) const { return table[entry]; }
};

__device__ __forceinline__ void LoadTable(const tile::TileCentroids& c, uint16_t* table) {
  for (int j = threadIdx.x; j < tile::kTileTableEntries; j += blockDim.x) table[j] = c.table[j];
}

template <int T>
using Depth = std::integral_constant<int, T>;

// Calls body(Depth<t>{}) once for the runtime depth t in [1, 8]: the one dispatch per run of
// equal depths (a group of q.K, a token tile of p.V), never per element.
template <typename Body>
__device__ __forceinline__ void WithDepth(int t, const Body& body) {
  switch (t) {
    case 1:
      body(Depth<1>{});
      break;
    case 2:
      body(Depth<2>{});
      break;
    case 3:
      body(Depth<3>{});
      break;
    case 4:
      body(Depth<4>{});
      break;
    case 5:
      body(Depth<5>{});
      break;
    case 6:
      body(Depth<6>{});
      break;
    case 7:
      body(Depth<7>{});
      break;
    case 8:
      body(Depth<8>{});
      break;
    default:
      break;  // depth 0 reads nothing (not chosen with t_min 1)
  }
}

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
  const auto at = reinterpret_cast<uintptr_t>(mine.entries);
  const auto low = static_cast<uint32_t>(at), high = static_cast<uint32_t>(uint64_t{at} >> 32);
  const uint64_t got = (uint64_t{__shfl_sync(0xffffffffu, high, i)} << 32) |
                       __shfl_sync(0xffffffffu, low, i);
  return {reinterpret_cast<const uint32_t*>(static_cast<uintptr_t>(got)), lo, hi};
}

// A Key tile's list entries: logit_{h,r} += scaled_{h,c} * (sigma_c * correction(z, t_g)) for
// each entry (token r, channel c), acc the tile's logits (C: rows tokens, columns heads).
// depth: the row's group depths; scaled: the row's [D][G] f32 scale q~; key_std: its [D] sigma.
// Byte keys correct against the grid's extreme value instead of the tree's outermost centroid.
template <int G, bool kByteKeys>
__device__ __forceinline__ void AddKeyOutliers(const TileEntries& list, int lane,
                                               const uint8_t* depth, const float* scaled,
                                               const float* key_std,
                                               const tile::TileCentroids& centroids,
                                               float (&acc)[4]) {
  const int h0 = 2 * (lane % 4), h1 = h0 + 1;
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
        __hmul(e_values[h * 16 + r], __float2half_rn(__expf(tile_max[h] - head_max[h]))));
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

// ---- The Value cut, shared by TileSelect (over a row) and TileWindowValues (over a window) ----

// A token tile's Value block weight, sum_h sum_i p_hi^2, from its statistics st (TileLogits': M
// [G], sum e [G], sum e^2 [G]) and the row's per-head maximum and 1 / sum:
// sum_h (sum e^2) exp(2 (M - max_h)) / S_h^2, in double.
template <int G>
__device__ __forceinline__ double ValueBlockWeight(const float* st, const float* head_max,
                                                   const double* head_inv) {
  double w = 0.0;
#pragma unroll
  for (int q = 0; q < G; ++q) {
    const double scale = expf(2.0f * (st[q] - head_max[q])) * head_inv[q] * head_inv[q];
    w += static_cast<double>(st[2 * G + q]) * scale;
  }
  return w;
}

// What the threshold allocator does with objects weights[0, n) (the blocks of a row or of a
// window, each with `spo` steps of increments inc): the steps the budget floor(R_V n) buys above
// t_min (clamped), and when fewer than `positive` (the objects' leading positive steps, summed
// over the block) the cut, the steps-th largest gain in greedy's order, found by BlockSelect.
// Every thread of the block calls it (uniform); thread t owns objects t, t + blockDim.x, ...
struct ValueCut {
  internal::GreedyCut cut{0.0, 0u};
  long long steps = 0;
  bool cutting = false;
};
__device__ __forceinline__ ValueCut CutValueBlocks(const double* weights, int n, long long positive,
                                                   double value_bits, const double* inc, int spo,
                                                   internal::SelectShared& selection) {
  ValueCut c;
  c.steps = internal::FloorBudget(value_bits, static_cast<double>(n)) - n;
  if (c.steps > static_cast<long long>(n) * spo) c.steps = static_cast<long long>(n) * spo;
  c.cutting = c.steps > 0 && positive > c.steps;
  if (c.cutting) {
    c.cut = internal::BlockSelect(
        [&](auto&& f) {
          for (int j = static_cast<int>(threadIdx.x); j < n; j += static_cast<int>(blockDim.x)) {
            const double w = weights[j];
            const auto first_key = static_cast<unsigned>(j) << kStepBits;
            internal::ForPositiveSteps<kMaxSteps>(w, inc, spo, [&](int s, double gain) {
              f(internal::GainBits(gain), ~(first_key + s));
            });
          }
        },
        64, 0ull, 0ull, c.steps, positive, selection);
  }
  return c;
}

// The depth of object j (weight w) under that cut: 1 + the steps taken.
__device__ __forceinline__ uint8_t ValueBlockDepth(const ValueCut& c, double w, int j,
                                                   const double* inc, int spo) {
  int k = 0;
  if (c.cutting) {
    k = internal::StepsTaken<kMaxSteps>(w, inc, spo, static_cast<unsigned>(j) << kStepBits, c.cut);
  } else if (c.steps > 0) {
    k = internal::CountAbove(w, 0.0, inc, spo, 0);
  }
  return static_cast<uint8_t>(1 + k);
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

// ---- 2. TileLogits -----------------------------------------------------------------------------
//
// Grid (chunks, H_kv, B) x 128. Each warp takes a contiguous quarter of the chunk's token tiles
// and streams them through its two-stage ring (a stage: up to 8 tiles' chosen planes, compact:
// the group runs of a tile back to back, <= kStageBytes). Per stage it walks the Key groups: one
// depth dispatch per group, then per staged tile the t plane bytes from shared memory, the
// decode of tile_fragment.h and one MMA against the group's folded queries (B: 16 channels x 8
// heads, precomputed in lane order by TilePrepare). Per finished tile and head it writes
// e = exp(l - M) in f16 for its 16 tokens (M the tile's max; TileValues scales them by
// exp(M - max) into its B operand) and the tile's softmax statistics (M, sum e, sum e^2), from
// which TileSelect forms the heads' statistics and the Value block weights. The f32 logits are
// written only for TileDecodeDebug::logits: the round trip through memory is 2 bytes a token
// and head instead of 4.
// Byte keys (kByteKeys; every group at depth 8, so a staged tile is its 256 code bytes a group):
// per group and tile one 8-byte shared load of the lane's codes, DecodeByteKeys (a permute and
// an f16x2 fma a pair) and the MMA, every accumulator starting at the half cell's share of the
// logit (ByteKeyBias).
template <int G>
__device__ __forceinline__ void ByteKeyBias(const uint2* frags, int groups, int lane,
                                            float (&bias)[2]) {
  // Lane l's B fragment holds head l / 4 at 4 channels of each group: the sum of the folded
  // f16 queries over its channels, then over the 4 lanes of that head.
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) {
    const uint2 q = frags[g * kWarp + lane];
    const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&q.x));
    const float2 y = __half22float2(*reinterpret_cast<const __half2*>(&q.y));
    sum += (x.x + x.y) + (y.x + y.y);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  // The C fragment's columns: heads 2 (lane % 4) + {0, 1}, whose sums lanes 4 n hold.
  bias[0] = tile::kKeyByteHalfCell * __shfl_sync(0xffffffffu, sum, 8 * (lane % 4));
  bias[1] = tile::kKeyByteHalfCell * __shfl_sync(0xffffffffu, sum, 8 * (lane % 4) + 4);
}

template <int D, int G, bool kByteKeys>
__global__ void __launch_bounds__(kMmaThreads)
    TileLogits(TileArgs a, const __grid_constant__ tile::TileCentroids centroids) {
  constexpr int kGroups = D / 16;
  constexpr int kMaxPieces = 2 * kGroups * tile::kMaxTileDepth;  // 16-byte pieces of a tile
  __shared__ uint16_t table[tile::kTileTableEntries];
  __shared__ uint8_t depth[kGroups];
  __shared__ uint8_t plane_at[kGroups];   // first plane of group g in a staged tile
  __shared__ uint16_t piece[kMaxPieces];  // staged piece o: its 16-byte index in the token tile
  __shared__ int staged_planes;           // planes of one staged tile (sum of the depths)
  __shared__ __align__(16) uint8_t ring[kMmaWarps][kStages][kStageBytes];
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const size_t row = RowOf(a, b, h);
  if constexpr (!kByteKeys) LoadTable(centroids, table);
  if (threadIdx.x < kGroups) depth[threadIdx.x] = a.key_depths[row * kGroups + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) staged_planes = tile::PlanKeyStaging(depth, kGroups, a.store_bits, plane_at, piece);
  __syncthreads();
  const int encoded = a.in.encoded_lens[b];
  const int tiles = (encoded + 15) / 16;
  const int first = chunk * (a.chunk_tokens / 16);
  const tile::WarpShare mine = tile::ShareOfWarp(first, min(tiles, first + a.chunk_tokens / 16), warp);
  const int planes = staged_planes;
  const int pieces = 2 * planes;
  const int per_stage = tile::KeyTilesPerStage(planes);
  const int stages = (mine.count() + per_stage - 1) / per_stage;
  const TileEntries my_list =
      LaneEntries(a, a.in.key_outlier_pages, b, h, mine.lo, mine.count(), lane);
  const int64_t tile_bytes = tile::TokenTileBytes(D, a.store_bits);
  const auto issue = [&](int k) {  // stage k of this warp into its ring slot
    const int lo = mine.lo + k * per_stage, n = min(per_stage, mine.hi - lo);
    uint8_t* to = ring[warp][k % kStages];
    for (int i = 0; i < n; ++i) {
      const uint8_t* from = TileAt(a, a.in.key_tiles, tile_bytes, b, h, lo + i);
      for (int o = lane; o < pieces; o += kWarp)
        CpAsync16(to + (i * pieces + o) * 16, from + piece[o] * 16);
    }
    CpAsyncCommit();
  };
  const SharedTable lookup{table};
  const uint2* frags = reinterpret_cast<const uint2*>(a.fragments) + row * kGroups * kWarp;
  float* tile_stats = a.tile_stats + row * a.max_tiles * 3 * G;
  __half* probs = a.probs + row * a.max_tiles * G * 16;
  float* debug_logits = a.debug.logits;
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  // With a Value window, this lane's heads' running maximum and sum of e over the warp's tiles
  // (the heads 2 (lane % 4) + {0, 1}; every lane of a lane % 4 class holds the same values).
  const bool per_chunk = a.chunk_stats != nullptr;  // uniform: a launch argument
  float run_max[2] = {-INFINITY, -INFINITY}, run_sum[2] = {0.0f, 0.0f};
  float bias[2] = {0.0f, 0.0f};  // every logit's start: the half cell's share with byte keys
  if constexpr (kByteKeys) ByteKeyBias<G>(frags, kGroups, lane, bias);
  if (stages > 0) issue(0);
  for (int k = 0; k < stages; ++k) {
    if (k + 1 < stages) {
      issue(k + 1);
    } else {
      CpAsyncCommit();  // an empty group keeps the wait's count
    }
    CpAsyncWait<1>();
    __syncwarp();
    const int base = mine.lo + k * per_stage, n = min(per_stage, mine.hi - base);
    const uint8_t* staged = ring[warp][k % kStages];
    float acc[kWarpTiles][4];
#pragma unroll
    for (int i = 0; i < kWarpTiles; ++i) {
      acc[i][0] = bias[0];
      acc[i][1] = bias[1];
      acc[i][2] = bias[0];
      acc[i][3] = bias[1];
    }
    if constexpr (kByteKeys) {
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const uint2 q = frags[g * kWarp + lane];
        const uint8_t* group_bytes = staged + plane_at[g] * 32 + lane * 8;
#pragma unroll
        for (int i = 0; i < kWarpTiles; ++i) {
          if (i < n) {  // uniform over the warp
            const uint2 codes = *reinterpret_cast<const uint2*>(group_bytes + i * planes * 32);
            uint32_t frag[4];
            tile::DecodeByteKeys(codes.x, codes.y, frag);
            Mma(acc[i], frag, q.x, q.y);
          }
        }
      }
    }
    for (int g = 0; g < kGroups && !kByteKeys; ++g) {
      const uint2 q = frags[g * kWarp + lane];
      const uint8_t* group_bytes = staged + plane_at[g] * 32 + lane;
      WithDepth(depth[g], [&](auto depth_tag) {
        constexpr int T = decltype(depth_tag)::value;
#pragma unroll
        for (int i = 0; i < kWarpTiles; ++i) {
          if (i < n) {  // uniform over the warp
            uint32_t bytes[T], frag[4];
#pragma unroll
            for (int p = 0; p < T; ++p) bytes[p] = group_bytes[(i * planes + p) * 32];
            tile::DecodeFragment<T>(bytes, centroids, lookup, frag);
            Mma(acc[i], frag, q.x, q.y);
          }
        }
      });
    }
    __syncwarp();  // the slot is refilled by stage k + 2's issue
    if (a.in.key_outlier_pages != nullptr) {  // before the tiles' maxima and sums
      const float* scaled = a.scaled_queries + row * D * G;
      const float* key_std = a.codec.key_std + static_cast<size_t>(h) * D;
#pragma unroll
      for (int i = 0; i < kWarpTiles; ++i) {
        if (i < n) {
          AddKeyOutliers<G, kByteKeys>(EntriesFromLane(my_list, base - mine.lo + i), lane, depth,
                                       scaled, key_std, centroids, acc[i]);
        }
      }
    }
    // C: rows = tokens (lane / 4, + 8), columns = heads (2 (lane % 4), + 1).
#pragma unroll
    for (int i = 0; i < kWarpTiles; ++i) {
      if (i >= n) continue;
      const int tile = base + i;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int n_head = 2 * (lane % 4) + hh;
        const int t0 = tile * 16 + lane / 4, t1 = t0 + 8;
        const float x0 = t0 < encoded ? acc[i][hh] : -INFINITY;
        const float x1 = t1 < encoded ? acc[i][hh + 2] : -INFINITY;
        if (debug_logits != nullptr && n_head < G) {
          float* out = debug_logits + (first_q + n_head) * a.logit_stride;
          if (t0 < encoded) out[t0] = x0;
          if (t1 < encoded) out[t1] = x1;
        }
        float m = fmaxf(x0, x1);
#pragma unroll
        for (int o = 4; o < kWarp; o *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float e0 = t0 < encoded ? __expf(x0 - m) : 0.0f;
        const float e1 = t1 < encoded ? __expf(x1 - m) : 0.0f;
        float sum = e0 + e1, sq = e0 * e0 + e1 * e1;
#pragma unroll
        for (int o = 4; o < kWarp; o *= 2) {
          sum += __shfl_xor_sync(0xffffffffu, sum, o);
          sq += __shfl_xor_sync(0xffffffffu, sq, o);
        }
        if (n_head < G) {
          __half* pr = probs + (static_cast<size_t>(tile) * G + n_head) * 16 + lane / 4;
          pr[0] = __float2half_rn(e0);
          pr[8] = __float2half_rn(e1);
        }
        if (lane < 4 && n_head < G) {
          float* st = tile_stats + static_cast<size_t>(tile) * 3 * G;
          st[n_head] = m;
          st[G + n_head] = sum;
          st[2 * G + n_head] = sq;
        }
        if (per_chunk && m != -INFINITY) {  // a tile with tokens (m uniform over the class)
          // One exponential: the smaller maximum's term is rescaled to the larger.
          const float top = fmaxf(run_max[hh], m);
          const float e = __expf(fminf(run_max[hh], m) - top);
          run_sum[hh] = m > run_max[hh] ? run_sum[hh] * e + sum : run_sum[hh] + sum * e;
          run_max[hh] = top;
        }
      }
    }
  }
  // The chunk's statistics per head (M_c, sum over its tiles of sum e exp(M - M_c)), the warps
  // combined in order: TileWindowValues forms the row's from these. (-inf, 0) for a chunk
  // without tokens.
  if (!per_chunk) return;
  __shared__ float warp_stats[kMmaWarps][kMaxGroup][2];
  if (lane < 4) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int n_head = 2 * lane + hh;
      if (n_head < G) {
        warp_stats[warp][n_head][0] = run_max[hh];
        warp_stats[warp][n_head][1] = run_sum[hh];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int q = threadIdx.x;
    float top = -INFINITY;
    for (int w = 0; w < kMmaWarps; ++w) top = fmaxf(top, warp_stats[w][q][0]);
    float total = 0.0f;
    if (top != -INFINITY) {
      for (int w = 0; w < kMmaWarps; ++w) {
        if (warp_stats[w][q][0] != -INFINITY) {
          total += warp_stats[w][q][1] * expf(warp_stats[w][q][0] - top);
        }
      }
    }
    float* out = a.chunk_stats + (row * a.chunks + chunk) * 2 * G;
    out[q] = top;
    out[G + q] = total;
  }
}

}  // namespace readkv::cuda::tile_kernels
