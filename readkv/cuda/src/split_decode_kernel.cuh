// The dense and FP8 decode kernel on tensor cores: a persistent grid of thread blocks (as many as
// fit on the device), 4 warps each, every block taking an equal contiguous range of the call's
// 64-token tiles (split_work.h). Internal to readkv/cuda; dense_attention.cu and
// fp8_attention.cu instantiate it with their row types.
//
// Memory first. A block's tiles stream through shared memory, each tile one contiguous run of a
// page for K and one for V (64 x d elements each), copied with cp.async into a ring of `Stages`
// stages, so a block keeps Stages - 1 tiles in flight while it computes on one. The ring runs on
// across head boundaries: a block never waits for a pipeline to fill again, and no block is left
// idle at the end of the call (no waves). Shared rows are swizzled in 16-byte pieces
// (SwizzledPiece) so the key reads and the value reads below are free of bank conflicts.
//
// Compute on tensor cores (mma.sync m16n8k16, fp32 accumulate). Warp w owns tokens
// [16 w, 16 w + 16) of every tile and keeps its own online softmax over them; at the end of a
// head's tiles each warp writes its (max, sum, output) as one partial, and LaunchCombineSplits
// merges a head's partials.
//   logits  S[16 x 16] = Q[16 x d] . K^T : rows of Q are the g query heads twice, once rounded to
//           the MMA's 16-bit type (hi) and once the rounding error (lo), so S = hi + lo carries
//           ~16 bits of the fp32 query instead of 8 (rows 2g..15 are zero padding).
//   output  O[16 x d] += P[16 x 16] . V : P split into hi and lo rows the same way.
// The k dimension of each MMA may be permuted freely as long as both operands agree, so a lane
// reads whole 16-byte key pieces and pairs of value rows (tokens 2q, 2q + 1) without transposes;
// output channels come back in a permuted order the partial writes undo. Dense K/V are BF16
// (bf16 MMA); FP8 e4m3 codes convert exactly to f16 (f16 MMA).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>

#include "fast_exp2.cuh"
#include "split_decode.cuh"
#include "split_work.h"

