// The GPU tile reader's TileLogits (tile_attention.h says what each launch does), with the
// headers of the pieces the kernels share (tile_kernel_args.cuh, tile_list_reads.cuh,
// tile_value_cut.cuh); TileValues is in tile_values.cuh, TileWindowValues in tile_window.cuh.
// Included only through tile_attention.cu, which launches them. Internal.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fast_exp2.cuh"
#include "tile_fragment.h"
#include "tile_kernel_args.cuh"
#include "tile_list_reads.cuh"
#include "tile_queries.cuh"
#include "tile_read_sums.h"
#include "tile_staging.h"
#include "tile_value_cut.cuh"

namespace readkv::cuda::tile_kernels {

// ---- 2. TileLogits -----------------------------------------------------------------------------
//
// Grid (chunks, H_kv, B) x 128. Each warp takes a contiguous quarter of the chunk's token tiles
// and streams them through its two-stage ring (a stage: up to 8 tiles' chosen planes, compact:
// the group runs of a tile back to back, <= kStageBytes). Per stage it walks the Key groups: one
// depth dispatch per group, then per staged tile the t plane bytes from shared memory, the
// decode of tile_fragment.h and one MMA against the group's folded queries (B: 16 channels x 8
// heads, in lane order, by TilePrepare). Per finished tile and head it writes
// e = exp(l - M) in f16 for its 16 tokens (M the tile's max; TileValues scales them by
// exp(M - max) into its B operand) and the tile's softmax statistics (M, sum e, sum e^2), from
// which TileSelect forms the heads' statistics and the Value block weights. With a Value
// window M is instead the warp's reference maximum and only M is written (WindowTileEpilogue):
// TileWindowValues forms sum e^2 from the e values and the row's statistics from the chunks'
// (chunk_stats, written at the block's end). The f32 logits are
// written only for TileDecodeDebug::logits: the round trip through memory is 2 bytes a token
// and head instead of 4.
// Byte keys (kByteKeys; every group at depth 8, so a staged tile is its 256 code bytes a group):
// per group and tile one 8-byte shared load of the lane's codes, DecodeByteKeys (a permute and
// an f16x2 fma a pair) and the MMA, every accumulator starting at the half cell's share of the
// logit (ByteKeyBias). There is no TilePrepare then: each block issues its first stage, folds its
// row's queries into shared memory meanwhile (FoldRowQueries), and after its tiles computes its
// share of the residual window's logits; the row's first block zeroes its arrivals (one pass
// has none) and adds the Key bytes to the ledgers. With 2 <= G <= 4 an accumulator holds two
// token tiles (TilePairs), so the epilogues run once a pair.
template <int G, bool kPair>
__device__ __forceinline__ void ByteKeyBias(const uint2* frags, int groups, int lane,
                                            float (&bias)[2]) {
  // Lane l's B fragment holds head l / 4 at 4 channels of each group: the sum of the folded
  // f16 queries over its channels, then over the 4 lanes of that head.
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) {
    const uint2 q = frags[g * kWarp + lane];
    const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&q.x));
    const float2 y = __half22float2(*reinterpret_cast<const __half2*>(&q.y));
    sum += (x.x + x.y) + (y.x + y.y);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  // The C fragment's columns: heads 2 (lane % 4) + {0, 1}, whose sums lanes 4 n hold (with
  // pairs, columns 4-7 are heads 0-3 again).
  const int from = 8 * (kPair ? lane % 2 : lane % 4);
  bias[0] = tile::kKeyByteHalfCell * __shfl_sync(0xffffffffu, sum, from);
  bias[1] = tile::kKeyByteHalfCell * __shfl_sync(0xffffffffu, sum, from + 4);
}

// Over the row, one token tile's e values against its own maximum M per head, from its masked
// logits x (C order, as below; in0 / in1: the lane's two tokens are encoded), to the tile's probs
// ([G][16], f16), and its statistics (M, sum e, sum e^2 per head) for TileSelect. With pairs
// (TilePairs below) a lane's columns are heads 2 (lane % 4) - head_shift + {0, 1} of its tile,
// which exists when `valid`; every column's reductions stay within its own tile.
template <int G>
__device__ __forceinline__ void RowTileEpilogue(const float (&x)[4], bool in0, bool in1, int lane,
                                                int head_shift, bool valid, __half* tile_probs,
                                                float* tile_stats) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int n_head = 2 * (lane % 4) + hh - head_shift;
    float m = fmaxf(x[hh], x[hh + 2]);
