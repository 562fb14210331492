// FP8 e4m3 encode/append (vLLM's kv_cache_dtype=fp8_e4m3 write path): one thread block per
// (token, KV head), one thread per channel; code = e4m3(x / scale) with an IEEE division, round
// to nearest even and saturation, exactly as readkv::codec::Fp8LayerCache::Append.
#include <cuda_runtime.h>

#include <cstdint>

#include "fp8_e4m3_encode.h"
#include "readkv/cuda/decode_attention.h"

namespace readkv::cuda {
namespace {

__global__ void __launch_bounds__(128)
    Append(int heads_kv, int head_dim, int max_pages, const float* __restrict__ keys,
           const float* __restrict__ values, const int32_t* __restrict__ seq_ids,
           const int32_t* __restrict__ positions, const int32_t* __restrict__ page_table,
           Fp8CacheWrite cache) {
  const int k = blockIdx.x;
  const int h = blockIdx.y;
  const int c = threadIdx.x;
  const size_t in = (static_cast<size_t>(k) * heads_kv + h) * head_dim + c;
  const int position = positions[k];
  const int page = page_table[static_cast<size_t>(seq_ids[k]) * max_pages + position / kPageTokens];
  // [page][H_kv][256][d]
  const size_t out =
      ((static_cast<size_t>(page) * heads_kv + h) * kPageTokens + position % kPageTokens) *
          head_dim + c;
  cache.k_pages[out] = bench::EncodeFp8E4m3(__fdiv_rn(keys[in], cache.k_scales[h]));
  cache.v_pages[out] = bench::EncodeFp8E4m3(__fdiv_rn(values[in], cache.v_scales[h]));
}

}  // namespace

cudaError_t Fp8Append(const DecodeShape& shape, int tokens, const float* keys, const float* values,
                      const int32_t* seq_ids, const int32_t* positions, const int32_t* page_table,
                      const Fp8CacheWrite& cache, cudaStream_t stream) {
  if (tokens < 0 || (shape.head_dim != 64 && shape.head_dim != 128) || shape.heads_kv < 1 ||
      shape.max_pages < 1 || keys == nullptr || values == nullptr || seq_ids == nullptr ||
      positions == nullptr || page_table == nullptr || cache.k_pages == nullptr ||
      cache.v_pages == nullptr || cache.k_scales == nullptr || cache.v_scales == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0) return cudaSuccess;
  Append<<<dim3(tokens, shape.heads_kv), shape.head_dim, 0, stream>>>(
      shape.heads_kv, shape.head_dim, shape.max_pages, keys, values, seq_ids, positions,
      page_table, cache);
  return cudaGetLastError();
}

}  // namespace readkv::cuda
