// FP8 e4m3 decode attention (vLLM's kv_cache_dtype=fp8_e4m3): the split kernel; a lane converts
// 8 e4m3 codes (8 bytes) exactly through half precision; k_scale folds into the queries, v_scale
// into the combine, so the inner loops see raw e4m3 values.
#include <cuda_fp8.h>

#include "split_decode_kernel.cuh"

namespace readkv::cuda {
namespace {

__device__ __forceinline__ void E4m3x8ToFloat(const uint2 u, float (&x)[8]) {
  const uint32_t w[2] = {u.x, u.y};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>((w[k] >> (16 * half)) & 0xffffu);
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&raw));
      x[4 * k + 2 * half] = f.x;
      x[4 * k + 2 * half + 1] = f.y;
    }
  }
}

struct Fp8Rows {
  static constexpr int kElementBytes = 1;
  const unsigned char* k;
  const unsigned char* v;
  const float* k_scales;
  __device__ float QueryScale(int h) const { return k_scales[h]; }
  __device__ static void Convert(const unsigned char* shared, float (&x)[8]) {
    E4m3x8ToFloat(*reinterpret_cast<const uint2*>(shared), x);
  }
};

}  // namespace

cudaError_t Fp8DecodeAttention(const DecodeShape& shape, const DecodeInputs& inputs,
                               const Fp8Cache& cache, void* workspace, cudaStream_t stream) {
  if (cache.k_pages == nullptr || cache.v_pages == nullptr || cache.k_scales == nullptr ||
      cache.v_scales == nullptr) {
    return cudaErrorInvalidValue;
  }
  return internal::LaunchSplitDecode(
      shape, inputs, Fp8Rows{cache.k_pages, cache.v_pages, cache.k_scales},
      cache.v_scales, workspace, stream);
}

}  // namespace readkv::cuda