#pragma unroll
    for (int o = 4; o < kWarp; o *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float e0 = in0 ? __expf(x[hh] - m) : 0.0f;
    const float e1 = in1 ? __expf(x[hh + 2] - m) : 0.0f;
    float sum = e0 + e1, sq = e0 * e0 + e1 * e1;
#pragma unroll
    for (int o = 4; o < kWarp; o *= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, o);
      sq += __shfl_xor_sync(0xffffffffu, sq, o);
    }
    if (valid && n_head < G) {
      __half* pr = tile_probs + n_head * 16 + lane / 4;
      pr[0] = __float2half_rn(e0);
      pr[8] = __float2half_rn(e1);
      if (lane < 4) {
        tile_stats[n_head] = m;
        tile_stats[G + n_head] = sum;
        tile_stats[2 * G + n_head] = sq;
      }
    }
  }
}

// With a Value window, one token tile's e values against the warp's reference maxima ref (one
// per head of the lane, uniform over the head's lanes), from its masked logits x (C order: heads
// 2 (lane % 4) + {0, 1} at token lane / 4, then at token lane / 4 + 8). ref rises only when a
// logit passes ref + kRefSlack (one vote a tile; the tile's maximum by shuffles only then), so e
// stays below e^8 and fits f16. The e values go to the tile's probs ([G][16], f16) and ref to its
// statistics as M; the sums of e stay in the lane (lane_sum, rescaled when ref rises) until the
// warp's end, and TileWindowValues forms the tile's sum e^2 from the f16 e values. What a tile
// costs after its MMAs (lists included) fell from ~213 warp instructions to ~114 (ncu source
// counters, served point with byte keys, 444bf52 against e7c129e).
inline constexpr float kRefSlack = 8.0f;
inline constexpr float kLog2e = 1.4426950408889634f;
template <int G>
__device__ __forceinline__ void WindowTileEpilogue(const float (&x)[4], int lane, float (&ref)[2],
                                                   float (&lane_sum)[2], __half* tile_probs,
                                                   float* tile_stats) {
  const bool over =
      fmaxf(x[0], x[2]) > ref[0] + kRefSlack || fmaxf(x[1], x[3]) > ref[1] + kRefSlack;
  if (__any_sync(0xffffffffu, over)) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float m = fmaxf(x[hh], x[hh + 2]);
#pragma unroll
      for (int o = 4; o < kWarp; o *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      if (m > ref[hh]) {  // the sum so far, rescaled to the new reference (0 from -inf)
        lane_sum[hh] *= internal::FastExp2((ref[hh] - m) * kLog2e);
        ref[hh] = m;
      }
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float shift = ref[hh] * kLog2e;  // finite: the tile has a token, so ref was set
    const float e0 = internal::FastExp2(fmaf(x[hh], kLog2e, -shift));  // 0 for a masked token
    const float e1 = internal::FastExp2(fmaf(x[hh + 2], kLog2e, -shift));
    lane_sum[hh] += e0 + e1;
    const int n_head = 2 * (lane % 4) + hh;
    if (n_head < G) {
      __half* pr = tile_probs + n_head * 16 + lane / 4;
      pr[0] = __float2half_rn(e0);
      pr[8] = __float2half_rn(e1);
      if (lane < 4) tile_stats[n_head] = ref[hh];
    }
  }
}

// Two token tiles an accumulator (byte keys, G <= 4): the MMA's eight columns are heads 0-3 of
// a stage's tile 2j (columns 0-3, the lanes with lane % 4 < 2) and of its tile 2j + 1 (columns
// 4-7, B operand = the queries moved to lanes 16-31), where one tile a MMA left half of every
// fragment on absent heads. The MMAs stay one a tile and group; every epilogue (exponentials,
// f16 stores, votes, sums) then runs once for two tiles. Exact: the other tile's columns add
// products by zero queries. Measured (H100, 2026-12-06, against aa4cb89 in one run, twice): the
// served call 55.0 → 52.1 us, its blocks' Logits phase 16.1 → 15.0 us. G = 1 keeps one tile an
// accumulator: at D = 128 pairs made TileWindowPass spill (12 bytes), and it is not measured.
template <int G, bool kByteKeys>
inline constexpr bool TilePairs = kByteKeys && G >= 2 && G <= 4;