namespace readkv::cuda::internal {

inline constexpr int kSplitWarps = kSplitWarpsPerBlock;
inline constexpr int kSplitThreads = kSplitWarps * kWarp;
inline constexpr int kTileTokens = kSplitTileTokens;  // 16 per warp: one k-step of P . V

// Bytes of shared memory of a block: the stage ring.
inline size_t SplitSharedBytes(int stages, int head_dim, int element_bytes) {
  return static_cast<size_t>(stages) * 2 * kTileTokens * head_dim * element_bytes;
}

// One 16-byte cp.async (cache-global: no L1 allocation). The L2::256B prefetch hint was
// measured slower on the H200 (dense 522.7 vs 484.4 us at 32K x 16), so it is not used.
__device__ __forceinline__ void CpAsync16(void* shared, const void* global, bool fill) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const int bytes = fill ? 16 : 0;  // 0: write zeros (rows past the sequence's end)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Where 16-byte piece `piece` of shared row `row` lives (rows of `kPieces` pieces). The XOR
// pattern puts rows 2q (q = 0..3) on four different piece pairs and rows r, r + 1 on different
// halves, which is what the value reads (4 rows x 2 pieces per phase) and the key reads (2 rows
// x 4 pieces per phase) need to hit 32 different banks.
template <int kPieces>
__device__ __forceinline__ int SwizzledPiece(int row, int piece) {
  const int pattern = ((row & 1) << 2) ^ (((row >> 1) & 3) << 1);
  return piece ^ (pattern & (kPieces - 1));
}

template <bool kF16>
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (kF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// x split into the MMA's 16-bit type: hi = round(x), lo = round(x - hi).
template <bool kF16>
__device__ __forceinline__ void SplitHiLo(float x, uint16_t& hi, uint16_t& lo) {
  if constexpr (kF16) {
    const __half h = __float2half_rn(x);
    hi = __half_as_ushort(h);
    lo = __half_as_ushort(__float2half_rn(x - __half2float(h)));
  } else {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    hi = __bfloat16_as_ushort(h);
    lo = __bfloat16_as_ushort(__float2bfloat16_rn(x - __bfloat162float(h)));
  }
}

__device__ __forceinline__ uint32_t Pack(uint16_t low, uint16_t high) {
  return static_cast<uint32_t>(low) | (static_cast<uint32_t>(high) << 16);
}

struct SplitArgs {
  int heads_q, heads_kv, max_pages;
  SplitWork work;
  float scale;  // 1 / sqrt(d)
  const float* queries;
  const int32_t* page_table;
  const int32_t* seq_lens;
  float* partial_out;  // [B][H_q][slots][warps][d] (persistent schedule)
  float* partial_ml;   // [B][H_q][slots][warps][2]
  int cluster;         // 0: persistent schedule; else blocks per head (cluster schedule), which
                       // then writes the outputs itself:
  float* out;                // [B][H_q][d]
  const float* out_scales;   // [H_kv] or null (1)
};

// Walks the real tiles of one block's range in order: head, tile within the head, and the end
// (exclusive) of this head's real tiles inside the range. Every thread of the block walks alike.
struct TileCursor {
  int head = 0, tile = 0, end = 0;
  int b = 0, h = 0, seq_len = 0;  // head = b * H_kv + h; the sequence's length
  bool done = false;
  int64_t range_end = 0;

  __device__ void Seek(int64_t v, const SplitArgs& a) {
    const int per_head = a.work.per_head;
    while (v < range_end) {
      head = static_cast<int>(v / per_head);
      tile = static_cast<int>(v % per_head);
      b = head / a.heads_kv;
      h = head - b * a.heads_kv;
      seq_len = a.seq_lens[b];
      const int real = (seq_len + kTileTokens - 1) / kTileTokens;
      const int64_t in_range = range_end - static_cast<int64_t>(head) * per_head;
      int64_t last = in_range < per_head ? in_range : per_head;
      if (real < last) last = real;
      end = static_cast<int>(last);
      if (tile < end) return;
      v = static_cast<int64_t>(head + 1) * per_head;
    }
    done = true;
  }
  __device__ void Next(const SplitArgs& a) {
    if (++tile < end) return;
    Seek(static_cast<int64_t>(head + 1) * a.work.per_head, a);
  }
};

// Rows must provide: kElementBytes; kF16 (f16 MMA, else bf16); kMinBlocks (blocks per SM the
// registers must allow); k and v (byte pointers to [pages][H_kv][256][d] elements);
// QueryScale(h), a factor on the logits (e.g. an FP8 k_scale);
// KeyFragments(uint4 piece, uint32_t (&b)[kPieceSteps][2]): the B operands of the k-steps a
// 16-byte key piece covers (step e holds the piece's channels 4e..4e+3: b[e][0] channels 4e, 4e+1,
// b[e][1] channels 4e+2, 4e+3); ValueFragments(row_a, row_b, uint32_t (&b)[4]): from 4
// consecutive channels of two value rows, b[j] = (row_a[j], row_b[j]) in the MMA's type.
template <class Rows, int D, int G, int Stages>
__global__ void __launch_bounds__(kSplitThreads, Rows::kMinBlocks)
    SplitDecodeKernel(SplitArgs a, Rows rows) {
  constexpr bool kF16 = Rows::kF16;
  constexpr int EB = Rows::kElementBytes;
  constexpr int kRowBytes = D * EB;
  constexpr int kRowPieces = kRowBytes / 16;
  constexpr int kTileBytes = kTileTokens * kRowBytes;
  constexpr int kStageBytes = 2 * kTileBytes;          // K tile, then V tile
  constexpr int kPieceChannels = 16 / EB;              // channels in a 16-byte piece
  constexpr int kPieceSteps = kPieceChannels / 4;      // MMA k-steps per piece
  constexpr int kKeyPieces = D / (4 * kPieceChannels); // pieces a lane reads per key row
  constexpr int kKSteps = D / 16;
  constexpr int kNTiles = D / 8;                       // output n-tiles of 8 channels
  static_assert(kKeyPieces * kPieceSteps == kKSteps, "key pieces must cover d");
  static_assert((kTileBytes / 16) % kSplitThreads == 0, "tile copies must split evenly");
  extern __shared__ __align__(128) unsigned char shared_bytes[];

  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int row = lane / 4;  // MMA row (A, C) and B column of this lane
  const int quad = lane % 4;
  const int first = warp * 16;  // this warp's tokens in every tile

  // Tile `tile` of head `head`: tokens 64 tile ... of one page (consecutive slots, contiguous
  // bytes), into stage `stage`; rows past the sequence's end are written as zeros. Thread t copies
  // pieces t + 128 i; their rows step by a multiple of 8, so the swizzle (which depends on
  // row % 8) and hence the shared offset's piece part are the same for every i.
  constexpr int kCopies = kTileBytes / 16 / kSplitThreads;
  constexpr int kCopyRowStep = kSplitThreads / kRowPieces;
  static_assert(kCopyRowStep % 8 == 0, "copy rows must step by a multiple of 8");
  const int copy_row = threadIdx.x / kRowPieces;
  const int copy_dst =
      copy_row * kRowBytes + SwizzledPiece<kRowPieces>(copy_row, threadIdx.x % kRowPieces) * 16;
  const auto issue = [&](const TileCursor& at, int stage) {
    if (!at.done) {
      const int token = at.tile * kTileTokens;
      const int32_t page =
          a.page_table[static_cast<size_t>(at.b) * a.max_pages + token / kPageTokens];
      const size_t offset = ((static_cast<size_t>(page) * a.heads_kv + at.h) * kPageTokens +
                             token % kPageTokens) * kRowBytes + threadIdx.x * 16;
      const int valid_rows = at.seq_len - token;
      unsigned char* dst = shared_bytes + static_cast<size_t>(stage) * kStageBytes + copy_dst;
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const bool live = copy_row + i * kCopyRowStep < valid_rows;
        CpAsync16(dst + i * kCopyRowStep * kRowBytes, rows.k + offset + i * kSplitThreads * 16,
                  live);
        CpAsync16(dst + kTileBytes + i * kCopyRowStep * kRowBytes,
                  rows.v + offset + i * kSplitThreads * 16, live);
      }
    }
    CpAsyncCommit();
  };

  // Let the combine kernel be scheduled now: its blocks wait (griddepcontrol.wait) for this whole
  // grid to finish and flush before reading, so they are resident when the last block ends.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  TileCursor load, compute;
  load.range_end = a.work.Begin(blockIdx.x + 1);
  load.Seek(a.work.Begin(blockIdx.x), a);
  compute = load;
#pragma unroll
  for (int s = 0; s < Stages - 1; ++s) {
    issue(load, s);
    if (!load.done) load.Next(a);
  }

  uint32_t qa[kKSteps][4];
  float logit_scale = 0.0f;
  float m_run = -INFINITY;  // running max (log2 units) of this lane's row over the warp's tokens
  float l_run = 0.0f;       // this lane's share of the running sum of exps
  float acc[kNTiles][4] = {};  // stays 0 in a cluster schedule's block without tiles
  int q_head = -1;
  // The warp's partial for query head `row` (lanes with row < G write): its output into
  // out_row[0, D) and (m x m_unit, l) into ml[0], ml[1].
  const auto put_partial = [&](float* out_row, float* ml, float m_unit) {
    float l = l_run + __shfl_xor_sync(0xffffffffu, l_run, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
#pragma unroll
    for (int t = 0; t < kNTiles; ++t) {
      const int group = t / 4, j = t % 4;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float o;
        if constexpr (G == 8) {
          o = acc[t][i] + acc[t][2 + i];
        } else {
          o = acc[t][i] + __shfl_xor_sync(0xffffffffu, acc[t][i], 4 * G);
        }
        if (row < G) out_row[32 * group + 4 * (2 * quad + i) + j] = o;
      }
    }
    if (row < G && quad == 0) {
      ml[0] = m_run * m_unit;
      ml[1] = l;
    }
  };
  for (int step = 0; !compute.done; ++step) {
    CpAsyncWait<Stages - 2>();
    __syncthreads();  // this step's tile landed for every thread; the previous stage is free
    issue(load, (step + Stages - 1) % Stages);
    if (!load.done) load.Next(a);
    const int b = compute.b, h = compute.h;
    const size_t head_row = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;

    if (compute.head != q_head) {
      // A new head: its query operands and a fresh softmax. Row r < 2G of Q holds query head
      // r % G, hi part (r < G) or lo part; rows 0..7 are this lane's `row`, rows 8..15 its
      // `row + 8` (only used when G = 8).
      q_head = compute.head;
      const auto fill = [&](int r, int which) {
        const bool used = r < 2 * G;
        const float* src = a.queries + (head_row + (used ? r % G : 0)) * D;
        const bool lo = r >= G;
#pragma unroll
        for (int p = 0; p < kKeyPieces; ++p) {
#pragma unroll
          for (int e = 0; e < kPieceSteps; ++e) {
            const int c0 = p * 4 * kPieceChannels + quad * kPieceChannels + 4 * e;
            uint16_t part[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              uint16_t hi, low;
              SplitHiLo<kF16>(used ? src[c0 + j] : 0.0f, hi, low);
              part[j] = lo ? low : hi;
            }
            qa[p * kPieceSteps + e][which] = Pack(part[0], part[1]);
            qa[p * kPieceSteps + e][which + 2] = Pack(part[2], part[3]);
          }
        }
      };
      fill(row, 0);
      if constexpr (G == 8) {
        fill(row + 8, 1);
      } else {
#pragma unroll
        for (int k = 0; k < kKSteps; ++k) qa[k][1] = qa[k][3] = 0u;
      }
      // Logits in log2 units: exp2 of differences is the softmax.
      logit_scale = a.scale * rows.QueryScale(h) * 1.4426950408889634f;
      m_run = -INFINITY;
      l_run = 0.0f;
#pragma unroll
      for (int t = 0; t < kNTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    }
    const unsigned char* k_tile = shared_bytes + static_cast<size_t>(step % Stages) * kStageBytes;
    const unsigned char* v_tile = k_tile + kTileBytes;

    // Logits of tokens first + 8 j + row (B column = this lane's row), j = 0, 1. Two
    // accumulators per n-tile (even and odd k-steps) halve the chain of dependent MMAs.
    float s[2][4], s_odd[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = s_odd[j][i] = 0.0f;
      const int r = first + 8 * j + row;
#pragma unroll
      for (int p = 0; p < kKeyPieces; ++p) {
        const uint4 piece = *reinterpret_cast<const uint4*>(
            k_tile + r * kRowBytes + SwizzledPiece<kRowPieces>(r, 4 * p + quad) * 16);
        uint32_t bk[kPieceSteps][2];
        Rows::KeyFragments(piece, bk);
#pragma unroll
        for (int e = 0; e < kPieceSteps; ++e) {
          Mma16816<kF16>(e % 2 == 0 ? s[j] : s_odd[j], qa[p * kPieceSteps + e], bk[e][0],
                         bk[e][1]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] += s_odd[j][i];
    }
    // s[j][i] (i = 0, 1): row `row`, token first + 8 j + 2 quad + i; s[j][2 + i]: row + 8.
    // Logit of the lane's query head = hi row + lo row.
    const int valid = compute.seq_len - compute.tile * kTileTokens - first;  // warp's live tokens
    float x[2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float v;
        if constexpr (G == 8) {
          v = s[j][i] + s[j][2 + i];
        } else {
          v = s[j][i] + __shfl_xor_sync(0xffffffffu, s[j][i], 4 * G);
        }
        x[j][i] = 8 * j + 2 * quad + i < valid ? v * logit_scale : -INFINITY;
      }
    }
    float m_tile = fmaxf(fmaxf(x[0][0], x[0][1]), fmaxf(x[1][0], x[1][1]));
    m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, 1));
    m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, 2));
    const float m_new = fmaxf(m_run, m_tile);
    if (m_new != -INFINITY) {  // else no live token of this warp yet (uniform over the warp)
      const float alpha = FastExp2(m_run - m_new);  // 0 when m_run is -inf
      m_run = m_new;
      float p[2][2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int i = 0; i < 2; ++i) p[j][i] = FastExp2(x[j][i] - m_new);  // 0 for masked tokens
      }
      l_run = l_run * alpha + (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]);
      // Once the running max settles, alpha is 1 on every row: skip the d / 2 multiplications.
      if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
        for (int t = 0; t < kNTiles; ++t) {
          acc[t][0] *= alpha;
          acc[t][1] *= alpha;
          acc[t][2] *= alpha;
          acc[t][3] *= alpha;
        }
      }

      // P as the A operand: k = 2 quad + i <- token first + 2 quad + i (j = 0), k = 8 + ...
      // (j = 1).
      uint32_t pa[4];
      {
        uint16_t hi[2][2], lo[2][2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
          for (int i = 0; i < 2; ++i) SplitHiLo<kF16>(p[j][i], hi[j][i], lo[j][i]);
        }
        if constexpr (G == 8) {
          pa[0] = Pack(hi[0][0], hi[0][1]);
          pa[1] = Pack(lo[0][0], lo[0][1]);
          pa[2] = Pack(hi[1][0], hi[1][1]);
          pa[3] = Pack(lo[1][0], lo[1][1]);
        } else {
          const bool low = row >= G;  // rows G..2G-1 carry lo; rows >= 2G are never read
          pa[0] = low ? Pack(lo[0][0], lo[0][1]) : Pack(hi[0][0], hi[0][1]);
          pa[2] = low ? Pack(lo[1][0], lo[1][1]) : Pack(hi[1][0], hi[1][1]);
          pa[1] = pa[3] = 0u;
        }
      }
      // V: B operand rows k = 2 quad, 2 quad + 1 (b0) and 2 quad + 8, + 9 (b1); column =
      // channel 32 group + 4 row + j of n-tile (group, j).
