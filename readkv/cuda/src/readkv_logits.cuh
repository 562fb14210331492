// ReadKV decode attention, launch 2 (Logits): Key codes read at the chosen channel depths, the
// approximate logits and each chunk's softmax statistics. Two readers: per bit, and bit planes
// transposed in registers over 1, 2 or 4 pages per pass. Included only by readkv_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv_attention_state.cuh"

namespace readkv::cuda::readkv_kernels {

// ---- 2. Logits -------------------------------------------------------------------------------

// What the logits kernels share: the inputs every thread reads (a_qc, bias), the running
// softmax statistics of a thread's tokens, and the chunk's (max, sum of exps). Each reader keeps
// its centroids in its own form (the per-bit one as they come, LogitsTransposed in aligned
// per-depth tables, LogitsMma as f16 pairs).
template <int G>
struct LogitsShared {
  alignas(16) float qa[128][G];  // a channel's row in one shared load where G >= 4
  float bias[G];
  float red_m[G][kPageTokens / kWarp], red_l[G][kPageTokens / kWarp];
};

template <int G>
__device__ void LoadLogitsInputs(const Args& a, size_t first_q, LogitsShared<G>& sh) {
  const int d = a.head_dim;
  for (int j = threadIdx.x; j < d * G; j += blockDim.x) {
    const int q = j / d, c = j % d;
    sh.qa[c][q] = a.qa[(first_q + q) * d + c];
  }
  if (threadIdx.x < G) sh.bias[threadIdx.x] = a.bias[first_q + threadIdx.x];
}

// A thread's running (max, sum of exps) per query head, before its first token.
template <int G>
__device__ __forceinline__ void StartStats(float (&m)[G], float (&l)[G]) {
#pragma unroll
  for (int q = 0; q < G; ++q) {
    m[q] = -INFINITY;
    l[q] = 0.0f;
  }
}

// Writes a token's logits and folds them into the thread's running (max, sum of exps), with one
// exponential: e = exp(-|logit - m|) is the new term when the max stays and the old sum's factor
// when the logit becomes the max (m = -inf at first: e = 0, l = 1). __expf (ex2.approx, relative
// error ~1e-6 here) instead of expf's ~20 instructions: the statistics only normalise p.
template <int G>
__device__ __forceinline__ void EmitLogits(const Args& a, size_t first_q, int token,
                                           const float (&s)[G], const LogitsShared<G>& sh,
                                           float (&m)[G], float (&l)[G]) {
#pragma unroll
  for (int q = 0; q < G; ++q) {
    const float logit = sh.bias[q] + s[q];
    a.logits[(first_q + q) * a.max_tokens + token] = logit;
    const float e = __expf(-fabsf(logit - m[q]));
    l[q] = logit > m[q] ? fmaf(l[q], e, 1.0f) : l[q] + e;
    m[q] = fmaxf(m[q], logit);
  }
}

// Combines the threads' (max, sum of exps) over the block into the chunk's.
template <int G>
__device__ void WriteChunkStats(const Args& a, size_t first_q, int chunk, const float (&m)[G],
                                const float (&l)[G], LogitsShared<G>& sh) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int q = 0; q < G; ++q) {
    const float mq = internal::WarpMax(m[q]);
    float lq = (m[q] == -INFINITY) ? 0.0f : l[q] * expf(m[q] - mq);
    lq = internal::WarpSum(lq);
    if (lane == 0) {
      sh.red_m[q][warp] = mq;
      sh.red_l[q][warp] = lq;
    }
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int q = threadIdx.x;
    float mq = -INFINITY;
    for (int wv = 0; wv < kPageTokens / kWarp; ++wv) mq = fmaxf(mq, sh.red_m[q][wv]);
    float lq = 0.0f;
    for (int wv = 0; wv < kPageTokens / kWarp; ++wv) {
      if (sh.red_m[q][wv] != -INFINITY) lq += sh.red_l[q][wv] * expf(sh.red_m[q][wv] - mq);
    }
    float* ml = a.chunk_ml + ((first_q + q) * a.max_chunks + chunk) * 2;
    ml[0] = mq;
    ml[1] = lq;
  }
}

