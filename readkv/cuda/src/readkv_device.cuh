// Device pieces shared by the ReadKV kernels: the exact Hadamard transform of the codec (same
// butterfly order, no contraction, so codes and Key importances are bit-identical to
// readkv::codec), block reductions and the small-object threshold allocator. Internal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "split_decode.cuh"

namespace readkv::cuda::internal {

// In-place FWHT of x[0..d) by a block of >= d / 2 threads, then x *= scale; the caller
// synchronises before and after. Same butterflies as codec::Fwht; each element sees the same
// operations in the same order, so the result is bit-identical.
__device__ __forceinline__ void BlockFwht(float* x, int d, float scale) {
  for (int half = 1; half < d; half *= 2) {
    __syncthreads();
    for (int t = threadIdx.x; t < d / 2; t += blockDim.x) {
      const int i = (t / half) * 2 * half + (t % half);
      const float a = x[i];
      const float b = x[i + half];
      x[i] = __fadd_rn(a, b);
      x[i + half] = __fsub_rn(a, b);
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < d; t += blockDim.x) x[t] = __fmul_rn(x[t], scale);
  __syncthreads();
}

// Block-wide sum of an int64 (every thread gets the result). `scratch` holds >= 32 entries.
__device__ __forceinline__ long long BlockSumLL(long long v, long long* scratch) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warps = (blockDim.x + 31) / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  long long total = 0;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

// codec::DepthAllocator's count_above: steps of an object whose gain w * inc[k] exceeds x.
__device__ __forceinline__ int CountAbove(double w, double x, const double* inc, int spo, int from) {
  int k = from;
  while (k < spo && __dmul_rn(w, inc[k]) > x) ++k;
  return k;
}

// The budget of a constrained-reader scope, exactly ReaderPlan::KeyBudget / ValueBudget.
__device__ __forceinline__ long long FloorBudget(double bits, double count) {
  return static_cast<long long>(floor(__dadd_rn(__dmul_rn(bits, count), 1e-9)));
}

}  // namespace readkv::cuda::internal