#pragma unroll
      for (int group = 0; group < D / 32; ++group) {
        const int byte = (32 * group + 4 * row) * EB;
        const int piece = byte / 16, within = byte % 16;
        uint32_t b0[4], b1[4];
        const auto at = [&](int r) {
          return v_tile + r * kRowBytes + SwizzledPiece<kRowPieces>(r, piece) * 16 + within;
        };
        Rows::ValueFragments(at(first + 2 * quad), at(first + 2 * quad + 1), b0);
        Rows::ValueFragments(at(first + 2 * quad + 8), at(first + 2 * quad + 9), b1);
#pragma unroll
        for (int j = 0; j < 4; ++j) Mma16816<kF16>(acc[4 * group + j], pa, b0[j], b1[j]);
      }
    }

    if (compute.tile + 1 == compute.end && a.cluster == 0) {
      // The head's last tile in this block: the warp's partial (max, sum, output) goes to its
      // slot (the cluster schedule merges after the loop instead). Lane (row, quad) holds output rows row and row + 8, channels
      // 32 group + 4 (2 quad + i) + j in acc[4 group + j][i] (and [2 + i] for row + 8).
      const int slot = blockIdx.x - a.work.BlockOf(static_cast<int64_t>(compute.head) *
                                                   a.work.per_head);
      const size_t base =
          ((head_row + row % G) * a.work.slots + slot) * kSplitWarps + warp;  // for row < G
      put_partial(a.partial_out + base * D, a.partial_ml + base * 2,
                  0.6931471805599453f);  // m in natural-log units
    }
    compute.Next(a);
  }
  CpAsyncWait<0>();
  if (a.cluster == 0) return;

  // The cluster schedule: this block held one head's tiles (or none), and the warps' partials
  // are still in registers. Each block puts its warps' partials into its stage ring, and block r
  // of the cluster then writes the r-th share of the head's G x D outputs from all the cluster's
  // partials, read through distributed shared memory.
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int clusters = a.cluster;
  const int parts = clusters * kSplitWarps;
  float* part_o = reinterpret_cast<float*>(shared_bytes);  // [warp][G][D], remote-read
  float* part_ml = part_o + kSplitWarps * G * D;           // [warp][G][2] (m log2 units, l)
  float* weight = part_ml + kSplitWarps * G * 2;           // [part][G] local: m, then e^(m - M)
  float* sums = weight + kMaxSplitCluster * kSplitWarps * G;  // [part][G] local: l
  float* inv_l = sums + kMaxSplitCluster * kSplitWarps * G;   // [G] local: scale / L
  static_assert((kSplitWarps * G * (D + 2) + 2 * kMaxSplitCluster * kSplitWarps * G + G) * 4 <=
                    Stages * kStageBytes,
                "the cluster merge's partials must fit in the stage ring");
  __syncthreads();  // every warp's reads of the ring are done
  put_partial(part_o + (warp * G + row % G) * D, part_ml + (warp * G + row % G) * 2, 1.0f);
  cluster.sync();  // every block's partials are written
  // Partial k = (block k / W of the cluster, warp k % W); its row q starts at G k + q of the
  // block's arrays (k % W = warp).
  const auto remote = [&](float* local, int k) {
    return cluster.map_shared_rank(local, static_cast<unsigned>(k / kSplitWarps));
  };
  for (int e = threadIdx.x; e < parts * G; e += kSplitThreads) {
    const float* ml = remote(part_ml, e / G) + (e % (kSplitWarps * G)) * 2;
    weight[e] = ml[0];
    sums[e] = ml[1];
  }
  __syncthreads();
  const int head = blockIdx.x / clusters;
  const int b = head / a.heads_kv, h = head - b * a.heads_kv;
  if (threadIdx.x < G) {
    const int q = threadIdx.x;
    float m = -INFINITY;
    for (int k = 0; k < parts; ++k) m = fmaxf(m, weight[k * G + q]);
    float l = 0.0f;
    for (int k = 0; k < parts; ++k) {
      const float mk = weight[k * G + q];
      const float f = mk == -INFINITY ? 0.0f : exp2f(mk - m);
      weight[k * G + q] = f;
      l += f * sums[k * G + q];
    }
    inv_l[q] = (a.out_scales != nullptr ? a.out_scales[h] : 1.0f) / l;
  }
  __syncthreads();
  const size_t head_row = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const int share = G * D / clusters;  // powers of two: exact
  const int rank = static_cast<int>(cluster.block_rank());
  for (int e = rank * share + threadIdx.x; e < (rank + 1) * share; e += kSplitThreads) {
    const int q = e / D, c = e % D;
    float o = 0.0f;
    for (int k = 0; k < parts; ++k) {
      const float f = weight[k * G + q];
      if (f != 0.0f) o += f * remote(part_o, k)[((k % kSplitWarps) * G + q) * D + c];
    }
    a.out[(head_row + q) * D + c] = o * inv_l[q];
  }
  cluster.sync();  // no block leaves while another still reads its partials
}

