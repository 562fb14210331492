// The GPU tile reader's kernels (tile_attention.h says what each launch does); included only by
// tile_attention.cu, which launches them. Internal. Written without a GPU: not yet run.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/tile_attention.h"
#include "readkv_device.cuh"
#include "tile_fragment.h"

namespace readkv::cuda::tile_kernels {

using internal::kWarp;
inline constexpr int kMaxGroup = 8;  // query heads per KV head: the MMA's N
inline constexpr int kStepBits = 3;  // an object's steps <= 7 (W <= 8, step 1)
inline constexpr int kMaxSteps = (1 << kStepBits) - 1;
inline constexpr int kMmaWarps = 4;  // warps of a Logits or Values block
inline constexpr int kMmaThreads = kMmaWarps * 32;
inline constexpr int kWarpTiles = 8;  // token tiles a Logits warp holds accumulators for
inline constexpr int kSelectThreads = 256;
static_assert(kMmaWarps * kWarpTiles * 16 == kTileChunkStep, "a chunk is whole Logits passes");

// Everything a launch reads: the call's inputs and the workspace sections (tile_plan.h).
struct TileArgs {
  int heads_q, heads_kv, store_bits, max_tiles, chunk_tokens, chunks, max_residual;
  long long logit_stride;
  float attention_scale;  // 1 / sqrtf(d), as the CPU reader's
  float transform_scale;  // (float)(1 / sqrt((double)d)), as HadamardTransform's
  TileDecodeInputs in;
  ReadKvCodec codec;
  ReadKvReadPolicy policy;
  TileDecodeDebug debug;
  uint32_t* fragments;
  uint8_t* key_depths;
  float* logits;
  float* stats;
  double* block_weights;
  uint8_t* value_depths;
  float* partials;
};

__device__ __forceinline__ size_t RowOf(const TileArgs& a, int b, int h) {
  return static_cast<size_t>(b) * a.heads_kv + h;
}

// The planes of tile (token tile r, group g) of row `row`, at this lane's byte.
template <int kGroups>
__device__ __forceinline__ const uint8_t* TileLane(const uint8_t* tiles, const TileArgs& a,
                                                   size_t row, int r, int g, int lane) {
  const size_t tile = (row * a.max_tiles + r) * kGroups + g;
  return tiles + tile * a.store_bits * 32 + lane;
}

template <int T>
__device__ __forceinline__ void LoadPlanes(const uint8_t* lane_bytes, uint32_t (&b)[T]) {
#pragma unroll
  for (int p = 0; p < T; ++p) b[p] = __ldg(lane_bytes + p * 32);
}

// D += A B on tensor cores, m16n8k16, f16 inputs, f32 accumulate.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackHalves(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
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

// ---- 2. TileLogits -----------------------------------------------------------------------------
//
// Grid (chunks, H_kv, B) x 128. A warp takes kWarpTiles consecutive token tiles per pass (four
// warps: 512 tokens) and keeps their accumulators (8 x 4 floats) live while it walks the Key
// groups: one depth dispatch per group, then per batch of tiles their t lane loads (one 32-byte
// sector per plane for the warp, all in flight together), the decode of tile_fragment.h and one
// MMA per tile against the group's folded queries (B: 16 channels x 8 heads, precomputed in lane
// order by TilePrepare). Logits go to the workspace row of each query head; tokens past the
// encoded ones, and tiles past the chunk, are not written.
template <int D, int G>
__global__ void __launch_bounds__(kMmaThreads)
    TileLogits(TileArgs a, const __grid_constant__ tile::TileCentroids centroids) {
  constexpr int kGroups = D / 16;
  __shared__ uint16_t table[tile::kTileTableEntries];
  __shared__ uint8_t depth[kGroups];
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const size_t row = RowOf(a, b, h);
  LoadTable(centroids, table);
  if (threadIdx.x < kGroups) depth[threadIdx.x] = a.key_depths[row * kGroups + threadIdx.x];
  __syncthreads();
  const int encoded = a.in.encoded_lens[b];
  const int tiles = (encoded + 15) / 16;
  const int first = chunk * (a.chunk_tokens / 16);
  const int end = min(tiles, first + a.chunk_tokens / 16);
  const SharedTable lookup{table};
  const uint2* frags = reinterpret_cast<const uint2*>(a.fragments) + row * kGroups * kWarp;
  for (int base = first + warp * kWarpTiles; base < end; base += kMmaWarps * kWarpTiles) {
    float acc[kWarpTiles][4] = {};
    for (int g = 0; g < kGroups; ++g) {
      const uint2 q = frags[g * kWarp + lane];
      WithDepth(depth[g], [&](auto depth_tag) {
        constexpr int T = decltype(depth_tag)::value;
        // Loads of a batch of tiles issue together (tiles past `end` re-read the last one, their
        // results are never stored), then their decodes and MMAs: T x kBatch <= 16 registers.
        constexpr int kBatch = T <= 2 ? kWarpTiles : (T <= 4 ? kWarpTiles / 2 : kWarpTiles / 4);
#pragma unroll
        for (int first_tile = 0; first_tile < kWarpTiles; first_tile += kBatch) {
          if (base + first_tile >= end) break;  // uniform over the warp
          uint32_t bytes[kBatch][T];
#pragma unroll
          for (int i = 0; i < kBatch; ++i) {
            const int tile = min(base + first_tile + i, end - 1);
            LoadPlanes<T>(TileLane<kGroups>(a.in.key_tiles, a, row, tile, g, lane), bytes[i]);
          }
#pragma unroll
          for (int i = 0; i < kBatch; ++i) {
            uint32_t frag[4];
            tile::DecodeFragment<T>(bytes[i], centroids, lookup, frag);
            Mma(acc[first_tile + i], frag, q.x, q.y);
          }
        }
      });
    }
    // C: rows = tokens (lane / 4, + 8), columns = heads (2 (lane % 4), + 1).
#pragma unroll
    for (int i = 0; i < kWarpTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = (base + i) * 16 + lane / 4 + 8 * (e / 2);
        const int n = 2 * (lane % 4) + e % 2;
        if (n < G && token < encoded && base + i < end) {
          const size_t head = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G + n;
          a.logits[head * a.logit_stride + token] = acc[i][e];
        }
      }
    }
  }
}

