// ReadKV decode attention, launch 2 (Logits) on tensor cores, with the shallow Key channels read
// without tables. Included only by readkv_attention.cu.
//
// The Lloyd tree is antisymmetric (the centroid of a code's complement is minus its centroid,
// codebook.cc), so with s_p = +-1 the bit of plane p, the centroids of depths 1 and 2 are
// linear in the bits: c(b0) = c1 s0 and c(b0 b1) = w0 s0 + w1 s1, w0 = (c11 + c10) / 2,
// w1 = (c11 - c10) / 2 (depth 3 already needs the product s0 s1 s2). A channel read to depth
// t <= 2 is therefore t "sign features", plane p with weight a_qc w_p, and its part of the logits
// is a product of a 0/1 matrix (tokens x planes, the bits b = (s + 1) / 2, exact in f16) with the
// weights 2 a_qc w_p, less sum a_qc w_p (added to the bias once): no table, no code. Deeper
// channels are decoded through the centroid table as (f16 value, f16 rounding error) pairs. Both
// kinds are k-tiles of one
//   S[32 tokens x cols] = A[32 x k] . B[k x cols]   (mma.sync m16n8k16, f16 in, fp32 accumulate)
// per warp and page, cols = each query head's weight rounded to f16 (hi) and its rounding error
// (lo), so a logit keeps ~22 bits like the fp32 sums of the CUDA-core readers.
//
// Memory: the block copies the planes a page's tokens need (Sum_c t_c of 32 bytes) into shared
// memory with cp.async, one page ahead of the page it computes, in k-slot order: first the sign
// features (so a lane finds its k-slots' words at fixed offsets), then each table channel's planes
// in table-slot order; warp w takes the page's tokens 32 w .. 32 w + 31, word w of every plane.
// Lane (g = lane / 4, r = lane % 4) holds A rows g, g + 8 of m-tile mt (tokens 16 mt + row) and
// k-slots 2r, 2r + 1, 2r + 8, 2r + 9 of each k-tile. Its tokens g, g + 8, g + 16, g + 24 are bit g
// of each byte of a plane word: shifted left by 7 - g, they are the bytes' top bits, and one prmt
// gives two k-slots' bits of one token as f16 0/1 with one and (sign features); for table
// channels one rotate and one mask per plane put them at the code's bit.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv_attention_state.cuh"
#include "readkv_logits.cuh"
#include "split_decode_kernel.cuh"

namespace readkv::cuda::readkv_kernels {

constexpr int kSignDepth = 2;       // channels read this deep or less are sign features
constexpr int kStageWords = 12;     // a staged entry: its 8 words, padded so k-slots miss banks
constexpr int kMaxMmaKTiles = 18;   // ceil(2 n_sign / 16) + ceil(n_table / 16), n_sign + n_table <= 128
constexpr uint8_t kPadChannel = 0xff;  // a padding k-slot: weight 0
constexpr int kMaxStagedEntries = kMaxKeyEntries + 16;  // the planes, and sign padding
constexpr uint16_t kZeroFill = 0xffff;                  // a padding sign k-slot: staged as zeros

template <int G>
struct LogitsMmaShared {
  static constexpr int kCols = G <= 4 ? 8 : 16;  // hi and lo columns, zero-padded
  static constexpr int NT = kCols / 8;            // n-tiles
  unsigned pairs[kCentroids];  // centroid as f16 (low half) and its rounding error (high half)
  float tile[kPageTokens / kWarp][kWarp][kCols];  // per warp: its tokens' S, read back by token
  uint2 bfrag[kMaxMmaKTiles][NT][kWarp];          // B fragments of every k-tile, per lane
  uint16_t source[kMaxStagedEntries];  // staged entry j: (c W + p) 8 in a page, or kZeroFill
  uint8_t sign_channel[kMaxMmaKTiles * 16];  // sign k-slot: its channel (or kPadChannel)...
  float sign_weight[kMaxMmaKTiles * 16];     // ... and w_p
  unsigned table_slot[128 + 16];  // table k-slot: first staged entry | depth << 16 | channel << 24
  int depth_count[128 / kWarp][kMaxStoreBits + 1];  // table channels of a warp at depth t
  int scan[kPageTokens / kWarp];
  float sign_bias[G];  // -sum over sign k-slots of a_qc w_p, per head
};

// Shared bytes of LogitsMma's two plane stages for a row of at most `entries` staged entries
// (its planes, at most 15 of sign padding).
inline size_t LogitsMmaStageBytes(int entries) {
  return 2 * static_cast<size_t>(entries) * kStageWords * 4;
}

// Exclusive prefix sum of x over threads 0..127 (the channels; later threads pass 0), and the
// total. Every thread of the block calls it.
__device__ __forceinline__ int ChannelScan(int x, int* scratch, int& total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int through = x;
  for (int o = 1; o < kWarp; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, through, o);
    if (lane >= o) through += y;
  }
  __syncthreads();  // scratch is free
  if (lane == kWarp - 1) scratch[warp] = through;
  __syncthreads();
  int before = 0;
  total = 0;
  for (int w = 0; w < 128 / kWarp; ++w) {
    before += w < warp ? scratch[w] : 0;
    total += scratch[w];
  }
  return before + through - x;
}