// How many blocks of SplitDecodeKernel<Rows, D, G, Stages> the current device holds at once, all
// SMs together. Asked once per kernel and device (a static per instantiation): the occupancy
// query and the attribute call cost tens of microseconds of host time, as much as a whole decode
// step at batch 1.
template <class Rows, int D, int G, int Stages>
cudaError_t ResidentBlocks(size_t shared, int* blocks) {
  constexpr int kDevices = 64;
  static std::atomic<int> cached[kDevices] = {};
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  if (device < kDevices && (*blocks = cached[device].load(std::memory_order_relaxed)) > 0) {
    return cudaSuccess;
  }
  const auto kernel = SplitDecodeKernel<Rows, D, G, Stages>;
  int sms = 0, per_sm = 0;
  status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(shared));
  if (status == cudaSuccess) {
    status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  if (status == cudaSuccess) {
    status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSplitThreads, shared);
  }
  if (status != cudaSuccess) return status;
  *blocks = sms * (per_sm > 0 ? per_sm : 1);
  if (device < kDevices) cached[device].store(*blocks, std::memory_order_relaxed);
  return cudaSuccess;
}

// A launch of `grid` blocks of the split kernel in clusters of `cluster` (the attribute lives in
// *attribute, which must outlive the config's use).
inline cudaLaunchConfig_t ClusterLaunch(int grid, int cluster, size_t shared, cudaStream_t stream,
                                        cudaLaunchAttribute* attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kSplitThreads);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  *attribute = {};
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// Whether the current device keeps `clusters` clusters of `cluster` blocks of
// SplitDecodeKernel<Rows, D, G, Stages> resident at once (one wave); asked once per kernel,
// device and cluster size, like ResidentBlocks.
template <class Rows, int D, int G, int Stages>
cudaError_t ClustersFit(size_t shared, int cluster, int64_t clusters, bool* fit) {
  constexpr int kDevices = 64;
  constexpr int kSizes = 4;  // cluster sizes 1, 2, 4, 8
  static std::atomic<int> cached[kDevices][kSizes] = {};
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  const int size = cluster == 1 ? 0 : cluster == 2 ? 1 : cluster == 4 ? 2 : 3;
  int most = device < kDevices ? cached[device][size].load(std::memory_order_relaxed) : 0;
  if (most == 0) {
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = ClusterLaunch(cluster, cluster, shared, nullptr, &attribute);
    status = cudaOccupancyMaxActiveClusters(&most, SplitDecodeKernel<Rows, D, G, Stages>, &config);
    if (status != cudaSuccess) return status;
    most = most > 0 ? most : -1;  // cached: "none fit" is an answer too
    if (device < kDevices) cached[device][size].store(most, std::memory_order_relaxed);
  }
  *fit = most >= clusters;
  return cudaSuccess;
}

