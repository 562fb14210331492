// ReadKV decode attention, internal: the constants, workspace layout and kernel arguments that
// the launches of readkv_attention.cu share (its header comment describes the launches).
// Included only by readkv_attention.cu and the other readkv_*.cuh kernel headers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "readkv/cuda/decode_attention.h"
#include "readkv_device.cuh"
#include "select_share.h"

namespace readkv::cuda::readkv_kernels {

using internal::AlignUp;
using internal::kWarp;

constexpr int kCentroids = (2 << kMaxStoreBits) - 1;  // 511 floats, depth-major
constexpr int kValueWarps = 4;
constexpr size_t kKeyPlaneWords32 = 8;  // a 32-byte key plane as 32-bit words
constexpr int kMaxKeyEntries = 128 * kMaxStoreBits;  // Key planes one row reads, at most

// The Key planes one (sequence, KV head) row reads, as the transposed Logits reader walks them:
// one list of P = sum_c t_c entries (channel by channel, least significant plane first), read
// 32 at a time. Prepare writes it once per row (the addresses are fixed before any key bit is
// read); every Logits block of the row copies it. `entry_word[e]`: (c W + p) 8, the first 32-bit
// word of entry e's plane in a page; `chan_desc[c]`: channel c packed in one word (PackChannel;
// LogitsTransposed unpacks it once per block); `group_first[g]`: the first channel whose last
// entry lies in group g (g up to and including the group count, where it is d).
struct KeyList {
  uint16_t entry_word[kMaxKeyEntries];
  unsigned chan_desc[128];
  int group_first[kMaxKeyEntries / kWarp + 1];
  int entries;
};
constexpr int kKeyListWords = sizeof(KeyList) / 4;
static_assert(sizeof(KeyList) % 4 == 0, "KeyList is copied in 32-bit words");
static_assert(sizeof(KeyList) == 2696, "traffic.cc counts a KeyList as 2696 bytes: change both");

// A channel of the entry list, packed in one word: bits 0-7 the shift of its code in the 64-bit
// window of two consecutive groups, 8-15 the code mask 2^t - 1 (LogitsTransposed derives the
// depth's table from it; the channel is the word's index).
__device__ __forceinline__ unsigned PackChannel(int shift, int t) {
  return static_cast<unsigned>(shift) | (((1u << t) - 1u) << 8);
}

// The Value cut's selection (section 3): a cluster of blocks per row (SelectShapeOf), each with
// its share of the row's importances in shared memory when they fit (select_share.h).
using internal::kSelectListBytes;
using internal::kSelectListEntries;
using internal::kSelectMaxSharedBytes;
using internal::kSelectShapes;
using internal::SelectGrid;
using internal::SelectInShared;
using internal::SelectShare;

// The Select launch's shape for a call: its index in kSelectShapes (select_share.h).
inline int SelectShapeOf(const DecodeShape& s) {
  return internal::SelectShapeFor(static_cast<long long>(s.batch) * s.heads_kv, s.max_tokens);
}

constexpr int kScanUnroll = 4;  // loads in flight per thread in the importance scan

// Allocation keys (section 1 and 3): object * 2^s + step, steps < 2^s.
constexpr int kKeyStepBits = 3;    // Key channels: key_steps <= 7
constexpr int kValueStepBits = 2;  // Value tokens: value_steps <= 3

constexpr int kMaxValueSteps = (1 << kValueStepBits) - 1;

// The Value allocator's increments inc[0..value_steps) held in registers: Select multiplies
// every token's importance by them on each pass, and loading them from global memory inside
// those loops left the multiplies waiting on each load (17% of the stall samples of an earlier
// Select kernel at the go/no-go model's shape). operator[] selects, so a runtime index stays in
// registers.
struct ValueIncrements {
  double inc[kMaxValueSteps];
  __device__ explicit ValueIncrements(const ReadKvReadPolicy& policy) {
#pragma unroll
    for (int s = 0; s < kMaxValueSteps; ++s) {
      inc[s] = s < policy.value_steps ? policy.value_increments[s] : 0.0;
    }
  }
  __device__ __forceinline__ double operator[](int s) const {
    static_assert(kMaxValueSteps == 3, "one select per further step");
    return s == 0 ? inc[0] : s == 1 ? inc[1] : inc[2];
  }
};

// Workspace layout of one call (every part 256-byte aligned).
struct Layout {
  size_t qa, bias, key_depths, key_lists, logits, chunk_ml, stats, importance, value_depths,
      partial_out, partial_mass, row_arrivals, total;
  explicit Layout(const DecodeShape& s) {
    const size_t bq = static_cast<size_t>(s.batch) * s.heads_q;
    const size_t bk = static_cast<size_t>(s.batch) * s.heads_kv;
    const size_t chunks = s.max_chunks();
    size_t at = 0;
    const auto take = [&](size_t bytes) {
      const size_t here = at;
      at += AlignUp(bytes);
      return here;
    };
    qa = take(bq * s.head_dim * 4);
    bias = take(bq * 4);
    key_depths = take(bk * s.head_dim);
    key_lists = take(bk * sizeof(KeyList));
    logits = take(bq * s.max_tokens * 4);
    chunk_ml = take(bq * chunks * 2 * 4);
    stats = take(bq * 2 * 4);
    const bool importance_in_shared =
        SelectInShared(s.max_tokens, kSelectShapes[SelectShapeOf(s)].cluster);
    importance = take(importance_in_shared ? 0 : bk * s.max_tokens * 8);
    value_depths = take(bk * s.max_tokens);
    partial_out = take(bq * chunks * s.head_dim * 4);
    partial_mass = take(bq * chunks * 4);
    row_arrivals = take(bk * 4);
    total = at;
  }
};

struct Args {
  int batch, heads_q, heads_kv, head_dim, group, max_pages, max_tokens, chunk_tokens, max_chunks;
  int store_bits;
  float attention_scale;  // 1 / sqrtf(d), as the CPU reader's
  float transform_scale;  // (float)(1 / sqrt((double)d)), as HadamardTransform's
  const float* queries;
  const int32_t* page_table;
  const int32_t* seq_lens;
  float* out;
  const uint8_t* key_planes;
  const uint8_t* value_planes;
  ReadKvCodec codec;
  ReadKvReadPolicy policy;
  // Workspace parts.
  float* qa;
  float* bias;
  uint8_t* key_depths;
  KeyList* key_lists;  // [B][H_kv]
  float* logits;
  float* chunk_ml;
  float* stats;
  double* importance;
  uint8_t* value_depths;
  float* partial_out;
  float* partial_mass;
  unsigned* row_arrivals;  // [B][H_kv]: Values blocks done with the row (Prepare zeroes them)
  ReadKvDebug debug;
};

// Every ReadKV kernel starts with this, for launches chained by programmatic dependent launch
// (sm_90; KVGATE_READKV_PDL=1): a kernel may then be scheduled while the one before it in the
// stream still runs, so it first waits for that grid to complete and flush its writes (each
// kernel waits before anything else, so this also orders it after every earlier launch), then
// lets the next kernel be scheduled: its blocks become resident as this grid's last blocks run
// and wait here in turn, instead of being launched after a full gap. Without the launch
// attribute (the default) both are no-ops.
__device__ __forceinline__ void ChainEntry() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// The block of a chunked launch, grid (chunks, H_kv, B): chunk `chunk` of KV head h of sequence
// b, whose T tokens it covers from `start`; empty when the chunk starts past the sequence's end
// (sequences are ragged, the grid is sized for the longest), and the block then returns.
struct ChunkBlock {
  int chunk, h, b, T, start;
  __device__ explicit ChunkBlock(const Args& a)
      : chunk(static_cast<int>(blockIdx.x)),
        h(static_cast<int>(blockIdx.y)),
        b(static_cast<int>(blockIdx.z)),
        T(a.seq_lens[blockIdx.z]),
        start(static_cast<int>(blockIdx.x) * a.chunk_tokens) {}
  __device__ bool empty() const { return start >= T; }
};


}  // namespace readkv::cuda::readkv_kernels
