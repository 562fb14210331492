// ReadKV's device encode and append kernel (docs/readkv.md, "Write path"): TileAppend's
// (tile_append.cu), bit-identical to the codec, with the tile pools' writer as a functor (where a
// code's bits go is the writer's business). A thread block per (token, KV head), a thread per
// channel: transform (signs, FWHT, scale: the codec's exact float operations), standardise with
// the frozen calibration, encode on the Lloyd tree by the codec's branch-light search over the
// sorted leaf boundaries, then the writer. Internal; device code and its launcher.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv/cuda/decode_attention.h"
#include "readkv_device.cuh"

namespace readkv::cuda::internal {

inline constexpr int kMaxBoundaries = (1 << kMaxStoreBits) - 1;

// The W-bit code of z: the number of sorted leaf boundaries <= z (NaN: 0).
__device__ __forceinline__ unsigned EncodeCode(float z, const float* boundaries, int W) {
  if (isnan(z)) return 0;
  unsigned code = 0;
  for (unsigned step = 1u << (W - 1); step > 0; step >>= 1) {
    code += step * static_cast<unsigned>(z >= boundaries[code + step - 1]);
  }
  return code;
}

// The key and value codes of channel threadIdx.x of token `token` (row of keys / values
// [tokens][H_kv][d]) at KV head h. Called by every thread of a block of head_dim threads
// (<= 128; it synchronises the block).
struct ChannelCodes {
  unsigned key = 0, value = 0;
  float key_z = 0.0f, value_z = 0.0f;  // the standardised values the codes encode
};
__device__ __forceinline__ ChannelCodes EncodeChannel(int heads_kv, int head_dim, int token, int h,
                                                      const float* __restrict__ keys,
                                                      const float* __restrict__ values,
                                                      const ReadKvCodec& codec,
                                                      float transform_scale) {
  const int d = head_dim;
  const int c = threadIdx.x;
  const int W = codec.store_bits;
  __shared__ float xk[128], xv[128];
  __shared__ float boundaries[kMaxBoundaries];
  for (int j = c; j < (1 << W) - 1; j += blockDim.x) boundaries[j] = codec.boundaries[j];
  const size_t channel = static_cast<size_t>(h) * d + c;
  const size_t in = (static_cast<size_t>(token) * heads_kv + h) * d + c;
  const float key = keys[in], value = values[in];
  xk[c] = codec.key_signs[channel] < 0.0f ? -key : key;
  xv[c] = codec.value_signs[channel] < 0.0f ? -value : value;
  BlockFwht(xk, d, transform_scale);
  BlockFwht(xv, d, transform_scale);
  ChannelCodes codes;
  codes.key_z = __fdiv_rn(__fsub_rn(xk[c], codec.key_mean[channel]), codec.key_std[channel]);
  codes.value_z =
      __fdiv_rn(__fsub_rn(xv[c], codec.value_mean[channel]), codec.value_std[channel]);
  codes.key = EncodeCode(codes.key_z, boundaries, W);
  codes.value = EncodeCode(codes.value_z, boundaries, W);
  return codes;
}

// What the append kernel reads (tile_attention.h, TileAppend): tokens [n][H_kv][d].
struct AppendInputs {
  int heads_kv, head_dim, max_pages;
  const float* keys;
  const float* values;
  const int32_t* seq_ids;
  const int32_t* positions;
  const int32_t* page_table;
  ReadKvCodec codec;
  float transform_scale;  // (float)(1 / sqrt((double)d)), as HadamardTransform's
};

// Grid (tokens, H_kv) x d: token blockIdx.x's codes at KV head blockIdx.y, then
// write(token, page, h, slot, channel, codes) by every thread of the block (page through the page
// table, slot = position % 256; a writer may synchronise the block). The writer is a device
// functor: where the bits go is its business.
template <typename Writer>
__global__ void __launch_bounds__(128) AppendKernel(AppendInputs in, Writer write) {
  const int k = blockIdx.x;
  const int h = blockIdx.y;
  const ChannelCodes codes = EncodeChannel(in.heads_kv, in.head_dim, k, h, in.keys, in.values,
                                           in.codec, in.transform_scale);
  const int position = in.positions[k];
  const int page =
      in.page_table[static_cast<size_t>(in.seq_ids[k]) * in.max_pages + position / kPageTokens];
  write(k, page, h, position % kPageTokens, static_cast<int>(threadIdx.x), codes);
}

// The launchers' common checks and launch: cudaErrorInvalidValue unless head_dim is 64 or 128,
// heads_kv and max_pages positive, store_bits in 1..8, every input and codec pointer the encode
// reads set and `outputs_ok`; nothing for 0 tokens; else the launch's status.
template <typename Writer>
cudaError_t LaunchAppend(const DecodeShape& shape, int tokens, const float* keys,
                         const float* values, const int32_t* seq_ids, const int32_t* positions,
                         const int32_t* page_table, const ReadKvCodec& codec, bool outputs_ok,
                         const Writer& write, cudaStream_t stream) {
  const bool ok =
      tokens >= 0 && (shape.head_dim == 64 || shape.head_dim == 128) && shape.heads_kv >= 1 &&
      shape.max_pages >= 1 && codec.store_bits >= 1 && codec.store_bits <= kMaxStoreBits &&
      keys != nullptr && values != nullptr && seq_ids != nullptr && positions != nullptr &&
      page_table != nullptr && codec.boundaries != nullptr && codec.key_signs != nullptr &&
      codec.value_signs != nullptr && codec.key_mean != nullptr && codec.key_std != nullptr &&
      codec.value_mean != nullptr && codec.value_std != nullptr && outputs_ok;
  if (!ok) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  const auto scale = static_cast<float>(1.0 / sqrt(static_cast<double>(shape.head_dim)));
  const AppendInputs in{shape.heads_kv, shape.head_dim, shape.max_pages, keys,  values,
                        seq_ids,        positions,      page_table,      codec, scale};
  AppendKernel<<<dim3(tokens, shape.heads_kv), shape.head_dim, 0, stream>>>(in, write);
  return cudaGetLastError();
}

}  // namespace readkv::cuda::internal