// Launches the split kernel in the schedule the call takes; *work is its partition and
// *cluster its cluster size (0: the persistent schedule, whose partials need the combine).
template <class Rows, int D, int G, int Stages>
cudaError_t LaunchSplitKernel(const DecodeShape& shape, const DecodeInputs& in, const Rows& rows,
                              const float* out_scales, void* workspace, cudaStream_t stream,
                              const SplitPlan& plan, SplitWork* work, int* cluster) {
  const size_t shared = SplitSharedBytes(Stages, D, Rows::kElementBytes);
  int blocks = 0;
  cudaError_t status = ResidentBlocks<Rows, D, G, Stages>(shared, &blocks);
  if (status != cudaSuccess) return status;
  const int64_t heads = static_cast<int64_t>(shape.batch) * shape.heads_kv;
  *cluster = PlannedClusterSize(plan.cluster, heads, blocks, shape.min_tokens, shape.max_tokens);
  if (plan.cluster < 0 && *cluster > 0) {
    bool fit = false;
    status = ClustersFit<Rows, D, G, Stages>(shared, *cluster, heads, &fit);
    if (status != cudaSuccess) return status;
    if (!fit) *cluster = 0;
  }
  *work = *cluster > 0 ? MakeClusterWork(shape.batch, shape.heads_kv, shape.max_tokens, *cluster)
                       : MakeSplitWork(shape.batch, shape.heads_kv, shape.max_tokens, blocks);
  const SplitArgs args{shape.heads_q,
                       shape.heads_kv,
                       shape.max_pages,
                       *work,
                       1.0f / sqrtf(static_cast<float>(D)),
                       in.queries,
                       in.page_table,
                       in.seq_lens,
                       static_cast<float*>(workspace),
                       reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                                PartialOutBytes(shape)),
                       *cluster,
                       in.out,
                       out_scales};
  const auto kernel = SplitDecodeKernel<Rows, D, G, Stages>;
  if (*cluster == 0) {
    kernel<<<work->grid, kSplitThreads, shared, stream>>>(args, rows);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = ClusterLaunch(work->grid, *cluster, shared, stream, &attribute);
  return cudaLaunchKernelEx(&config, kernel, args, rows);
}