template <int G>
__global__ void __launch_bounds__(kPageTokens) Logits(Args a) {
  ChainEntry();
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int chunk = blk.chunk, h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const int d = a.head_dim;
  const int W = a.store_bits;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  __shared__ LogitsShared<G> sh;
  __shared__ float centroids[kCentroids];  // depth t's at 2^t - 1
  __shared__ uint8_t depth[128];

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  LoadLogitsInputs(a, first_q, sh);
  for (int j = tid; j < (2 << W) - 1; j += blockDim.x) centroids[j] = a.codec.centroids[j];
  for (int j = tid; j < d; j += blockDim.x) {
    depth[j] = a.key_depths[(static_cast<size_t>(b) * a.heads_kv + h) * d + j];
  }
  __syncthreads();

  float m[G], l[G];
  StartStats(m, l);
  const int end = min(T, start + a.chunk_tokens);
  const int32_t* pages = a.page_table + static_cast<size_t>(b) * a.max_pages;
  const size_t plane_words = kKeyPlaneWords32;
  for (int page_start = start; page_start < end; page_start += kPageTokens) {
    const int token = page_start + tid;
    const int page = pages[page_start / kPageTokens];
    // Word (tid / 32) of every plane of this (page, head): 8 words of 32 bits per plane.
    const uint32_t* words = reinterpret_cast<const uint32_t*>(a.key_planes) +
                            ((static_cast<size_t>(page) * a.heads_kv + h) * d) * W * plane_words +
                            tid / kWarp;
    float s[G];
#pragma unroll
    for (int q = 0; q < G; ++q) s[q] = 0.0f;
    for (int c = 0; c < d; ++c) {
      const int t = depth[c];
      if (t == 0) continue;
      const uint32_t* plane = words + static_cast<size_t>(c) * W * plane_words;
      uint32_t code = 0;
      for (int p = 0; p < t; ++p) {
        code = (code << 1) | ((__ldg(plane + p * plane_words) >> lane) & 1u);
      }
      const float centroid = centroids[(1 << t) - 1 + code];
#pragma unroll
      for (int q = 0; q < G; ++q) s[q] = fmaf(sh.qa[c][q], centroid, s[q]);
    }
    if (token < end) EmitLogits(a, first_q, token, s, sh, m, l);
  }
  WriteChunkStats(a, first_q, chunk, m, l, sh);
}

// The same logits with the bit planes transposed in registers: a warp owns 32 tokens of a
// page; the planes to read form one list of P = sum_c t_c entries (channel by channel, least
// significant plane first), loaded 32 at a time (lane e loads entry e's 32-bit word of the
// warp's tokens) and transposed by five shuffle butterflies, after which lane j holds bit e of
// entry e for its token. A channel's code is then one shift of a 64-bit window over two
// consecutive groups: ~1 instruction per plane bit instead of ~4.
// Each butterfly swaps blocks of s bits between lane pairs: a lane whose bit s is clear keeps its
// bits under m and takes its partner's bits under m moved up by s; a lane whose bit s is set
// keeps the bits under ~m and takes the partner's bits under ~m moved down by s. For s = 16 and 8
// the blocks are bytes, and one byte permute of (own word, partner's word) does both moves. For
// s = 4, 2, 1: a rotation by s (right when set, left when clear) moves the partner's bits, whose
// wrapped-around bits land outside the mask that takes them, and one bitwise select merges. The
// lane's selectors, masks and rotations are computed once (TransposeLane), so a butterfly is a
// shuffle and a permute, or a shuffle, a rotate and a select.
struct TransposeLane {
  unsigned perm16, perm8;  // __byte_perm selectors of the 16- and 8-bit butterflies
  unsigned keep[3];        // bits a lane keeps in the 4-, 2- and 1-bit butterflies
  unsigned right[3];       // their rotations (right by s, or left by s as right by 32 - s)
  __device__ explicit TransposeLane(int lane) {
    // Bytes (x0..x3 own, y0..y3 the partner's; selector nibble i picks result byte i): clear
    // lanes make [x0 x1 y0 y1] (s = 16) and [x0 y0 x2 y2] (s = 8); set lanes [y2 y3 x2 x3] and
    // [y1 x1 y3 x3].
    perm16 = (lane & 16) != 0 ? 0x3276u : 0x5410u;
    perm8 = (lane & 8) != 0 ? 0x3715u : 0x6240u;
    const unsigned masks[3] = {0x0F0F0F0Fu, 0x33333333u, 0x55555555u};
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      const int sh = 4 >> k;
      const bool set = (lane & sh) != 0;
      keep[k] = set ? ~masks[k] : masks[k];
      right[k] = set ? sh : kWarp - sh;
    }
  }
};

