// TileAppend (tile_attention.h): ReadKV's append kernel (readkv_encode.cuh: one thread block per
// (token, KV head), one thread per channel, the codec's codes) with the tile pools' writer: each
// code bit goes where tile_pages.h's TileBitInPage puts it. The 16 tokens of a tile, appended by
// different blocks of one launch or of several, share every byte of it, so the bits are ORed in
// by 32-bit atomics into zeroed pages: per plane the lanes of a warp whose bits fall in the same
// word (the 16 channels of a key group share one; a value token's channels c and c + 8 share a
// byte) are grouped by their word (cooperative groups' labeled partition), their bits ORed
// together, and one lane per word issues the atomic.
// With outlier pools (tile_attention.h, TileCache) the writer also stages each (token, head,
// kind)'s selected entries in the workspace (ranks in shared memory, tile_outliers.h), and a
// second kernel appends them to the page blocks, one thread per (run of a page's tokens in the
// launch, head, kind), in position order (AppendToPageBlock). Byte keys (TileCache::byte_keys):
// each key element is one byte of its own, written with a plain store.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "readkv/cuda/tile_attention.h"
#include "readkv_encode.cuh"
#include "tile_outliers.h"
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

// The staging of a launch's selected outliers (TileAppendOutlierWorkspaceBytes): entries
// [tokens][H_kv][2][cap] in rank order, then counts [tokens][H_kv][2].
struct OutlierStaging {
  int cap = 0;
  float threshold = 0.0f;
  uint32_t* entries = nullptr;
  uint32_t* counts = nullptr;
  unsigned long long* dropped = nullptr;  // TileCache::outlier_dropped
  __device__ __forceinline__ size_t Row(int token, int heads_kv, int h, int kind) const {
    return (static_cast<size_t>(token) * heads_kv + h) * 2 + kind;
  }
};

OutlierStaging StagingOf(const TileCache& cache, int tokens, int heads_kv) {
  OutlierStaging s;
  if (cache.key_outlier_pages == nullptr || cache.outlier_workspace == nullptr) return s;
  s.cap = cache.outlier_cap;
  s.threshold = cache.outlier_threshold;
  s.entries = static_cast<uint32_t*>(cache.outlier_workspace);
  s.counts = s.entries + static_cast<size_t>(tokens) * heads_kv * 2 * s.cap;
  s.dropped = cache.outlier_dropped;
  return s;
}

// Stages channel c's key and value outliers of token `token` (all threads of the block call it):
// codec::SelectOutliers' choice, in rank order, z as fp16 (round to nearest even, as
// codec::FloatToHalf for every finite z); counts the values past the cap.
__device__ __forceinline__ void StageOutliers(const OutlierStaging& s, int token, int heads_kv,
                                              int h, int slot, int c, int d,
                                              internal::ChannelCodes codes) {
  __shared__ float abs_z[2][128];
  const float z[2] = {codes.key_z, codes.value_z};
  bool beyond[2];
  for (int kind = 0; kind < 2; ++kind) {
    beyond[kind] = fabsf(z[kind]) > s.threshold;  // NaN: never
    abs_z[kind][c] = beyond[kind] ? fabsf(z[kind]) : -1.0f;
  }
  __syncthreads();
  for (int kind = 0; kind < 2; ++kind) {
    const size_t row = s.Row(token, heads_kv, h, kind);
    if (beyond[kind]) {
      const int rank = tile::OutlierRank(abs_z[kind], d, c);
      if (rank < s.cap) {
        s.entries[row * s.cap + rank] = tile::PackOutlierEntry(
            slot % 16, c, __half_as_ushort(__float2half_rn(z[kind])));
      }
    }
    const int n = __syncthreads_count(beyond[kind]);
    if (c == 0) {
      s.counts[row] = static_cast<uint32_t>(n < s.cap ? n : s.cap);
      if (n > s.cap) atomicAdd(s.dropped, static_cast<unsigned long long>(n - s.cap));
    }
  }
}

// codec::EncodeKeyByte's arithmetic (key_bytes.h): clamp(floor(32 z) + 128, 0, 255), NaN 0.
__device__ __forceinline__ uint8_t EncodeKeyByte(float z) {
  if (z != z) return 0;
  const float code = floorf(__fmul_rn(z, 32.0f)) + 128.0f;
  return static_cast<uint8_t>(fminf(fmaxf(code, 0.0f), 255.0f));
}

// Writes a token's code bits into the (page, KV head) blocks of the two pools, and with lists
// stages its outliers. Byte keys: the key's one byte, a plain store (no other token writes it).
struct TileWriter {
  int heads_kv, head_dim, store_bits;
  uint8_t* key_tiles;
  uint8_t* value_tiles;
  OutlierStaging lists;
  bool byte_keys;

