// Shared pieces of the split (flash-decoding) decode kernels: chunking, page addressing, warp
// reductions and the kernel that combines chunk partials. Internal to readkv/cuda.
//
// Partials layout (workspace), for C = max_chunks chunks:
//   partial_out [B][H_q][C][d] float   sum_i exp(s_i - m_c) v_i over the chunk (unnormalised)
//   partial_ml  [B][H_q][C][2] float   m_c (chunk max logit, -inf when empty), l_c (sum of exps)
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "readkv/cuda/decode_attention.h"

namespace readkv::cuda::internal {

inline constexpr int kWarp = 32;

// The chunk length a call uses: the caller's, or (chunk_tokens == 0) the largest multiple of a
// page that still gives the GPU at least ~2 thread blocks per SM.
inline int EffectiveChunkTokens(const DecodeShape& shape) {
  if (shape.chunk_tokens > 0) return shape.chunk_tokens;
  int chunk = 2048;
  const int64_t heads = static_cast<int64_t>(shape.batch) * shape.heads_kv;
  while (chunk > kPageTokens &&
         heads * ((shape.max_tokens + chunk - 1) / chunk) < 2 * 132) {
    chunk /= 2;
  }
  return chunk;
}

inline DecodeShape Resolved(const DecodeShape& shape) {
  DecodeShape s = shape;
  s.chunk_tokens = EffectiveChunkTokens(shape);
  return s;
}

inline bool ValidShape(const DecodeShape& s) {
  const int g = s.heads_kv > 0 ? s.heads_q / s.heads_kv : 0;
  return s.batch >= 1 && s.heads_kv >= 1 && s.heads_q == g * s.heads_kv &&
         (g == 1 || g == 2 || g == 4 || g == 8) && (s.head_dim == 64 || s.head_dim == 128) &&
         s.max_pages >= 1 && s.max_tokens >= 1 &&
         s.max_tokens <= static_cast<int64_t>(s.max_pages) * kPageTokens &&
         s.chunk_tokens >= kPageTokens && s.chunk_tokens % kPageTokens == 0;
}

inline size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline size_t PartialOutBytes(const DecodeShape& s) {
  return AlignUp(static_cast<size_t>(s.batch) * s.heads_q * s.max_chunks() * s.head_dim * 4);
}
inline size_t PartialMlBytes(const DecodeShape& s) {
  return AlignUp(static_cast<size_t>(s.batch) * s.heads_q * s.max_chunks() * 2 * 4);
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums G values across the LPT lanes of a lane group (LPT a power of two dividing 32) with the
// halving exchange: G - 1 + log2(LPT / G) shuffles instead of G log2(LPT). On return v[0] holds
// the group's sum of value index HalvingIndex<G, LPT>(lane) (LPT >= G) .
template <int G, int LPT>
__device__ __forceinline__ void HalvingSum(float (&v)[G], int lane) {
  static_assert(LPT >= G, "a lane group must have at least as many lanes as values");
  int count = G;
  int offset = LPT / 2;
#pragma unroll
  for (int step = 0; (G >> step) > 1; ++step) {
    const bool upper = (lane & offset) != 0;
    const int half = count / 2;
#pragma unroll
    for (int k = 0; k < G / 2; ++k) {
      if (k < half) {
        const float lo = v[k], hi = v[k + half];
        const float send = upper ? lo : hi;
        const float keep = upper ? hi : lo;
        v[k] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
      }
    }
    count = half;
    offset /= 2;
  }
  for (; offset > 0; offset /= 2) v[0] += __shfl_xor_sync(0xffffffffu, v[0], offset);
}

// Which of the G values lane `lane` holds after HalvingSum.
template <int G, int LPT>
__device__ __forceinline__ int HalvingIndex(int lane) {
  int index = 0;
  int offset = LPT / 2;
  for (int step = 0; (G >> step) > 1; ++step) {
    index = index * 2 + ((lane & offset) != 0 ? 1 : 0);
    offset /= 2;
  }
  return index;
}

// Combines chunk partials into out: one launch, grid (H_q, B), d threads per block.
// out[b][h][c] = out_scales[h / group] * sum_k e^{m_k - M} acc_k[c] / sum_k e^{m_k - M} l_k
// (out_scales may be null: scale 1).
cudaError_t LaunchCombineChunks(const DecodeShape& shape, const int32_t* seq_lens,
                                const float* partial_out, const float* partial_ml,
                                const float* out_scales, float* out, cudaStream_t stream);

}  // namespace readkv::cuda::internal