// WindowTileEpilogue for a pair: the same references and e values as WindowTileEpilogue on the
// pair's first tile and then on its second. A lane's tile is the second when `second` (lane % 4
// >= 2), and exists when `valid` (a stage's odd last tile has no second). When any first-tile
// lane passes its reference + kRefSlack, every head's reference rises to the first tile's
// maximum; then the second tile votes against that and rises likewise. Each lane's e values and
// M are against its own tile's reference; a first-tile lane's sums are moved to the second's at
// the end, so the lanes of a head hold one reference again.
template <int G>
__device__ __forceinline__ void WindowPairEpilogue(const float (&x)[4], int lane, bool second,
                                                   bool valid, float (&ref)[2],
                                                   float (&lane_sum)[2], __half* tile_probs,
                                                   float* tile_stats) {
  const float top[2] = {fmaxf(x[0], x[2]), fmaxf(x[1], x[3])};
  const unsigned over =
      __ballot_sync(0xffffffffu, top[0] > ref[0] + kRefSlack || top[1] > ref[1] + kRefSlack);
  float mine[2] = {ref[0], ref[1]};  // the reference of this lane's tile
  float last[2] = {ref[0], ref[1]};  // after the pair
  if (over != 0u) {
    float first_max[2], second_max[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float m = top[hh];
#pragma unroll
      for (int o = 4; o < kWarp; o *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const float other = __shfl_xor_sync(0xffffffffu, m, 2);  // the other tile's, same head
      first_max[hh] = second ? other : m;
      second_max[hh] = second ? m : other;
    }
    float after_first[2] = {ref[0], ref[1]};
    if ((over & 0x33333333u) != 0u) {  // a first-tile lane voted
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) after_first[hh] = fmaxf(ref[hh], first_max[hh]);
    }
    const bool over_second = second && (top[0] > after_first[0] + kRefSlack ||
                                        top[1] > after_first[1] + kRefSlack);
    const bool rise = __any_sync(0xffffffffu, over_second);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      last[hh] = rise ? fmaxf(after_first[hh], second_max[hh]) : after_first[hh];
      mine[hh] = second ? last[hh] : after_first[hh];
      if (mine[hh] > ref[hh]) lane_sum[hh] *= internal::FastExp2((ref[hh] - mine[hh]) * kLog2e);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float shift = mine[hh] * kLog2e;  // finite: the pair's first tile has a token
    const float e0 = internal::FastExp2(fmaf(x[hh], kLog2e, -shift));  // 0 for a masked token
    const float e1 = internal::FastExp2(fmaf(x[hh + 2], kLog2e, -shift));
    lane_sum[hh] += e0 + e1;
    const int n_head = 2 * (lane % 4) + hh - (second ? 4 : 0);
    if (valid && n_head < G) {
      __half* pr = tile_probs + n_head * 16 + lane / 4;
      pr[0] = __float2half_rn(e0);
      pr[8] = __float2half_rn(e1);
      if (lane < 4) tile_stats[n_head] = mine[hh];
    }
    if (last[hh] > mine[hh]) {  // a first-tile lane's sum, to the second tile's reference
      lane_sum[hh] *= internal::FastExp2((mine[hh] - last[hh]) * kLog2e);
    }
    ref[hh] = last[hh];
  }
}

struct NoRowQueries {};  // tree keys' TileLogits: TilePrepare folded the queries

// Where a Logits block puts what its epilogue makes: tile `first + i`'s e values at
// probs + i * kProbsStride (halves) and its statistics at stats + i * kStatsStride (floats),
// and, with a Value window, the chunk's statistics (M [G], sum e [G]) at chunk_stats. TileLogits
// points them into the workspace; TileWindowPass into its own shared memory. The strides are
// constants so that a tile's addresses cost what they did with the workspace alone.
template <int kProbsStride, int kStatsStride>
struct LogitsOut {
  static constexpr int kProbs = kProbsStride, kStats = kStatsStride;
  __half* probs;
  float* stats;
  float* chunk_stats;
};

