// The dense and FP8 decode kernel: one thread block per (chunk, KV head, sequence), 4 warps.
// Internal to readkv/cuda; dense_attention.cu and fp8_attention.cu instantiate it with their
// row converters.
//
// Memory first: a chunk's K rows, then its V rows, stream through shared memory in tiles of 64
// tokens (one contiguous run of a page: 64 x d x element bytes) with cp.async and a 4-stage
// pipeline, so each block keeps up to three tiles in flight while it computes on the fourth.
// A lane group of LPT = d / 8 lanes covers one token row, 8 channels per lane. Pass 1 computes
// the g logits of every token into shared memory (dot products summed across the lane group
// with the halving exchange); each warp then takes the max and the sum of exps of one query
// head; pass 2 accumulates p v in registers. The chunk's unnormalised partial output and its
// (max, sum) go to the workspace for LaunchCombineChunks.
#pragma once

#include "split_decode.cuh"

namespace readkv::cuda::internal {

inline constexpr int kSplitWarps = 4;
inline constexpr int kSplitThreads = kSplitWarps * kWarp;
inline constexpr int kTileTokens = 64;
inline constexpr int kStages = 4;

struct SplitArgs {
  int heads_q, heads_kv, max_pages, max_chunks, chunk_tokens;
  float scale;  // 1 / sqrt(d)
  const float* queries;
  const int32_t* page_table;
  const int32_t* seq_lens;
  float* partial_out;
  float* partial_ml;
};

inline size_t SplitSharedBytes(int group, int chunk_tokens, int head_dim, int element_bytes) {
  const size_t stages = static_cast<size_t>(kStages) * kTileTokens * head_dim * element_bytes;
  const size_t reduce = static_cast<size_t>(kSplitWarps) * group * head_dim * 4;
  return static_cast<size_t>(group) * chunk_tokens * 4 + (stages > reduce ? stages : reduce);
}

__device__ __forceinline__ void CpAsync16(void* shared, const void* global) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Rows must provide: kElementBytes, k and v (byte pointers to [pages][H_kv][256][d] elements),
// QueryScale(h) (a factor folded into the queries, e.g. an FP8 k_scale), and
// Convert(shared pointer to 8 elements, float[8]).
template <class Rows, int D, int G>
__global__ void __launch_bounds__(kSplitThreads) SplitDecodeKernel(SplitArgs a, Rows rows) {
  constexpr int EB = Rows::kElementBytes;
  constexpr int kRowBytes = D * EB;
  constexpr int kTileBytes = kTileTokens * kRowBytes;
  constexpr int kPieces = kTileBytes / 16;  // 16-byte copies per tile
  constexpr int LPT = D / 8;         // lanes per token row
  constexpr int TPW = kWarp / LPT;   // rows per warp step
  constexpr int kStride = kSplitWarps * TPW;
  static_assert(kPieces % kSplitThreads == 0, "tile copies must split evenly over the block");
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int C = a.chunk_tokens;
  float* scores = reinterpret_cast<float*>(shared_bytes);  // [G][C]
  unsigned char* stages = shared_bytes + static_cast<size_t>(G) * C * 4;
  float* reduce = reinterpret_cast<float*>(stages);  // [warps][G][D], after the last tile

  const int chunk = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int T = a.seq_lens[b];
  const int start = chunk * C;
  if (start >= T) return;  // the combine kernel never reads chunks past the sequence
  const int n = min(C, T - start);
  const int tiles = (n + kTileTokens - 1) / kTileTokens;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int sub = lane / LPT;
  const int lig = lane % LPT;
  const int ch0 = lig * 8;
  const int32_t* pages = a.page_table + static_cast<size_t>(b) * a.max_pages;
  const size_t head_row = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;

  float q[G][8];
  const float qscale = a.scale * rows.QueryScale(h);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float4* src = reinterpret_cast<const float4*>(a.queries + (head_row + g) * D + ch0);
    const float4 x = src[0], y = src[1];
    q[g][0] = x.x * qscale; q[g][1] = x.y * qscale; q[g][2] = x.z * qscale;
    q[g][3] = x.w * qscale; q[g][4] = y.x * qscale; q[g][5] = y.y * qscale;
    q[g][6] = y.z * qscale; q[g][7] = y.w * qscale;
  }

  // Tile t of the chunk: rows start + 64 t ... (one page, consecutive slots, contiguous bytes).
  const auto issue = [&](const unsigned char* base, int tile) {
    if (tile < tiles) {
      const int token = start + tile * kTileTokens;
      const unsigned char* src =
          base + ((static_cast<size_t>(pages[token / kPageTokens]) * a.heads_kv + h) *
                      kPageTokens + token % kPageTokens) * kRowBytes;
      unsigned char* dst = stages + static_cast<size_t>(tile % kStages) * kTileBytes;
      // Rows past the sequence's end are copied too (inside the page, never read as data).
#pragma unroll
      for (int k = threadIdx.x; k < kPieces; k += kSplitThreads) CpAsync16(dst + k * 16, src + k * 16);
    }
    CpAsyncCommit();
  };

