// The GPU tile reader's Value sums (tile_attention.h, launch 4): ValueSumsOfChunk, the work of
// one block over one chunk, and TileValues, the launch that runs it with TileSelect's depths
// (TileWindowValues, tile_window.cuh, runs it with its own). Internal.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tile_kernels.cuh"

namespace readkv::cuda::tile_kernels {

// ---- 4. TileValues -----------------------------------------------------------------------------
//
// Grid (chunks, H_kv, B) x 128. Each warp takes a contiguous quarter (<= 32, chunks <= 2048
// tokens) of the chunk's token tiles; lane i holds the depth of its i-th tile. Its tiles stream
// through its two-stage ring, a stage being consecutive tiles (<= 8) whose e values and maxima
// (TileLogits') and chosen planes (d / 16 group runs of t planes) fit kStageBytes, back to back. Per staged
// tile one depth dispatch, then for each channel group the t plane bytes from shared memory,
// the decode and one MMA with A = the value tile (channels x tokens) and B = the tile's
// unnormalised probabilities exp(l - max) = e exp(M - max) in f16 (16 tokens x 8 heads), into d / 16
// accumulators kept live over the warp's tiles. The warps' sums meet in shared memory (fixed
// order) and the chunk's partial sum_i e_i C(code_i) [G][d] goes to the workspace.

// What a Values warp looks up in memory before its first stage, for the warp's share of the
// token tiles [first, end) of row (b, h): lane i's tile's (the share's i-th) place in the Value
// pool, through the page table, and its Value list entries. No depth is needed, so
// TileWindowPass looks them up before its cluster barrier and the window's cut, under their
// latency.
struct ValueLaneLookups {
  const uint8_t* from;
  TileEntries list;
};
template <int D>
__device__ __forceinline__ ValueLaneLookups LookUpValueLanes(const TileArgs& a, int b, int h,
                                                             int first, int end) {
  const int lane = threadIdx.x % kWarp;
  const tile::WarpShare mine = tile::ShareOfWarp(first, end, threadIdx.x / kWarp);
  const int64_t tile_bytes = tile::TokenTileBytes(D, a.store_bits);
  return {lane < mine.count() ? TileAt(a, a.in.value_tiles, tile_bytes, b, h, mine.lo + lane)
                              : nullptr,
          LaneEntries(a, a.in.value_outlier_pages, b, h, mine.lo, mine.count(), lane)};
}

// That work for the token tiles [first, end) of row (b, h) (end > first, at most kTileMaxChunk /
// 16 tiles), their depths depths[0, end - first), the heads' maxima head_max[G] and the f16
// centroid table already in shared memory, the ring `ring_bytes` (kMmaWarps x kStages x
// kStageBytes of shared memory, 16-byte aligned); the partial [G][d] to `out` (the workspace's
// [kMaxGroup][d] slot). kOnChip: the tiles' heads (f16 e values [G][16], then maxima M [G],
// ValueHeadBytes(G) a tile) are in shared memory at heads, tile first + i's at
// heads + i * ValueHeadBytes(G); otherwise each is staged from the workspace before its planes.
// `lanes`: LookUpValueLanes(a, b, h, first, end) of this thread. Every thread of the block calls
// it; it synchronises the block.
template <int D, int G, bool kOnChip = false>
__device__ __forceinline__ void ValueSumsOfChunk(const TileArgs& a,
                                                 const tile::TileCentroids& centroids,
                                                 const uint16_t* table, const float* head_max,
                                                 const uint8_t* depths, int b, int h, int first,
                                                 int end, const ValueLaneLookups& lanes,
                                                 uint8_t* ring_bytes, const uint8_t* heads,
                                                 float* out) {
  constexpr int kGroups = D / 16;
  // A tile's head: its f16 e values [G][16] and its maxima M [G] (16-byte padded), staged at
  // the start of the tile unless kOnChip.
  constexpr int kHeadBytes = tile::ValueHeadBytes(G);
  constexpr int kLogitBytes = kOnChip ? 0 : kHeadBytes;
  using Ring = uint8_t[kMmaWarps][kStages][kStageBytes];
  static_assert(sizeof(float) * kMmaWarps * G * D <= sizeof(Ring), "the warps' sums reuse the ring");
  static_assert(kLogitBytes + kGroups * tile::kMaxTileDepth * 32 <= kStageBytes,
                "a stage holds at least one tile");
  auto& ring = *reinterpret_cast<Ring*>(ring_bytes);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const size_t row = RowOf(a, b, h);
  const tile::WarpShare mine = tile::ShareOfWarp(first, end, warp);
  const int count = mine.count();  // <= 32
  const int my_depth = lane < count ? depths[mine.lo - first + lane] : 0;
  const TileEntries my_list = lanes.list;
  const auto depth_of = [&](int i) { return __shfl_sync(0xffffffffu, my_depth, i); };
  const auto bytes_of = [](int t) { return tile::ValueTileBytes(t, kGroups, kLogitBytes); };
  const auto span = [&](int s) {  // tiles in the stage that starts at the warp's tile s
    return tile::ValueStageTiles(depth_of, s, count, kGroups, kLogitBytes);
  };
  // Lane i also holds where the warp's tile i starts in the pool (so a stage's issue reads the
  // page table through shuffles, not a load a tile) and the reciprocal of its 2 t (below).
  const uint8_t* my_from = lanes.from;
  const uint32_t my_recip = tile::PieceRunReciprocal(my_depth);
  const auto issue = [&](int slot, int s, int n) {
    uint8_t* to = ring[warp][slot];
    for (int i = 0; i < n; ++i) {
      const int t = depth_of(s + i), r = mine.lo + s + i;
      const size_t tile = row * a.max_tiles + r;
      static_assert(2 * kMaxGroup <= kWarp, "a lane per 16 bytes of a tile's e values");
      if constexpr (!kOnChip) {
        if (lane < 2 * G) CpAsync16(to + lane * 16, a.probs + tile * G * 16 + lane * 8);
        if (lane < G) CpAsync4(to + G * 32 + lane * 4, a.tile_stats + tile * 3 * G + lane);
      }
      const auto* from = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(
          ShuffleWord64(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(my_from)), s + i)));
      const uint32_t recip = __shfl_sync(0xffffffffu, my_recip, s + i);
      for (int o = lane; o < 2 * kGroups * t; o += kWarp) {  // planes: group o / 2t
        CpAsync16(to + kLogitBytes + o * 16,
                  from + tile::ValuePieceSourceBy(o, t, recip, a.store_bits));
      }
      to += bytes_of(t);
    }
    CpAsyncCommit();
  };
  const SharedTable lookup{table};
  const int n_head = lane / 4;  // this lane's head in B
  const float m = head_max[min(n_head, G - 1)];
  float acc[kGroups][4] = {};
  int s = 0, n = count > 0 ? span(0) : 0, slot = 0;
  if (n > 0) issue(0, s, n);
  while (n > 0) {
    const int next_s = s + n, next_n = next_s < count ? span(next_s) : 0;
    if (next_n > 0) {
      issue(slot ^ 1, next_s, next_n);
    } else {
      CpAsyncCommit();  // an empty group keeps the wait's count
    }
    CpAsyncWait<1>();
    __syncwarp();
    const uint8_t* staged = ring[warp][slot];
    for (int i = 0; i < n; ++i) {
      const int t = depth_of(s + i);
      const uint8_t* head = kOnChip ? heads + (mine.lo - first + s + i) * kHeadBytes : staged;
      // B: this lane's head n_head, tokens 2 (lane % 4) + {0, 1} and + 8: e exp(M - max).
      uint32_t p0 = 0, p1 = 0;
      if (n_head < G) {
        const auto* e = reinterpret_cast<const __half2*>(head) + n_head * 8 + lane % 4;
        const float tile_max = reinterpret_cast<const float*>(head + G * 32)[n_head];
        const float scale = __expf(tile_max - m);  // in f32: e may reach e^8 (a window's)
        const float2 f0 = __half22float2(e[0]), f1 = __half22float2(e[4]);
        const __half2 b0 = __floats2half2_rn(f0.x * scale, f0.y * scale);
        const __half2 b1 = __floats2half2_rn(f1.x * scale, f1.y * scale);
        p0 = *reinterpret_cast<const uint32_t*>(&b0);
        p1 = *reinterpret_cast<const uint32_t*>(&b1);
      }
      const uint8_t* planes = staged + kLogitBytes + lane;
      WithDepth(t, [&](auto depth_tag) {
        constexpr int T = decltype(depth_tag)::value;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          uint32_t bytes[T], frag[4];
#pragma unroll
          for (int p = 0; p < T; ++p) bytes[p] = planes[(g * T + p) * 32];
          tile::DecodeFragment<T>(bytes, centroids, lookup, frag);
          Mma(acc[g], frag, p0, p1);
        }
      });
      if (a.in.value_outlier_pages != nullptr) {
        AddValueOutliers<D, G>(EntriesFromLane(my_list, s + i), lane, t, head, head_max,
                               centroids, acc);
      }
      staged += bytes_of(t);
    }
    __syncwarp();  // the slot is refilled two stages on
    s = next_s;
    n = next_n;
    slot ^= 1;
  }
  if constexpr (kOnChip) StampValuesWarpEnd(a);
  __syncthreads();  // every warp is done with its ring: the warps' sums take its place
  auto& sums = *reinterpret_cast<float(*)[kMmaWarps][G][D]>(ring_bytes);
  // C: rows = channels (16 g + lane / 4, + 8), columns = heads (2 (lane % 4), + 1).
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int head = 2 * (lane % 4) + k % 2;
      if (head < G) sums[warp][head][16 * g + lane / 4 + 8 * (k / 2)] = acc[g][k];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    const int q = idx / D, c = idx % D;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) sum += sums[w][q][c];
    out[q * D + c] = sum;
  }
}

// The launch: the depths TileSelect chose, the maxima from its statistics.
template <int D, int G>
__global__ void __launch_bounds__(kMmaThreads)
    TileValues(TileArgs a, const __grid_constant__ tile::TileCentroids centroids) {
  __shared__ MmaBlockShared shared;
  __shared__ float head_max[kMaxGroup];
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const size_t row = RowOf(a, b, h);
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const int tiles = (a.in.encoded_lens[b] + 15) / 16;
  const int first = chunk * (a.chunk_tokens / 16);
  if (first >= tiles) return;  // the block-uniform exit of a chunk past the sequence
  LoadTable(centroids, shared.table);
  if (threadIdx.x < G) head_max[threadIdx.x] = a.stats[(first_q + threadIdx.x) * 4];
  __syncthreads();
  const int end = min(tiles, first + a.chunk_tokens / 16);
  ValueSumsOfChunk<D, G>(a, centroids, shared.table, head_max,
                         a.value_depths + row * a.max_tiles + first, b, h, first, end,
                         LookUpValueLanes<D>(a, b, h, first, end), &shared.ring[0][0][0], nullptr,
                         a.partials + (row * a.chunks + chunk) * kMaxGroup * D);
}

}  // namespace readkv::cuda::tile_kernels