// ---- 4. TileValues -----------------------------------------------------------------------------
//
// Grid (chunks, H_kv, B) x 128. Warp w takes the chunk's token tiles w, w + 4, ...; per tile one
// depth dispatch, then for each channel group the tile's t planes, the decode and one MMA with
// A = the value tile (channels x tokens) and B = the tile's unnormalised probabilities
// e = exp(l - max) in f16 (16 tokens x 8 heads), into d / 16 accumulators kept live over the
// warp's tiles. The warps' sums meet in shared memory (fixed order) and the chunk's partial
// sum_i e_i C(code_i) [G][d] goes to the workspace.
template <int D, int G>
__global__ void __launch_bounds__(kMmaThreads)
    TileValues(TileArgs a, const __grid_constant__ tile::TileCentroids centroids) {
  constexpr int kGroups = D / 16;
  __shared__ uint16_t table[tile::kTileTableEntries];
  __shared__ float head_max[kMaxGroup];
  __shared__ float sums[kMmaWarps][G][D];
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const size_t row = RowOf(a, b, h);
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const int encoded = a.in.encoded_lens[b];
  const int tiles = (encoded + 15) / 16;
  const int first = chunk * (a.chunk_tokens / 16);
  if (first >= tiles) return;  // the block-uniform exit of a chunk past the sequence
  const int end = min(tiles, first + a.chunk_tokens / 16);
  LoadTable(centroids, table);
  if (threadIdx.x < G) head_max[threadIdx.x] = a.stats[(first_q + threadIdx.x) * 4];
  __syncthreads();
  const SharedTable lookup{table};
  const int n = lane / 4;  // this lane's head in B
  const float* logit_row = a.logits + (first_q + min(n, G - 1)) * a.logit_stride;
  const float m = head_max[min(n, G - 1)];
  float acc[kGroups][4] = {};
  for (int r = first + warp; r < end; r += kMmaWarps) {
    const auto e = [&](int token) {
      return n < G && token < encoded ? __expf(logit_row[token] - m) : 0.0f;
    };
    const int k0 = r * 16 + 2 * (lane % 4);
    const uint32_t p0 = PackHalves(e(k0), e(k0 + 1));
    const uint32_t p1 = PackHalves(e(k0 + 8), e(k0 + 9));
    WithDepth(a.value_depths[row * a.max_tiles + r], [&](auto depth_tag) {
      constexpr int T = decltype(depth_tag)::value;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        uint32_t bytes[T], frag[4];
        LoadPlanes<T>(TileLane<kGroups>(a.in.value_tiles, a, row, r, g, lane), bytes);
        tile::DecodeFragment<T>(bytes, centroids, lookup, frag);
        Mma(acc[g], frag, p0, p1);
      }
    });
  }
  // C: rows = channels (16 g + lane / 4, + 8), columns = heads (2 (lane % 4), + 1).
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int head = 2 * (lane % 4) + k % 2;
      if (head < G) sums[warp][head][16 * g + lane / 4 + 8 * (k / 2)] = acc[g][k];
    }
  }
  __syncthreads();
  float* out = a.partials + (row * a.chunks + chunk) * kMaxGroup * D;
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    const int q = idx / D, c = idx % D;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) s += sums[w][q][c];
    out[q * D + c] = s;
  }
}

}  // namespace readkv::cuda::tile_kernels
