// 2^x on the SFU, shared by the dense/FP8 split kernels and the tile reader. Internal.
#pragma once

#include <cuda_runtime.h>

namespace readkv::cuda::internal {

// 2^x by the SFU (ex2.approx.ftz: relative error ~2^-22, 2^-inf = 0), one instruction.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace readkv::cuda::internal
