// TileAppend (tile_attention.h): ReadKV's append kernel (readkv_encode.cuh, the same device code
// as ReadKvAppend's: one thread block per (token, KV head), one thread per channel) with the tile
// pools' writer: each code bit goes where tile_pages.h's TileBitInPage puts it. The 16 tokens of a
// tile, appended by different blocks of one launch or of several, share every byte of it, so
// the bits are ORed in by 32-bit atomics into zeroed pages: per plane the lanes of a warp whose
// bits fall in the same word (the 16 channels of a key group share one; a value token's channels
// c and c + 8 share a byte) are grouped by their word (cooperative groups' labeled partition),
// their bits ORed together, and one lane per word issues the atomic.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "readkv/cuda/tile_attention.h"
#include "readkv_encode.cuh"
#include "tile_pages.h"

namespace readkv::cuda {
namespace {

namespace cg = cooperative_groups;

// ORs this lane's bit (of plane p, at `at` in the 32-bit words of a (page, head) block) into
// the block, one atomic per distinct word among the warp's lanes.
__device__ __forceinline__ void OrBit(unsigned* block_words, tile::TileBit at, unsigned bit) {
  const auto word = static_cast<unsigned>(at.byte / 4);
  const unsigned mask = bit << (8 * static_cast<int>(at.byte % 4) + at.bit);
  const cg::coalesced_group same_word = cg::labeled_partition(cg::coalesced_threads(), word);
  const unsigned merged = cg::reduce(same_word, mask, cg::bit_or<unsigned>());
  if (same_word.thread_rank() == 0 && merged != 0) atomicOr(block_words + word, merged);
}

// Writes a token's code bits into the (page, KV head) blocks of the two pools.
struct TileWriter {
  int heads_kv, head_dim, store_bits;
  uint8_t* key_tiles;
  uint8_t* value_tiles;

  __device__ __forceinline__ void operator()(int page, int h, int slot, int c,
                                             internal::ChannelCodes codes) const {
    const int d = head_dim, W = store_bits;
    const int64_t block = (int64_t{page} * heads_kv + h) * tile::PageHeadBytes(d, W);
    auto* key_words = reinterpret_cast<unsigned*>(key_tiles + block);
    auto* value_words = reinterpret_cast<unsigned*>(value_tiles + block);
    for (int p = 0; p < W; ++p) {
      const int shift = W - 1 - p;  // plane p: bit p from the most significant
      OrBit(key_words, tile::TileBitInPage(true, slot, c, p, d, W), (codes.key >> shift) & 1u);
      OrBit(value_words, tile::TileBitInPage(false, slot, c, p, d, W), (codes.value >> shift) & 1u);
    }
  }
};

}  // namespace

cudaError_t TileAppend(const DecodeShape& shape, int tokens, const float* keys, const float* values,
                       const int32_t* seq_ids, const int32_t* positions, const int32_t* page_table,
                       const ReadKvCodec& codec, const TileCache& cache, cudaStream_t stream) {
  const TileWriter write{shape.heads_kv, shape.head_dim, codec.store_bits, cache.key_tiles,
                         cache.value_tiles};
  return internal::LaunchAppend(shape, tokens, keys, values, seq_ids, positions, page_table, codec,
                                cache.key_tiles != nullptr && cache.value_tiles != nullptr, write,
                                stream);
}

}  // namespace readkv::cuda
