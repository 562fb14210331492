// The logical and payload ledgers of one ReadKvDecodeAttention call, summed on the device from
// the depths it chose (ReadKvDebug), so a server can keep exact ledgers without copying the
// depth schedules back every step. One thread block per (sequence, KV head); the same sums as
// ReadKvLogicalBytes and the payload term of ReadKvDecodeTraffic (traffic.cc).
#include <cuda_runtime.h>

#include <cstdint>

#include "readkv/cuda/decode_attention.h"

namespace readkv::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    Account(int heads_kv, int head_dim, int max_tokens, const int32_t* __restrict__ seq_lens,
            const uint8_t* __restrict__ key_depths, const uint8_t* __restrict__ value_depths,
            unsigned long long* totals) {
  const int row = blockIdx.x;  // b * H_kv + h
  const int64_t tokens = seq_lens[row / heads_kv];
  const int64_t blocks = (tokens + kPageTokens - 1) / kPageTokens;
  const int64_t plane_bytes = head_dim / 8;
  unsigned long long bits = 0, payload = 0;
  for (int c = threadIdx.x; c < head_dim; c += kThreads) {
    const int64_t depth = key_depths[static_cast<size_t>(row) * head_dim + c];
    bits += static_cast<unsigned long long>(depth * tokens);
    payload += static_cast<unsigned long long>(depth * blocks * 32);
  }
  for (int64_t i = threadIdx.x; i < tokens; i += kThreads) {
    const int64_t depth = value_depths[static_cast<size_t>(row) * max_tokens + i];
    bits += static_cast<unsigned long long>(depth * head_dim);
    payload += static_cast<unsigned long long>((depth * plane_bytes + 31) / 32 * 32);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    bits += __shfl_down_sync(0xffffffffu, bits, offset);
    payload += __shfl_down_sync(0xffffffffu, payload, offset);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(totals, bits);
    atomicAdd(totals + 1, payload);
  }
}

}  // namespace

cudaError_t ReadKvAccount(const DecodeShape& shape, const int32_t* seq_lens,
                          const uint8_t* key_depths, const uint8_t* value_depths,
                          unsigned long long* totals, cudaStream_t stream) {
  if (shape.batch < 1 || shape.heads_kv < 1 || shape.head_dim < 8 || shape.max_tokens < 1 ||
      seq_lens == nullptr || key_depths == nullptr || value_depths == nullptr ||
      totals == nullptr) {
    return cudaErrorInvalidValue;
  }
  Account<<<shape.batch * shape.heads_kv, kThreads, 0, stream>>>(
      shape.heads_kv, shape.head_dim, shape.max_tokens, seq_lens, key_depths, value_depths,
      totals);
  return cudaGetLastError();
}

}  // namespace readkv::cuda