template <int G>
__global__ void __launch_bounds__(kPageTokens) LogitsMma(Args a, int max_entries) {
  ChainEntry();
  using Mm = LogitsMmaShared<G>;
  constexpr int kCols = Mm::kCols;
  constexpr int NT = Mm::NT;
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int chunk = blk.chunk, h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const int d = a.head_dim;
  const int W = a.store_bits;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, r = lane % 4;
  __shared__ LogitsShared<G> sh;
  __shared__ Mm mm;
  extern __shared__ uint4 stage_mem[];  // [2][max_entries][kStageWords words]

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  LoadLogitsInputs(a, first_q, sh);
  for (int j = tid; j < (2 << W) - 1; j += blockDim.x) {
    uint16_t hi, lo;
    internal::SplitHiLo<true>(a.codec.centroids[j], hi, lo);
    mm.pairs[j] = internal::Pack(hi, lo);
  }

  // The row's k-slots and staged entries. Thread c < d holds channel c. Sign k-slots: channel c's
  // planes follow those of the sign channels before it. Table k-slots: the table channels ranked
  // by (depth, channel); their planes are staged after the sign k-slots in that order, least
  // significant plane first.
  const float* cent = a.codec.centroids;  // depth t at cent[2^t - 1 ..]
  const bool signs1 = cent[1] == -cent[2];
  const bool signs2 = cent[3] == -cent[6] && cent[4] == -cent[5];
  const int c = tid;
  const int t = c < d ? a.key_depths[(static_cast<size_t>(b) * a.heads_kv + h) * d + c] : 0;
  const bool sign = (t == 1 && signs1) || (t == 2 && signs2);
  const bool table = t > 0 && !sign;
  int sign_slots, table_slots;
  const int sign_at = ChannelScan(sign ? t : 0, mm.scan, sign_slots);
  ChannelScan(table ? 1 : 0, mm.scan, table_slots);
  const int sign_tiles = (sign_slots + 15) / 16;
  const int table_tiles = (table_slots + 15) / 16;
  const int ktiles = sign_tiles + table_tiles;
  for (int dt = 1; dt <= W; ++dt) {
    const unsigned same = __ballot_sync(0xffffffffu, table && t == dt);
    if (warp < 128 / kWarp && lane == 0) mm.depth_count[warp][dt] = __popc(same);
  }
  const unsigned same_depth = __match_any_sync(0xffffffffu, table ? t : 0);
  if (sign) {
    for (int p = 0; p < t; ++p) {
      const int k = sign_at + p;
      mm.source[k] = static_cast<uint16_t>((c * W + p) * 8);
      mm.sign_channel[k] = static_cast<uint8_t>(c);
      mm.sign_weight[k] = t == 1 ? cent[2] : (p == 0 ? 0.5f * (cent[6] + cent[5])
                                                     : 0.5f * (cent[6] - cent[5]));
    }
  }
  for (int k = sign_slots + tid; k < sign_tiles * 16; k += blockDim.x) {
    mm.source[k] = kZeroFill;
    mm.sign_channel[k] = kPadChannel;
    mm.sign_weight[k] = 0.0f;
  }
  for (int k = table_slots + tid; k < table_tiles * 16; k += blockDim.x) {
    mm.table_slot[k] = (1u << 16) | (static_cast<unsigned>(kPadChannel) << 24);  // entry 0, t 1
  }
  __syncthreads();  // depth_count
  int staged = sign_tiles * 16;  // entries staged in all, when the loop below is done
  for (int dt = 1; dt <= W; ++dt) {
    for (int w = 0; w < 128 / kWarp; ++w) staged += mm.depth_count[w][dt] * dt;
  }
  if (staged > max_entries) __trap();  // the Key budget bounds it (the launcher sizes the stages)
  if (table) {
    int rank = __popc(same_depth & ((1u << lane) - 1u));  // equal depth, earlier lane
    for (int w = 0; w < warp; ++w) rank += mm.depth_count[w][t];
    int first = sign_tiles * 16 + rank * t;  // staged after the shallower table channels
    for (int dt = 1; dt < t; ++dt) {
      for (int w = 0; w < 128 / kWarp; ++w) {
        rank += mm.depth_count[w][dt];
        first += mm.depth_count[w][dt] * dt;
      }
    }
    for (int e = 0; e < t; ++e) {
      mm.source[first + e] = static_cast<uint16_t>((c * W + t - 1 - e) * 8);
    }
    mm.table_slot[rank] = static_cast<unsigned>(first) | (static_cast<unsigned>(t) << 16) |
                          (static_cast<unsigned>(c) << 24);
  }
  __syncthreads();
  // The sign features' constant, -sum_k a_qk w_k per head: warp q adds the k-slots in a fixed
  // order (lane j takes j, j + 32, ...; then a butterfly), so the bias does not depend on timing.
  if (warp < G) {
    float sum = 0.0f;
    for (int k = lane; k < sign_slots; k += kWarp) {
      sum += sh.qa[mm.sign_channel[k]][warp] * mm.sign_weight[k];
    }
    sum = internal::WarpSum(sum);
    if (lane == 0) mm.sign_bias[warp] = -sum;
  }
  // B fragments: lane (g', r') of n-tile nt holds column nt 8 + g' at k-slots 2r', 2r' + 1,
  // 2r' + 8, 2r' + 9 of the k-tile; column n < G is head n's hi part, G <= n < 2G its lo part.
  for (int idx = tid; idx < ktiles * NT * kWarp; idx += blockDim.x) {
    const int kt = idx / (NT * kWarp), nt = (idx / kWarp) % NT, ln = idx % kWarp;
    const int n = nt * 8 + ln / 4;
    uint16_t v[4];
    for (int ci = 0; ci < 4; ++ci) {
      const int k = 2 * (ln % 4) + (ci % 2) + 8 * (ci / 2);
      float w = 0.0f;
      if (n < 2 * G) {
        if (kt < sign_tiles) {
          const int ch = mm.sign_channel[16 * kt + k];
          if (ch != kPadChannel) w = 2.0f * (sh.qa[ch][n % G] * mm.sign_weight[16 * kt + k]);
        } else {
          const int ch = static_cast<int>(mm.table_slot[16 * (kt - sign_tiles) + k] >> 24);
          if (ch != kPadChannel) w = sh.qa[ch][n % G];
        }
      }
      uint16_t hi, lo;
      internal::SplitHiLo<true>(w, hi, lo);
      v[ci] = n < G ? hi : lo;  // n >= 2G: w = 0, both halves 0
    }
    mm.bfrag[kt][nt][ln] = make_uint2(internal::Pack(v[0], v[1]), internal::Pack(v[2], v[3]));
  }
  __syncthreads();

  // The rotation that moves bit g of each byte to bit k, k = 0..7 (table channels).
  unsigned rot[kMaxStoreBits];
#pragma unroll
  for (int k = 0; k < kMaxStoreBits; ++k) rot[k] = static_cast<unsigned>(g - k) & 31u;
  const unsigned to_top = 7u - static_cast<unsigned>(g);  // bit g of each byte to bit 7

  float m[G], l[G];
  StartStats(m, l);
  const int end = min(T, start + a.chunk_tokens);
  const int32_t* pages = a.page_table + static_cast<size_t>(b) * a.max_pages;
  const int npages = (end - start + kPageTokens - 1) / kPageTokens;
  const auto stage = [&](int k) {
    return reinterpret_cast<uint32_t*>(stage_mem) +
           static_cast<size_t>(k % 2) * max_entries * kStageWords;
  };
  // Copies page k's planes (two 16-byte pieces per entry) into stage k % 2.
  const auto issue = [&](int k) {
    const int page = pages[start / kPageTokens + k];
    const auto* planes = reinterpret_cast<const uint32_t*>(a.key_planes) +
                         ((static_cast<size_t>(page) * a.heads_kv + h) * d) * W * 8;
    uint32_t* dst = stage(k);
    for (int j = tid; j < 2 * staged; j += blockDim.x) {
      const uint16_t from = mm.source[j / 2];
      internal::CpAsync16(dst + kStageWords * (j / 2) + 4 * (j % 2),
                          planes + (from == kZeroFill ? 0 : from) + 4 * (j % 2),
                          from != kZeroFill);
    }
  };
  issue(0);
  internal::CpAsyncCommit();
  for (int k = 0; k < npages; ++k) {
    if (k + 1 < npages) issue(k + 1);
    internal::CpAsyncCommit();
    internal::CpAsyncWait<1>();
    __syncthreads();
    const uint32_t* words = stage(k) + warp;  // word `warp` of entry e at words[kStageWords e]
    float acc[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.0f;
      }
    }
    // Sign k-tiles: A = the bits as 0 / 1; k-slot j's plane is staged entry j.
    for (int kt = 0; kt < sign_tiles; ++kt) {
      const uint32_t* slot = words + kStageWords * (16 * kt + 2 * r);
      const uint32_t y0 = slot[0] << to_top;
      const uint32_t y1 = slot[kStageWords] << to_top;
      const uint32_t y2 = slot[8 * kStageWords] << to_top;
      const uint32_t y3 = slot[9 * kStageWords] << to_top;
      // m-tile 0: rows g, g + 8 are bytes 0, 1; m-tile 1: bytes 2, 3.
      const uint32_t a0[4] = {internal::ZeroOne(internal::SignPair<0>(y0, y1)),
                              internal::ZeroOne(internal::SignPair<1>(y0, y1)),
                              internal::ZeroOne(internal::SignPair<0>(y2, y3)),
                              internal::ZeroOne(internal::SignPair<1>(y2, y3))};
      const uint32_t a1[4] = {internal::ZeroOne(internal::SignPair<2>(y0, y1)),
                              internal::ZeroOne(internal::SignPair<3>(y0, y1)),
                              internal::ZeroOne(internal::SignPair<2>(y2, y3)),
                              internal::ZeroOne(internal::SignPair<3>(y2, y3))};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint2 bf = mm.bfrag[kt][nt][lane];
        internal::Mma16816<true>(acc[0][nt], a0, bf.x, bf.y);
        internal::Mma16816<true>(acc[1][nt], a1, bf.x, bf.y);
      }
    }
    // Table k-tiles: channels in order of depth, A = (value, error) pairs from the table.
    for (int kt = 0; kt < table_tiles; ++kt) {
      uint32_t codes[4];
      int depth[4];
#pragma unroll
      for (int ci = 0; ci < 4; ++ci) {
        const unsigned desc = mm.table_slot[16 * kt + 2 * r + (ci % 2) + 8 * (ci / 2)];
        const int tc = depth[ci] = static_cast<int>((desc >> 16) & 0xffu);
        const uint32_t* entry = words + kStageWords * (desc & 0xffffu);
        codes[ci] = 0;
#pragma unroll
        for (int e = 0; e < kMaxStoreBits; ++e) {
          if (e >= tc) break;
          const uint32_t x = entry[kStageWords * e];  // plane tc - 1 - e: the code's bit e
          codes[ci] |= __funnelshift_r(x, x, rot[e]) & (0x01010101u << e);
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        unsigned e[4][2];  // [ci][row g, row g + 8]: (hi, lo) pairs
#pragma unroll
        for (int ci = 0; ci < 4; ++ci) {
          const unsigned* pair_table = mm.pairs + (1 << depth[ci]) - 1;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            e[ci][half] = pair_table[(codes[ci] >> (16 * mt + 8 * half)) & 0xffu];
          }
        }
        // A rows g (half 0) and g + 8 (half 1), k-slots 2r, 2r + 1 (ci 0, 1) and 2r + 8, 2r + 9
        // (ci 2, 3); low halves are the f16 values, high halves their rounding errors.
        constexpr unsigned kLows = 0x5410, kHighs = 0x7632;  // __byte_perm selectors
        const uint32_t a_hi[4] = {
            __byte_perm(e[0][0], e[1][0], kLows), __byte_perm(e[0][1], e[1][1], kLows),
            __byte_perm(e[2][0], e[3][0], kLows), __byte_perm(e[2][1], e[3][1], kLows)};
        const uint32_t a_lo[4] = {
            __byte_perm(e[0][0], e[1][0], kHighs), __byte_perm(e[0][1], e[1][1], kHighs),
            __byte_perm(e[2][0], e[3][0], kHighs), __byte_perm(e[2][1], e[3][1], kHighs)};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint2 bf = mm.bfrag[sign_tiles + kt][nt][lane];
          internal::Mma16816<true>(acc[mt][nt], a_hi, bf.x, bf.y);
          internal::Mma16816<true>(acc[mt][nt], a_lo, bf.x, bf.y);
        }
      }
    }
    // S to shared memory, then lane j takes token j of the warp: hi + lo columns of each head.
    float (*st)[kCols] = mm.tile[warp];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          st[16 * mt + g + 8 * (j / 2)][nt * 8 + 2 * r + j % 2] = acc[mt][nt][j];
        }
      }
    }
    __syncwarp();
    float s[G];
#pragma unroll
    for (int q = 0; q < G; ++q) s[q] = st[lane][q] + st[lane][G + q] + mm.sign_bias[q];
    __syncwarp();
    const int token = start + k * kPageTokens + warp * kWarp + lane;
    if (token < end) EmitLogits(a, first_q, token, s, sh, m, l);
    __syncthreads();  // every warp is done with stage k % 2 before it is refilled
  }
  WriteChunkStats(a, first_q, chunk, m, l, sh);
}

}  // namespace readkv::cuda::readkv_kernels
