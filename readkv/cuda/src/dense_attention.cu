// Dense BF16 decode attention: the split kernel; a lane converts 8 bf16 channels (16 bytes).
#include "split_decode_kernel.cuh"

namespace readkv::cuda {
namespace {

__device__ __forceinline__ void Bf16x8ToFloat(const uint4 u, float (&x)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = __uint_as_float(w[k] << 16);
    x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}

struct DenseRows {
  static constexpr int kElementBytes = 2;
  const unsigned char* k;
  const unsigned char* v;
  __device__ float QueryScale(int) const { return 1.0f; }
  __device__ static void Convert(const unsigned char* shared, float (&x)[8]) {
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(shared), x);
  }
};

}  // namespace

size_t SplitDecodeWorkspaceBytes(const DecodeShape& shape) {
  const DecodeShape s = internal::Resolved(shape);
  return internal::PartialOutBytes(s) + internal::PartialMlBytes(s);
}

cudaError_t DenseDecodeAttention(const DecodeShape& shape, const DecodeInputs& inputs,
                                 const DenseCache& cache, void* workspace, cudaStream_t stream) {
  if (cache.k_pages == nullptr || cache.v_pages == nullptr) return cudaErrorInvalidValue;
  return internal::LaunchSplitDecode(shape, inputs,
                                     DenseRows{reinterpret_cast<const unsigned char*>(cache.k_pages),
                                               reinterpret_cast<const unsigned char*>(cache.v_pages)},
                                     nullptr, workspace, stream);
}

}  // namespace readkv::cuda
