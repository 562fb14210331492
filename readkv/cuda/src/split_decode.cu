#include "split_decode.cuh"

namespace readkv::cuda::internal {
namespace {

__global__ void CombineChunks(int heads_q, int head_dim, int max_chunks, int chunk_tokens,
                              const int32_t* __restrict__ seq_lens,
                              const float* __restrict__ partial_out,
                              const float* __restrict__ partial_ml,
                              const float* __restrict__ out_scales, int group,
                              float* __restrict__ out) {
  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int c = threadIdx.x;
  const int chunks = (seq_lens[b] + chunk_tokens - 1) / chunk_tokens;
  const size_t row = static_cast<size_t>(b) * heads_q + h;
  const float* ml = partial_ml + row * max_chunks * 2;
  float m = -INFINITY;
  for (int k = 0; k < chunks; ++k) m = fmaxf(m, ml[2 * k]);
  float l = 0.0f, acc = 0.0f;
  const float* po = partial_out + row * max_chunks * head_dim;
  for (int k = 0; k < chunks; ++k) {
    const float w = ml[2 * k] == -INFINITY ? 0.0f : expf(ml[2 * k] - m);
    l += w * ml[2 * k + 1];
    acc += w * po[static_cast<size_t>(k) * head_dim + c];
  }
  const float scale = out_scales != nullptr ? out_scales[h / group] : 1.0f;
  out[row * head_dim + c] = scale * acc / l;
}

}  // namespace

cudaError_t LaunchCombineChunks(const DecodeShape& shape, const int32_t* seq_lens,
                                const float* partial_out, const float* partial_ml,
                                const float* out_scales, float* out, cudaStream_t stream) {
  CombineChunks<<<dim3(shape.heads_q, shape.batch), shape.head_dim, 0, stream>>>(
      shape.heads_q, shape.head_dim, shape.max_chunks(), shape.chunk_tokens, seq_lens,
      partial_out, partial_ml, out_scales, shape.group(), out);
  return cudaGetLastError();
}

}  // namespace readkv::cuda::internal