// TileLogits' work for block (chunk, h, b) of the grid, with the block's centroid table (tree
// keys load it here; byte keys need none) and its staging ring (kMmaWarps x kStages x
// kStageBytes of 16-byte aligned shared memory, free again when it returns). Every thread of the
// block calls it; it synchronises the block.
template <int D, int G, bool kByteKeys, typename Out>
__device__ __forceinline__ void LogitsOfChunk(const TileArgs& a,
                                              const tile::TileCentroids& centroids,
                                              uint16_t* table, uint8_t* ring_bytes, int chunk,
                                              int h, int b, const Out& out) {
  constexpr int kGroups = D / 16;
  constexpr int kMaxPieces = 2 * kGroups * tile::kMaxTileDepth;  // 16-byte pieces of a tile
  // Byte keys: every group at depth 8, so a staged tile is the token tile itself (kBytePieces
  // 16-byte pieces) and a stage holds kByteStageTiles of them.
  constexpr int kBytePieces = kMaxPieces;
  constexpr int kByteStageTiles =
      kStageBytes / (16 * kBytePieces) < kWarpTiles ? kStageBytes / (16 * kBytePieces) : kWarpTiles;
  static_assert(kByteStageTiles >= 1, "a stage holds a byte-key tile");
  constexpr int kStageTiles = kByteKeys ? kByteStageTiles : kWarpTiles;  // of a stage, at most
  constexpr bool kPair = TilePairs<G, kByteKeys>;
  constexpr int kAccs = kPair ? (kStageTiles + 1) / 2 : kStageTiles;  // accumulators of a stage
  __shared__ uint8_t depth[kGroups];
  __shared__ uint8_t plane_at[kGroups];   // first plane of group g in a staged tile
  __shared__ uint16_t piece[kMaxPieces];  // staged piece o: its 16-byte index in the token tile
  __shared__ int staged_planes;           // planes of one staged tile (sum of the depths)
  using Ring = uint8_t[kMmaWarps][kStages][kStageBytes];
  auto& ring = *reinterpret_cast<Ring*>(ring_bytes);
  // Byte keys: the block's own folded queries (tile_queries.cuh; tree keys take TilePrepare's),
  // the fold's scratch in the warps' second slots (below).
  __shared__ std::conditional_t<kByteKeys, RowQueryKeep<D, G>, NoRowQueries> queries;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const size_t row = RowOf(a, b, h);
  if constexpr (!kByteKeys) {
    LoadTable(centroids, table);
    if (threadIdx.x < kGroups) depth[threadIdx.x] = a.key_depths[row * kGroups + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
      staged_planes = tile::PlanKeyStaging(depth, kGroups, a.store_bits, plane_at, piece);
    }
    __syncthreads();
  }
  const int encoded = a.in.encoded_lens[b];
  const int tiles = (encoded + 15) / 16;
  const int first = chunk * (a.chunk_tokens / 16);
  const tile::WarpShare mine = tile::ShareOfWarp(first, min(tiles, first + a.chunk_tokens / 16), warp);
  // Byte keys stage whole token tiles (every group at depth 8): no piece map.
  const int planes = kByteKeys ? kBytePieces / 2 : staged_planes;
  const int pieces = 2 * planes;
  const int per_stage = tile::KeyTilesPerStage(planes);
  const int stages = (mine.count() + per_stage - 1) / per_stage;
  const TileEntries my_list =
      LaneEntries(a, a.in.key_outlier_pages, b, h, mine.lo, mine.count(), lane);
  const int64_t tile_bytes = tile::TokenTileBytes(D, a.store_bits);
  // Lane i holds where the warp's tile i starts in the pool: a stage's issue takes it by
  // shuffles instead of a page-table load a tile.
  const uint64_t my_from = lane < mine.count()
      ? reinterpret_cast<uintptr_t>(TileAt(a, a.in.key_tiles, tile_bytes, b, h, mine.lo + lane))
      : 0;
  const auto issue = [&](int k) {  // stage k of this warp into its ring slot
    const int lo = mine.lo + k * per_stage, n = min(per_stage, mine.hi - lo);
    uint8_t* to = ring[warp][k % kStages];
    for (int i = 0; i < n; ++i) {
      const auto* from = reinterpret_cast<const uint8_t*>(
          static_cast<uintptr_t>(ShuffleWord64(my_from, lo - mine.lo + i)));
      if constexpr (kByteKeys) {  // the whole token tile, in its order: no piece map
#pragma unroll
        for (int o = lane; o < kBytePieces; o += kWarp)
          CpAsync16(to + (i * kBytePieces + o) * 16, from + o * 16);
      } else {
        for (int o = lane; o < pieces; o += kWarp)
          CpAsync16(to + (i * pieces + o) * 16, from + piece[o] * 16);
      }
    }
    CpAsyncCommit();
  };
  // The first stage's loads need no query: byte keys issue them before folding the queries, so
  // the fold runs under their latency.
  if (stages > 0) issue(0);
  const uint2* frags = nullptr;  // the folded queries' B fragments, group g at g * 32
  const float* scaled = nullptr;  // scale q~, [D][G], for the Key lists
  if constexpr (kByteKeys) {
    // Slot 1 of warps 0-2 is free until stage 1's issue, after the barrier below.
    static_assert(kStages >= 2 && kMmaWarps >= 3 &&
                      sizeof(float[kMaxGroup][128]) <= kStageBytes &&
                      sizeof(uint16_t[kMaxGroup][D]) <= kStageBytes &&
                      sizeof(uint2[kGroups * kWarp]) <= kStageBytes,
                  "the fold's scratch fits three second slots");
    const RowQueryScratch<D> scratch{reinterpret_cast<float(*)[128]>(ring[0][1]),
                               reinterpret_cast<uint16_t(*)[D]>(ring[1][1]),
                               reinterpret_cast<uint2*>(ring[2][1])};
    float v[kMaxGroup];
    FoldRowQueries<D, G>(a, b, h, scratch, queries, v);
    frags = scratch.frags;
    scaled = queries.scaled;
  } else {
    frags = reinterpret_cast<const uint2*>(a.fragments) + row * kGroups * kWarp;
    scaled = a.scaled_queries + row * D * G;
  }
  const SharedTable lookup{table};
  float* debug_logits = a.debug.logits;
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const bool per_chunk = out.chunk_stats != nullptr;  // a Value window (uniform: an argument)
  float bias[2] = {0.0f, 0.0f};  // every logit's start: the half cell's share with byte keys
  uint2 byte_q[kByteKeys ? kGroups : 1];  // byte keys: the folded queries, held for every stage
  uint2 pair_q[kPair ? kGroups : 1];      // with pairs, the same in columns 4-7 (lanes 16-31)
  if constexpr (kByteKeys) {
    ByteKeyBias<G, kPair>(frags, kGroups, lane, bias);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      byte_q[g] = frags[g * kWarp + lane];
      // Lanes 16-31 hold heads 4-7, zero for G <= 4: lane ^ 16 moves heads 0-3 there.
      if constexpr (kPair) pair_q[g] = frags[g * kWarp + (lane ^ 16)];
    }
    __syncthreads();  // every warp holds its fragments: the scratch's slots may be refilled
  }
  // With a Value window, the lane's reference maxima for its heads (ref: uniform over a head's
  // lanes) and its own sums of e = exp(l - ref) over its tokens (WindowTileEpilogue).
  float ref[2] = {-INFINITY, -INFINITY}, lane_sum[2] = {0.0f, 0.0f};
  for (int k = 0; k < stages; ++k) {
    if (k + 1 < stages) {
      issue(k + 1);
    } else {
      CpAsyncCommit();  // an empty group keeps the wait's count
    }
    CpAsyncWait<1>();
    __syncwarp();
    const int base = mine.lo + k * per_stage, n = min(per_stage, mine.hi - base);
    const uint8_t* staged = ring[warp][k % kStages];
    float acc[kAccs][4];
#pragma unroll
    for (int i = 0; i < kAccs; ++i) {
      acc[i][0] = bias[0];
      acc[i][1] = bias[1];
      acc[i][2] = bias[0];
      acc[i][3] = bias[1];
    }
    if constexpr (kByteKeys) {  // group g's 8 planes start at plane 8 g of the token tile
      const uint8_t* lane_bytes = staged + lane * 8;
      // A full stage (all but a warp's last) without a test per tile.
      const auto body = [&](auto full) {
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
#pragma unroll
          for (int i = 0; i < kByteStageTiles; ++i) {
            if (decltype(full)::value || i < n) {  // uniform over the warp
              const uint2 codes = *reinterpret_cast<const uint2*>(
                  lane_bytes + (i * kBytePieces / 2 + 8 * g) * 32);
              uint32_t frag[4];
              tile::DecodeByteKeys(codes.x, codes.y, frag);
              const uint2 q = kPair && i % 2 == 1 ? pair_q[g] : byte_q[g];
              Mma(acc[kPair ? i / 2 : i], frag, q.x, q.y);
            }
          }
        }
      };
      if (n == kByteStageTiles) {
        body(std::true_type{});
      } else {
        body(std::false_type{});
      }
    } else {
      for (int g = 0; g < kGroups; ++g) {
        const uint2 q = frags[g * kWarp + lane];
        const uint8_t* group_bytes = staged + plane_at[g] * 32 + lane;
        WithDepth(depth[g], [&](auto depth_tag) {
          constexpr int T = decltype(depth_tag)::value;
#pragma unroll
          for (int i = 0; i < kWarpTiles; ++i) {
            if (i < n) {  // uniform over the warp
              uint32_t bytes[T], frag[4];
#pragma unroll
              for (int p = 0; p < T; ++p) bytes[p] = group_bytes[(i * planes + p) * 32];
              tile::DecodeFragment<T>(bytes, centroids, lookup, frag);
              Mma(acc[i], frag, q.x, q.y);
            }
          }
        });
      }
    }
    __syncwarp();  // the slot is refilled by stage k + 2's issue
    // With pairs a lane's columns are its accumulator's second tile's (TilePairs).
    const bool second = kPair && (lane % 4) >= 2;
    const int head_shift = second ? 4 : 0;
    if (a.in.key_outlier_pages != nullptr) {  // before the tiles' maxima and sums
      const float* key_std = a.codec.key_std + static_cast<size_t>(h) * D;
#pragma unroll
      for (int j = 0; j < kAccs; ++j) {
        const int i = kPair ? 2 * j + (second ? 1 : 0) : j;  // this lane's tile of the stage
        if ((kPair ? 2 * j : j) < n) {  // uniform over the warp
          const TileEntries list = EntriesFromLane(my_list, base - mine.lo + min(i, n - 1));
          if (i < n) {
            AddKeyOutliers<G, kByteKeys>(list, lane, head_shift, depth, scaled, key_std,
                                         centroids, acc[j]);
          }
        }
      }
    }
    // C: rows = tokens (lane / 4, + 8), columns = heads (2 (lane % 4), + 1).