  // Pass 1: logits.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(rows.k, s);
  for (int tile = 0; tile < tiles; ++tile) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    issue(rows.k, tile + kStages - 1);
    const unsigned char* tile_bytes = stages + static_cast<size_t>(tile % kStages) * kTileBytes;
#pragma unroll
    for (int tt0 = 0; tt0 < kTileTokens; tt0 += kStride) {
      const int tt = tt0 + warp * TPW + sub;
      const int i = tile * kTileTokens + tt;
      float k[8];
      rows.Convert(tile_bytes + tt * kRowBytes + ch0 * EB, k);
      float s[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc = fmaf(q[g][j], k[j], acc);
        s[g] = acc;
      }
      HalvingSum<G, LPT>(s, lig);
      if (i < n && lig % (LPT / G) == 0) scores[HalvingIndex<G, LPT>(lig) * C + i] = s[0];
    }
  }
  CpAsyncWait<0>();
  __syncthreads();
  // V's first tiles stream in while the softmax statistics are taken.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(rows.v, s);

  // Softmax statistics of the chunk, one warp per query head; scores become exps.
  for (int g = warp; g < G; g += kSplitWarps) {
    float* row = scores + static_cast<size_t>(g) * C;
    float m = -INFINITY;
    for (int i = lane; i < n; i += kWarp) m = fmaxf(m, row[i]);
    m = WarpMax(m);
    float l = 0.0f;
    for (int i = lane; i < n; i += kWarp) {
      const float e = expf(row[i] - m);
      row[i] = e;
      l += e;
    }
    l = WarpSum(l);
    if (lane == 0) {
      float* ml = a.partial_ml + ((head_row + g) * a.max_chunks + chunk) * 2;
      ml[0] = m;
      ml[1] = l;
    }
  }

  // Pass 2: sum_i e_i v_i.
  float acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  }
  for (int tile = 0; tile < tiles; ++tile) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // also publishes the exps of the statistics step (first tile)
    issue(rows.v, tile + kStages - 1);
    const unsigned char* tile_bytes = stages + static_cast<size_t>(tile % kStages) * kTileBytes;
#pragma unroll
    for (int tt0 = 0; tt0 < kTileTokens; tt0 += kStride) {
      const int tt = tt0 + warp * TPW + sub;
      const int i = tile * kTileTokens + tt;
      if (i >= n) continue;
      float v[8];
      rows.Convert(tile_bytes + tt * kRowBytes + ch0 * EB, v);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = scores[g * C + i];
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(p, v[j], acc[g][j]);
      }
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the stages: they become the reduction buffer
  // Sum the rows of a warp step, then the warps.
#pragma unroll
  for (int o = LPT; o < kWarp; o *= 2) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[g][j] += __shfl_xor_sync(0xffffffffu, acc[g][j], o);
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int j = 0; j < 8; ++j) reduce[(warp * G + g) * D + ch0 + j] = acc[g][j];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kSplitThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kSplitWarps; ++w) sum += reduce[w * G * D + idx];
    const int g = idx / D;
    const int c = idx % D;
    a.partial_out[((head_row + g) * a.max_chunks + chunk) * D + c] = sum;
  }
}

// Validates, sizes shared memory and launches both kernels of one call.
template <class Rows>
cudaError_t LaunchSplitDecode(const DecodeShape& requested, const DecodeInputs& in,
                              const Rows& rows, const float* out_scales, void* workspace,
                              cudaStream_t stream) {
  const DecodeShape shape = Resolved(requested);
  if (!ValidShape(shape) || in.queries == nullptr || in.page_table == nullptr ||
      in.seq_lens == nullptr || in.out == nullptr || workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  auto* partial_out = static_cast<float*>(workspace);
  auto* partial_ml =
      reinterpret_cast<float*>(static_cast<char*>(workspace) + PartialOutBytes(shape));
  SplitArgs args{shape.heads_q,     shape.heads_kv,
                 shape.max_pages,   shape.max_chunks(),
                 shape.chunk_tokens, 1.0f / sqrtf(static_cast<float>(shape.head_dim)),
                 in.queries,        in.page_table,
                 in.seq_lens,       partial_out,
                 partial_ml};
  const dim3 grid(shape.max_chunks(), shape.heads_kv, shape.batch);
  const size_t shared = SplitSharedBytes(shape.group(), shape.chunk_tokens, shape.head_dim,
                                         Rows::kElementBytes);
  cudaError_t status = cudaSuccess;
  const auto launch = [&](auto kernel) {
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared));
    if (status != cudaSuccess) return;
    kernel<<<grid, kSplitThreads, shared, stream>>>(args, rows);
    status = cudaGetLastError();
  };
#define KVGATE_SPLIT_CASE(D, G)                                   \
  if (shape.head_dim == D && shape.group() == G) {                \
    launch(SplitDecodeKernel<Rows, D, G>);                        \
  } else
  KVGATE_SPLIT_CASE(128, 1) KVGATE_SPLIT_CASE(128, 2) KVGATE_SPLIT_CASE(128, 4)
  KVGATE_SPLIT_CASE(128, 8) KVGATE_SPLIT_CASE(64, 1) KVGATE_SPLIT_CASE(64, 2)
  KVGATE_SPLIT_CASE(64, 4) KVGATE_SPLIT_CASE(64, 8) { return cudaErrorInvalidValue; }
#undef KVGATE_SPLIT_CASE
  if (status != cudaSuccess) return status;
  return LaunchCombineChunks(shape, in.seq_lens, partial_out, partial_ml, out_scales, in.out,
                             stream);
}

}  // namespace readkv::cuda::internal
