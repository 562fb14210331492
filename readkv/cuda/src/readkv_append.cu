// ReadKV encode/append (docs/readkv.md, "Write path"): one thread block per (token, KV head),
// one thread per channel. Transform (signs, FWHT, scale: the codec's exact float operations),
// standardise with the frozen calibration, encode on the Lloyd tree by the codec's branch-light
// search over the sorted leaf boundaries, then write the bit planes: key bits with atomicOr
// (tokens of one page are appended by different blocks), value planes as whole 32-bit words
// gathered by warp ballots (channel c of a plane is bit c % 32 of word c / 32, little-endian,
// which is bit c % 8 of byte c / 8).
#include <cuda_runtime.h>

#include <cstdint>

#include "readkv/cuda/decode_attention.h"
#include "readkv_device.cuh"

namespace readkv::cuda {
namespace {

constexpr int kMaxBoundaries = (1 << kMaxStoreBits) - 1;

__device__ __forceinline__ unsigned Encode(float z, const float* boundaries, int W) {
  if (isnan(z)) return 0;
  unsigned code = 0;
  for (unsigned step = 1u << (W - 1); step > 0; step >>= 1) {
    code += step * static_cast<unsigned>(z >= boundaries[code + step - 1]);
  }
  return code;
}

__global__ void __launch_bounds__(128)
    Append(int heads_kv, int head_dim, int max_pages, const float* __restrict__ keys,
           const float* __restrict__ values, const int32_t* __restrict__ seq_ids,
           const int32_t* __restrict__ positions, const int32_t* __restrict__ page_table,
           ReadKvCodec codec, float transform_scale, uint8_t* key_planes,
           uint8_t* value_planes) {
  const int k = blockIdx.x;
  const int h = blockIdx.y;
  const int d = head_dim;
  const int c = threadIdx.x;
  const int W = codec.store_bits;
  __shared__ float xk[128], xv[128];
  __shared__ float boundaries[kMaxBoundaries];
  for (int j = c; j < (1 << W) - 1; j += blockDim.x) boundaries[j] = codec.boundaries[j];
  const size_t channel = static_cast<size_t>(h) * d + c;
  const size_t in = (static_cast<size_t>(k) * heads_kv + h) * d + c;
  const float key = keys[in], value = values[in];
  xk[c] = codec.key_signs[channel] < 0.0f ? -key : key;
  xv[c] = codec.value_signs[channel] < 0.0f ? -value : value;
  internal::BlockFwht(xk, d, transform_scale);
  internal::BlockFwht(xv, d, transform_scale);
  const unsigned kcode = Encode(
      __fdiv_rn(__fsub_rn(xk[c], codec.key_mean[channel]), codec.key_std[channel]), boundaries, W);
  const unsigned vcode =
      Encode(__fdiv_rn(__fsub_rn(xv[c], codec.value_mean[channel]), codec.value_std[channel]),
             boundaries, W);

  const int position = positions[k];
  const int page = page_table[static_cast<size_t>(seq_ids[k]) * max_pages + position / kPageTokens];
  const int slot = position % kPageTokens;
  const size_t head_page = static_cast<size_t>(page) * heads_kv + h;
  // Keys: plane p of (page, head, channel) is 8 words of 32 bits; token slot -> word slot / 32.
  auto* key_words = reinterpret_cast<unsigned*>(key_planes) +
                    ((head_page * d + c) * W) * 8 + slot / 32;
  for (int p = 0; p < W; ++p) {
    if ((kcode >> (W - 1 - p)) & 1u) atomicOr(key_words + p * 8, 1u << (slot % 32));
  }
  // Values: token-major [slot][plane][d / 8 bytes].
  auto* value_words = reinterpret_cast<unsigned*>(
      value_planes + (head_page * kPageTokens + slot) * W * (d / 8));
  for (int p = 0; p < W; ++p) {
    const unsigned mask = __ballot_sync(0xffffffffu, (vcode >> (W - 1 - p)) & 1u);
    if (c % 32 == 0) value_words[p * (d / 32) + c / 32] = mask;
  }
}

}  // namespace

cudaError_t ReadKvAppend(const DecodeShape& shape, int tokens, const float* keys,
                         const float* values, const int32_t* seq_ids, const int32_t* positions,
                         const int32_t* page_table, const ReadKvCodec& codec,
                         const ReadKvCache& cache, cudaStream_t stream) {
  if (tokens < 0 || (shape.head_dim != 64 && shape.head_dim != 128) || shape.heads_kv < 1 ||
      shape.max_pages < 1 || codec.store_bits < 1 || codec.store_bits > kMaxStoreBits ||
      keys == nullptr || values == nullptr || seq_ids == nullptr || positions == nullptr ||
      page_table == nullptr || codec.boundaries == nullptr || codec.key_signs == nullptr ||
      codec.value_signs == nullptr || codec.key_mean == nullptr || codec.key_std == nullptr ||
      codec.value_mean == nullptr || codec.value_std == nullptr ||
      cache.key_planes == nullptr || cache.value_planes == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0) return cudaSuccess;
  const auto scale = static_cast<float>(1.0 / sqrt(static_cast<double>(shape.head_dim)));
  Append<<<dim3(tokens, shape.heads_kv), shape.head_dim, 0, stream>>>(
      shape.heads_kv, shape.head_dim, shape.max_pages, keys, values, seq_ids, positions,
      page_table, codec, scale, cache.key_planes, cache.value_planes);
  return cudaGetLastError();
}

}  // namespace readkv::cuda
