// Shared pieces of the split (flash-decoding) decode kernels: shape checks, warp
// reductions, and the kernel that combines the dense and FP8 kernels' partials. Internal to
// readkv/cuda.
//
// Partials of the dense and FP8 kernels (workspace), S = SplitWork::slots, W = 4 warps:
//   partial_out [B][H_q][S][W][d] float  sum_i exp(s_i - m) v_i over a warp's tokens of a head
//                                        in one block (unnormalised)
//   partial_ml  [B][H_q][S][W][2] float  m (max logit, -inf when the warp saw no token), l (sum
//                                        of exps); slots of blocks that held no tile are unset
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "readkv/cuda/decode_attention.h"
#include "split_work.h"

namespace readkv::cuda::internal {

inline constexpr int kWarp = 32;

inline bool ValidShape(const DecodeShape& s) {
  const int g = s.heads_kv > 0 ? s.heads_q / s.heads_kv : 0;
  return s.batch >= 1 && s.heads_kv >= 1 && s.heads_q == g * s.heads_kv &&
         (g == 1 || g == 2 || g == 4 || g == 8) && (s.head_dim == 64 || s.head_dim == 128) &&
         s.max_pages >= 1 && s.max_tokens >= 1 && s.min_tokens >= 0 &&
         s.min_tokens <= s.max_tokens &&
         s.max_tokens <= static_cast<int64_t>(s.max_pages) * kPageTokens;
}

inline size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline SplitWork WorkspaceSplit(const DecodeShape& s) {
  return MakeSplitWork(s.batch, s.heads_kv, s.max_tokens, kMaxSplitBlocks);
}
inline size_t PartialOutBytes(const DecodeShape& s) {
  return AlignUp(static_cast<size_t>(s.batch) * s.heads_q * WorkspaceSplit(s).slots *
                 kSplitWarpsPerBlock * s.head_dim * 4);
}
inline size_t PartialMlBytes(const DecodeShape& s) {
  return AlignUp(static_cast<size_t>(s.batch) * s.heads_q * WorkspaceSplit(s).slots *
                 kSplitWarpsPerBlock * 2 * 4);
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

// kernel<<<grid, block, shared, stream>>>(args...), with programmatic dependent launch when
// `chained` (the kernel then starts with griddepcontrol.wait); returns the launch's status.
template <typename... Params, typename... Actual>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                   cudaStream_t stream, bool chained, Actual&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = chained ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Actual>(args)...);
}

// Combines a head's partials into out: one launch, grid (H_q, B), d threads per block.
// out[b][h][c] = out_scales[h / group] * sum_k e^{m_k - M} acc_k[c] / sum_k e^{m_k - M} l_k over
// the partials of the blocks that held tiles of the head (out_scales may be null: scale 1).
cudaError_t LaunchCombineSplits(const DecodeShape& shape, const SplitWork& work,
                                const int32_t* seq_lens, const float* partial_out,
                                const float* partial_ml, const float* out_scales, float* out,
                                cudaStream_t stream);

}  // namespace readkv::cuda::internal