// (a & m) | (b & ~m) in one lop3.
__device__ __forceinline__ unsigned BitSelect(unsigned a, unsigned b, unsigned m) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(d) : "r"(a), "r"(b), "r"(m));
  return d;
}

__device__ __forceinline__ unsigned Transpose32(unsigned x, const TransposeLane& t) {
  x = __byte_perm(x, __shfl_xor_sync(0xffffffffu, x, 16), t.perm16);
  x = __byte_perm(x, __shfl_xor_sync(0xffffffffu, x, 8), t.perm8);
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    const unsigned y = __shfl_xor_sync(0xffffffffu, x, 4 >> k);
    x = BitSelect(x, __funnelshift_r(y, y, t.right[k]), t.keep[k]);
  }
  return x;
}

// A code's centroid address from the window shifted by (shift - 2) and table_t | mask << 2:
// (bits & y & 0x3ff) | (y & ~0x3ff) in one lop3 (mask << 2 lies in bits 2..9, table_t above).
__device__ __forceinline__ unsigned CodeAddress(unsigned bits, unsigned y) {
  static_assert((4u << kMaxStoreBits) == 0x400u, "table_t's bits start at bit 10");
  unsigned d;
  asm("lop3.b32 %0, %1, %2, 0x3ff, 0xC4;" : "=r"(d) : "r"(bits), "r"(y));
  return d;
}