#pragma unroll
    for (int j = 0; j < kAccs; ++j) {
      if ((kPair ? 2 * j : j) >= n) continue;  // uniform over the warp
      const int i = kPair ? 2 * j + (second ? 1 : 0) : j;
      const bool valid = i < n;
      const int tile = base + i;
      const int t0 = tile * 16 + lane / 4, t1 = t0 + 8;
      const bool in0 = valid && t0 < encoded, in1 = valid && t1 < encoded;
      float (&acc_i)[4] = acc[j];
      const float x[4] = {in0 ? acc_i[0] : -INFINITY, in0 ? acc_i[1] : -INFINITY,
                          in1 ? acc_i[2] : -INFINITY, in1 ? acc_i[3] : -INFINITY};
      if (debug_logits != nullptr) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int n_head = 2 * (lane % 4) + hh - head_shift;
          if (n_head >= G) continue;
          float* to = debug_logits + (first_q + n_head) * a.logit_stride;
          if (in0) to[t0] = x[hh];
          if (in1) to[t1] = x[hh + 2];
        }
      }
      __half* tile_probs = out.probs + (tile - first) * Out::kProbs;
      float* stats = out.stats + (tile - first) * Out::kStats;
      if (!per_chunk) {
        RowTileEpilogue<G>(x, in0, in1, lane, head_shift, valid, tile_probs, stats);
      } else if constexpr (kPair) {
        WindowPairEpilogue<G>(x, lane, second, valid, ref, lane_sum, tile_probs, stats);
      } else {
        WindowTileEpilogue<G>(x, lane, ref, lane_sum, tile_probs, stats);
      }
    }
  }
  if constexpr (kByteKeys) {  // TilePrepare's row work, for the launches after this one
    ResidualLogits<D, G>(a, b, h, queries.scaled, queries.mean, chunk * kMmaWarps,
                         a.chunks * kMmaWarps);  // the row's warps share its window's tokens
    if (chunk == 0) {
      // TileWindowValues counts its blocks from here (one pass has no arrivals).
      if (threadIdx.x == 0 && a.arrivals != nullptr) a.arrivals[row] = 0;
      if (threadIdx.x == 0 && a.debug.totals != nullptr) {  // the Key bytes' share of the ledgers
        const tile::ReadSums reads =
            tile::KeyRowReads(encoded, static_cast<long long>(kGroups) * a.store_bits);
        atomicAdd(a.debug.totals, static_cast<unsigned long long>(reads.bits));
        atomicAdd(a.debug.totals + 1, static_cast<unsigned long long>(reads.bytes));
      }
      if (threadIdx.x < kGroups && a.debug.key_depths != nullptr) {
        a.debug.key_depths[row * kGroups + threadIdx.x] = static_cast<uint8_t>(a.store_bits);
      }
    }
  }
  // The chunk's statistics per head (M_c, sum over its tiles of sum e exp(M - M_c)), the warps
  // combined in order: TileWindowValues forms the row's from these. (-inf, 0) for a chunk
  // without tokens.
  if (!per_chunk) return;
  __shared__ float warp_stats[kMmaWarps][kMaxGroup][2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {  // the warp's sum of e per head, against its ref
#pragma unroll
    for (int o = 4; o < kWarp; o *= 2) {
      lane_sum[hh] += __shfl_xor_sync(0xffffffffu, lane_sum[hh], o);
    }
    if constexpr (kPair) lane_sum[hh] += __shfl_xor_sync(0xffffffffu, lane_sum[hh], 2);
  }
  if (lane < 4) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int n_head = 2 * lane + hh;
      if (n_head < G) {
        warp_stats[warp][n_head][0] = ref[hh];
        warp_stats[warp][n_head][1] = lane_sum[hh];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int q = threadIdx.x;
    float top = -INFINITY;
    for (int w = 0; w < kMmaWarps; ++w) top = fmaxf(top, warp_stats[w][q][0]);
    float total = 0.0f;
    if (top != -INFINITY) {
      for (int w = 0; w < kMmaWarps; ++w) {
        if (warp_stats[w][q][0] != -INFINITY) {
          total += warp_stats[w][q][1] * expf(warp_stats[w][q][0] - top);
        }
      }
    }
    out.chunk_stats[q] = top;
    out.chunk_stats[G + q] = total;
  }
}

template <int D, int G, bool kByteKeys>
__global__ void __launch_bounds__(kMmaThreads)
    TileLogits(TileArgs a, const __grid_constant__ tile::TileCentroids centroids) {
  __shared__ MmaBlockShared shared;
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const size_t row = RowOf(a, b, h);
  const size_t first = static_cast<size_t>(chunk) * (a.chunk_tokens / 16);
  const LogitsOut<G * 16, 3 * G> out{a.probs + (row * a.max_tiles + first) * G * 16,
                                     a.tile_stats + (row * a.max_tiles + first) * 3 * G,
                                     a.chunk_stats == nullptr
                                         ? nullptr
                                         : a.chunk_stats + (row * a.chunks + chunk) * 2 * G};
  LogitsOfChunk<D, G, kByteKeys>(a, centroids, shared.table, &shared.ring[0][0][0], chunk, h, b,
                                 out);
}

}  // namespace readkv::cuda::tile_kernels