  __device__ __forceinline__ void operator()(int token, int page, int h, int slot, int c,
                                             internal::ChannelCodes codes) const {
    if (lists.cap > 0) StageOutliers(lists, token, heads_kv, h, slot, c, head_dim, codes);
    const int d = head_dim, W = store_bits;
    const int64_t block = (int64_t{page} * heads_kv + h) * tile::PageHeadBytes(d, W);
    auto* key_words = reinterpret_cast<unsigned*>(key_tiles + block);
    auto* value_words = reinterpret_cast<unsigned*>(value_tiles + block);
    if (byte_keys) key_tiles[block + tile::KeyByteInPage(slot, c, d)] = EncodeKeyByte(codes.key_z);
    for (int p = 0; p < W; ++p) {
      const int shift = W - 1 - p;  // plane p: bit p from the most significant
      if (!byte_keys) {  // uniform over the block
        OrBit(key_words, tile::TileBitInPage(true, slot, c, p, d, W), (codes.key >> shift) & 1u);
      }
      OrBit(value_words, tile::TileBitInPage(false, slot, c, p, d, W), (codes.value >> shift) & 1u);
    }
  }
};

// A thread per (launch token, KV head, kind); the first token of each run of a page's tokens
// appends the run's staged entries to the page block in launch order (= position order).
__global__ void AppendOutliersKernel(int tokens, int heads_kv, int max_pages,
                                     const int32_t* seq_ids, const int32_t* positions,
                                     const int32_t* page_table, uint32_t* key_pages,
                                     uint32_t* value_pages, OutlierStaging s) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{tokens} * heads_kv * 2) return;
  const int kind = static_cast<int>(i % 2), h = static_cast<int>(i / 2 % heads_kv);
  const int k = static_cast<int>(i / (2 * heads_kv));
  const int seq = seq_ids[k], column = positions[k] / kPageTokens;
  if (k > 0 && seq_ids[k - 1] == seq && positions[k - 1] / kPageTokens == column) return;
  const int64_t page = page_table[int64_t{seq} * max_pages + column];
  uint32_t* block = (kind == 0 ? key_pages : value_pages) + tile::PageOutlierBlockAt(page, heads_kv, h);
  unsigned long long over_budget = 0, out_of_order = 0;
  for (int j = k; j < tokens && seq_ids[j] == seq && positions[j] / kPageTokens == column; ++j) {
    const size_t row = s.Row(j, heads_kv, h, kind);
    const int dropped = tile::AppendToPageBlock(block, positions[j] % kPageTokens,
                                                s.entries + row * s.cap,
                                                static_cast<int>(s.counts[row]));
    if (dropped < 0) {
      ++out_of_order;
    } else {
      over_budget += static_cast<unsigned long long>(dropped);
    }
  }
  if (over_budget > 0) atomicAdd(s.dropped + 1, over_budget);
  if (out_of_order > 0) atomicAdd(s.dropped + 2, out_of_order);
}

}  // namespace

size_t TileAppendOutlierWorkspaceBytes(int tokens, int heads_kv, int cap) {
  if (tokens <= 0 || heads_kv <= 0 || cap <= 0) return 0;
  return static_cast<size_t>(tokens) * heads_kv * 2 * (static_cast<size_t>(cap) + 1) *
         sizeof(uint32_t);
}

cudaError_t TileAppend(const DecodeShape& shape, int tokens, const float* keys, const float* values,
                       const int32_t* seq_ids, const int32_t* positions, const int32_t* page_table,
                       const ReadKvCodec& codec, const TileCache& cache, cudaStream_t stream) {
  const bool has_lists = cache.key_outlier_pages != nullptr || cache.value_outlier_pages != nullptr;
  const bool lists_ok =
      !has_lists ||
      (cache.key_outlier_pages != nullptr && cache.value_outlier_pages != nullptr &&
       cache.outlier_cap >= 1 && cache.outlier_cap <= 16 && std::isfinite(cache.outlier_threshold) &&
       cache.outlier_threshold > 0.0f && cache.outlier_workspace != nullptr &&
       cache.outlier_dropped != nullptr);
  const OutlierStaging staging = StagingOf(cache, tokens, shape.heads_kv);
  const TileWriter write{shape.heads_kv, shape.head_dim, codec.store_bits, cache.key_tiles,
                         cache.value_tiles, staging, cache.byte_keys};
  const bool keys_ok = !cache.byte_keys || codec.store_bits == 8;
  const cudaError_t status = internal::LaunchAppend(
      shape, tokens, keys, values, seq_ids, positions, page_table, codec,
      cache.key_tiles != nullptr && cache.value_tiles != nullptr && lists_ok && keys_ok, write,
      stream);
  if (status != cudaSuccess || !has_lists || tokens == 0) return status;
  constexpr int kThreads = 128;
  const int64_t threads = int64_t{tokens} * shape.heads_kv * 2;
  AppendOutliersKernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0,
                         stream>>>(tokens, shape.heads_kv, shape.max_pages, seq_ids, positions,
                                   page_table, cache.key_outlier_pages, cache.value_outlier_pages,
                                   staging);
  return cudaGetLastError();
}

}  // namespace readkv::cuda
