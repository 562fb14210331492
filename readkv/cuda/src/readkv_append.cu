// ReadKV encode/append (docs/readkv.md, "Write path"): the shared append kernel
// (readkv_encode.cuh: one thread block per (token, KV head), one thread per channel, the codec's
// codes) with the bit planes' writer: key bits with atomicOr (tokens of one page are appended by
// different blocks), value planes as whole 32-bit words gathered by warp ballots (channel c of a
// plane is bit c % 32 of word c / 32, little-endian, which is bit c % 8 of byte c / 8).
#include <cuda_runtime.h>

#include <cstdint>

#include "readkv/cuda/decode_attention.h"
#include "readkv_encode.cuh"

namespace readkv::cuda {
namespace {

struct PlaneWriter {
  int heads_kv, head_dim, store_bits;
  uint8_t* key_planes;
  uint8_t* value_planes;

  __device__ __forceinline__ void operator()(int /*token*/, int page, int h, int slot, int c,
                                             internal::ChannelCodes codes) const {
    const int d = head_dim, W = store_bits;
    const size_t head_page = static_cast<size_t>(page) * heads_kv + h;
    // Keys: plane p of (page, head, channel) is 8 words of 32 bits; token slot -> word slot / 32.
    auto* key_words =
        reinterpret_cast<unsigned*>(key_planes) + ((head_page * d + c) * W) * 8 + slot / 32;
    for (int p = 0; p < W; ++p) {
      if ((codes.key >> (W - 1 - p)) & 1u) atomicOr(key_words + p * 8, 1u << (slot % 32));
    }
    // Values: token-major [slot][plane][d / 8 bytes].
    auto* value_words =
        reinterpret_cast<unsigned*>(value_planes + (head_page * kPageTokens + slot) * W * (d / 8));
    for (int p = 0; p < W; ++p) {
      const unsigned mask = __ballot_sync(0xffffffffu, (codes.value >> (W - 1 - p)) & 1u);
      if (c % 32 == 0) value_words[p * (d / 32) + c / 32] = mask;
    }
  }
};

}  // namespace

cudaError_t ReadKvAppend(const DecodeShape& shape, int tokens, const float* keys,
                         const float* values, const int32_t* seq_ids, const int32_t* positions,
                         const int32_t* page_table, const ReadKvCodec& codec,
                         const ReadKvCache& cache, cudaStream_t stream) {
  const PlaneWriter write{shape.heads_kv, shape.head_dim, codec.store_bits, cache.key_planes,
                          cache.value_planes};
  return internal::LaunchAppend(shape, tokens, keys, values, seq_ids, positions, page_table, codec,
                                cache.key_planes != nullptr && cache.value_planes != nullptr, write,
                                stream);
}

}  // namespace readkv::cuda
