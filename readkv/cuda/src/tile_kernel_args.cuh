// The pieces every kernel of the GPU tile reader shares (tile_attention.h says what each launch
// does): the launch arguments, cp.async staging, the MMA, the centroid table and the depth
// dispatch. The outlier lists' reads are in tile_list_reads.cuh, the Value cut in
// tile_value_cut.cuh; TileLogits in tile_kernels.cuh, TileValues in tile_values.cuh,
// TileWindowValues in tile_window.cuh. Included only through tile_attention.cu. Internal.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
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
                      // (with a Value window only M, the warp's reference maximum)
  __half* probs;      // [B][H_kv][max_tiles][G][16]: e = exp(l - M) per tile, head and token
  float* scaled_queries;  // [B][H_kv][D][G]: scale q~ (f32), written only with Key lists
  float* chunk_stats;     // [B][H_kv][chunks][2][G]: per chunk and head M, sum e, written by
                          // TileLogits with a Value window only (null without)
  unsigned* arrivals;     // [B][H_kv]: TileWindowValues' blocks done (TilePrepare zeroes them;
                          // with byte keys the row's first TileLogits block)
};

__device__ __forceinline__ size_t RowOf(const TileArgs& a, int b, int h) {
  return static_cast<size_t>(b) * a.heads_kv + h;
}

// This block's timeline in TileDecodeDebug::phases (non-null), the grid's blocks in order.
__device__ __forceinline__ TilePhaseClocks& BlockPhaseClocks(const TileArgs& a) {
  const size_t block =
      (static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  return a.debug.phases[block];
}

// A one-pass block's timeline stamp (TileDecodeDebug::phases, TilePhaseClocks): thread 0 only,
// nothing without the debug pointer (a uniform test of a kernel parameter).
__device__ __forceinline__ void StampPhase(const TileArgs& a, TilePhaseStamp stamp) {
  if (a.debug.phases == nullptr || threadIdx.x != 0) return;
  TilePhaseClocks& p = BlockPhaseClocks(a);
  p.clock[stamp] = clock64();
  if (stamp == kStampStart) asm volatile("mov.u32 %0, %%smid;" : "=r"(p.sm));
  if (stamp == kStampStart || stamp == kStampEnd) {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    (stamp == kStampStart ? p.global_start_ns : p.global_end_ns) = ns;
  }
}

// A one-pass block's warp's end of its Value stream (TilePhaseClocks::values_warp_end): lane 0
// of each warp, nothing without the debug pointer.
__device__ __forceinline__ void StampValuesWarpEnd(const TileArgs& a) {
  static_assert(kMmaWarps == kTilePhaseWarps, "a stamp per warp of the block");
  if (a.debug.phases == nullptr || threadIdx.x % kWarp != 0) return;
  BlockPhaseClocks(a).values_warp_end[threadIdx.x / kWarp] = clock64();
}

// Token tile `tile` of (b, h) in a tile pool, through the page table (tile_pages.h).
__device__ __forceinline__ const uint8_t* TileAt(const TileArgs& a, const uint8_t* pool,
                                                 int64_t tile_bytes, int b, int h, int tile) {
  return pool + tile::TileOffset(a.in.page_table, a.max_pages, a.heads_kv, tile_bytes, b, h, tile);
}

// Lane `from`'s 64-bit word, to every lane (two 32-bit shuffles).
__device__ __forceinline__ uint64_t ShuffleWord64(uint64_t word, int from) {
  const auto low = static_cast<uint32_t>(word), high = static_cast<uint32_t>(word >> 32);
  return (uint64_t{__shfl_sync(0xffffffffu, high, from)} << 32) |
         __shfl_sync(0xffffffffu, low, from);
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

// A block's shared copy of the centroid table: kTableSlots entries (the last 16-byte piece's
// padding included), declared __align__(16).
inline constexpr int kTableSlots = tile::kTileTableVectors * 8;

// The centroid table from the kernel parameter into `table` (shared, kTableSlots entries,
// 16-byte aligned), a 16-byte piece a thread. The parameter is read through the constant cache,
// which serves one address a cycle: 16-byte pieces take 64 such reads a block where 2-byte
// entries took 511 (ncu: the entry-wise copy held 6.8% of TileWindowValues' stall samples at
// the served point, 3345346).
__device__ __forceinline__ void LoadTable(const tile::TileCentroids& c, uint16_t* table) {
  static_assert(offsetof(tile::TileCentroids, table) % 16 == 0, "the table is 16-byte aligned");
  const auto* from = reinterpret_cast<const uint4*>(c.table);
  auto* to = reinterpret_cast<uint4*>(table);
  for (int j = threadIdx.x; j < tile::kTileTableVectors; j += blockDim.x) to[j] = from[j];
}

// What every Logits or Values block keeps in shared memory: the centroid table (LoadTable) and
// the warps' staging rings (kMmaWarps x kStages x kStageBytes), both 16-byte aligned.
struct MmaBlockShared {
  alignas(16) uint16_t table[kTableSlots];
  alignas(16) uint8_t ring[kMmaWarps][kStages][kStageBytes];
};

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

}  // namespace readkv::cuda::tile_kernels