// Validates and launches both kernels of one call.
template <class Rows, int Stages>
cudaError_t LaunchSplitDecode(const DecodeShape& shape, const DecodeInputs& in,
                              const Rows& rows, const float* out_scales, void* workspace,
                              cudaStream_t stream, const SplitPlan& plan) {
  if (!ValidShape(shape) || !plan.valid() || in.queries == nullptr || in.page_table == nullptr ||
      in.seq_lens == nullptr || in.out == nullptr || workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  SplitWork work;
  int cluster = 0;
  cudaError_t status = cudaSuccess;
#define KVGATE_SPLIT_CASE(D, G)                                                            \
  if (shape.head_dim == D && shape.group() == G) {                                         \
    status = LaunchSplitKernel<Rows, D, G, Stages>(shape, in, rows, out_scales, workspace, \
                                                   stream, plan, &work, &cluster);         \
  } else
  KVGATE_SPLIT_CASE(128, 1) KVGATE_SPLIT_CASE(128, 2) KVGATE_SPLIT_CASE(128, 4)
  KVGATE_SPLIT_CASE(128, 8) KVGATE_SPLIT_CASE(64, 1) KVGATE_SPLIT_CASE(64, 2)
  KVGATE_SPLIT_CASE(64, 4) KVGATE_SPLIT_CASE(64, 8) { return cudaErrorInvalidValue; }
#undef KVGATE_SPLIT_CASE
  if (status != cudaSuccess || cluster > 0) return status;
  return LaunchCombineSplits(shape, work, in.seq_lens, static_cast<const float*>(workspace),
                             reinterpret_cast<const float*>(static_cast<const char*>(workspace) +
                                                            PartialOutBytes(shape)),
                             out_scales, in.out, stream);
}

}  // namespace readkv::cuda::internal