// K pages per pass: lane j of warp w holds token 32 w + j of each of K consecutive pages, so
// the per-channel work that does not depend on the token (the descriptor, a_qc, the loop) is
// shared by K tokens. K = 1 is the one-page reader. Each page's plane words are loaded kAhead
// groups ahead of their decode. Registers capped for 3 blocks per SM (2 when G = 8, which spills
// 336 bytes under the cap of 3).
constexpr int kAhead = 2;
template <int G, int K>
__global__ void __launch_bounds__(kPageTokens, G == 8 ? 2 : 3) LogitsTransposed(Args a) {
  ChainEntry();
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int chunk = blk.chunk, h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const int d = a.head_dim;
  const int W = a.store_bits;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  __shared__ LogitsShared<G> sh;
  __shared__ KeyList list;  // the row's entry list, written by Prepare
  // The centroids of depth t in a table of their own, table_t = table + (t - 1) kTableBytes,
  // aligned to kTableBytes = 4 x 2^W_max (1 KB): the bits of table_t below it are clear, so a
  // code's centroid sits at table_t | 4 code, and 4 code is (window >> (shift - 2)) & (mask << 2)
  // (a code's shift is at least 32 - (W - 1) >= 25: it ends in the window's upper word). Channel
  // k is unpacked once from list.chan_desc[k] into chan[k] = (shift - 2, table_t | mask << 2):
  // the address is then one shift and one lop3 of the channel's two words (CodeAddress), and
  // the loop reads the next channel's words ahead (chan[d] is read, never used). The tables'
  // alignment is made at run time inside table_space.
  __shared__ uint2 chan[128 + 1];
  constexpr unsigned kTableBytes = 4u << kMaxStoreBits;
  __shared__ float table_space[(kMaxStoreBits + 1) * kTableBytes / 4];

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  LoadLogitsInputs(a, first_q, sh);
  const auto space = static_cast<unsigned>(__cvta_generic_to_shared(table_space));
  const unsigned table = (space + kTableBytes - 1) & ~(kTableBytes - 1);
  {
    float* const tables = table_space + (table - space) / 4;
    for (int j = tid; j < (2 << W) - 1; j += blockDim.x) {
      const int t = 31 - __clz(j + 1);  // centroid j is code j + 1 - 2^t of depth t
      tables[(t - 1) * (kTableBytes / 4) + j + 1 - (1 << t)] = a.codec.centroids[j];
    }
    const auto* from = reinterpret_cast<const unsigned*>(
        a.key_lists + static_cast<size_t>(b) * a.heads_kv + h);
    auto* to = reinterpret_cast<unsigned*>(&list);
    for (int j = tid; j < kKeyListWords; j += blockDim.x) to[j] = from[j];
  }
  __syncthreads();
  if (tid < d) {
    const unsigned desc = list.chan_desc[tid];
    const unsigned ones = (desc >> 8) & 0xffu;  // 2^t - 1
    const unsigned table_t = table + (__popc(ones) - 1u) * kTableBytes;
    chan[tid] = make_uint2((desc & 0xffu) - 2u, table_t | (ones << 2));
  } else if (tid == d) {
    chan[tid] = make_uint2(0u, table);
  }
  __syncthreads();
  const uint16_t* entry_word = list.entry_word;
  const int* group_first = list.group_first;
  const int P = list.entries;
  const int groups = (P + kWarp - 1) / kWarp;

  const TransposeLane transpose(lane);
  float m[G], l[G];
  StartStats(m, l);
  const int end = min(T, start + a.chunk_tokens);
  const int32_t* pages = a.page_table + static_cast<size_t>(b) * a.max_pages;
  for (int pass_start = start; pass_start < end; pass_start += K * kPageTokens) {
    const uint32_t* words[K];
    bool live[K];  // uniform over the block: page j of the pass holds tokens of the chunk
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int page_start = pass_start + j * kPageTokens;
      live[j] = page_start < end;
      const int page = pages[(live[j] ? page_start : pass_start) / kPageTokens];
      words[j] = reinterpret_cast<const uint32_t*>(a.key_planes) +
                 ((static_cast<size_t>(page) * a.heads_kv + h) * d) * W * 8 + warp;
    }
    float s[K][G];
#pragma unroll
    for (int j = 0; j < K; ++j) {
#pragma unroll
      for (int q = 0; q < G; ++q) s[j][q] = 0.0f;
    }
    unsigned prev[K];
#pragma unroll
    for (int j = 0; j < K; ++j) prev[j] = 0;
    // Each group's words are loaded kAhead groups before the group is decoded, so a decode does
    // not wait on its own loads: at the top of round grp, ahead[n] holds group grp + n's words.
    const auto load = [&](int grp, int j) {
      const int e = grp * kWarp + lane;
      return e < P && live[j] ? __ldg(words[j] + entry_word[e]) : 0u;
    };
    unsigned ahead[kAhead][K];
    int k = 0;                // the channel decoded next
    uint2 next_chan = chan[0];  // chan[k]
#pragma unroll
    for (int n = 0; n < kAhead; ++n) {
#pragma unroll
      for (int j = 0; j < K; ++j) ahead[n][j] = load(n, j);
    }
    for (int grp = 0; grp < groups; ++grp) {
      unsigned long long window[K];
      unsigned x[K];
#pragma unroll
      for (int j = 0; j < K; ++j) {
        x[j] = ahead[0][j];
#pragma unroll
        for (int n = 0; n + 1 < kAhead; ++n) ahead[n][j] = ahead[n + 1][j];
        ahead[kAhead - 1][j] = load(grp + kAhead, j);
      }
#pragma unroll
      for (int j = 0; j < K; ++j) {
        x[j] = Transpose32(x[j], transpose);
        window[j] = (static_cast<unsigned long long>(x[j]) << 32) |
                    static_cast<unsigned long long>(prev[j]);
      }
      // The group's channels: group_first[grp] is k here (the channels end in order). Unrolled
      // twice (as before the read ahead) under the launch bound of 3 blocks per SM: 79 registers
      // for G = 4, K = 4 (120 without the bound, 74 rolled: 7:2 was 0.5-1.1% slower rolled).
#pragma unroll 2
      for (const int k_end = group_first[grp + 1]; k < k_end; ++k) {
        const uint2 ch = next_chan;  // shift - 2, table_t | mask << 2
        next_chan = chan[k + 1];
        const float* qa = sh.qa[k];
#pragma unroll
        for (int j = 0; j < K; ++j) {
          const auto bits = static_cast<unsigned>(window[j] >> ch.x);
          const float centroid = internal::LoadSharedF32(CodeAddress(bits, ch.y));
#pragma unroll
          for (int q = 0; q < G; ++q) s[j][q] = fmaf(qa[q], centroid, s[j][q]);
        }
      }
#pragma unroll
      for (int j = 0; j < K; ++j) prev[j] = x[j];
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int token = pass_start + j * kPageTokens + tid;
      if (token < end) EmitLogits(a, first_q, token, s[j], sh, m, l);
    }
  }
  WriteChunkStats(a, first_q, chunk, m, l, sh);
}

}  // namespace readkv::cuda::readkv_kernels
