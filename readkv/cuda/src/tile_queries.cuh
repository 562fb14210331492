// A row's folded queries and its residual window's logits: the query-side work of the GPU tile
// reader, done by TilePrepare for tree keys and by each byte-key TileLogits block for itself
// (tile_attention.h, launches 1-2). Included only through tile_attention.cu. Internal.
//
// Why byte-key blocks fold their own queries: with every group at depth 8 the Key allocator has
// nothing to choose, so all TilePrepare had left to do was this, for a launch of its own between
// the call's start and its first Key byte. Each TileLogits block issues its first stage's loads
// (which need no query) and then folds, so the work overlaps the loads' latency instead of adding
// a launch to the call.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "readkv_device.cuh"
#include "tile_kernel_args.cuh"

namespace readkv::cuda::tile_kernels {

// Shared memory of FoldRowQueries, in two parts. RowQueryKeep is what its readers use after it
// (the Key lists and the residual window's logits); RowQueryScratch's three arrays are dead once
// every warp has taken its B fragments, so a byte-key Logits block keeps them in its warps'
// second staging slots, which nothing fills until its first stage is decoded (LogitsOfChunk),
// and TileWindowPass's block fits five to an SM (tile_window_pass.cuh). TilePrepare declares
// its own.
template <int D, int G>
struct RowQueryKeep {
  float scaled[D * G];  // [D][G]: scale q~ (f32), as TileArgs::scaled_queries
  float mean[D];        // the Key means of the row's KV head
};
template <int D>
struct RowQueryScratch {
  float (*x)[128];       // kMaxGroup rows: the transform's (FwhtChannelRows)
  uint16_t (*folded)[D];  // kMaxGroup rows: f16 of scale q~ sigma; rows >= G are zero
  uint2* frags;          // [D / 16 * kWarp]: B fragments, group g and lane l at g * 32 + l
};

// The folded queries of row (b, h): the transform (codec::Fwht's butterflies) of the sign-flipped
// queries, scale q~ into keep.scaled, f16(scale q~ sigma) into s.folded, and the B fragments of
// m16n8k16 in lane order (lane l holds head l / 4 at channels 16 g + 2 (l % 4) + {0, 1} and + 8)
// into s.frags; keep.mean gets the Key means. v returns thread c's transformed queries q~
// (unscaled; TilePrepare's channel importance uses them). Every thread of the block calls it
// (blockDim.x >= D; thread c < D owns channel c); the results are complete for the whole block on
// return.
template <int D, int G>
__device__ __forceinline__ void FoldRowQueries(const TileArgs& a, int b, int h,
                                               const RowQueryScratch<D>& s,
                                               RowQueryKeep<D, G>& keep, float (&v)[kMaxGroup]) {
  constexpr int kGroups = D / 16;
  const int c = threadIdx.x;
  const bool mine = c < D;
  const size_t channel = static_cast<size_t>(h) * D + c;
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const float sign = mine ? a.codec.key_signs[channel] : 1.0f;
  const float sd = mine ? a.codec.key_std[channel] : 0.0f;
  if (mine) keep.mean[c] = a.codec.key_mean[channel];
#pragma unroll
  for (int q = 0; q < kMaxGroup; ++q) {
    const float y = mine && q < G ? a.in.queries[(first_q + q) * D + c] : 0.0f;
    v[q] = sign < 0.0f ? -y : y;
  }
  internal::FwhtChannelRows<kMaxGroup>(v, G, D, a.transform_scale, s.x);
  if (mine) {
#pragma unroll
    for (int q = 0; q < kMaxGroup; ++q) {
      const float scaled = q < G ? v[q] * a.attention_scale : 0.0f;
      if (q < G) keep.scaled[c * G + q] = scaled;
      s.folded[q][c] = __half_as_ushort(__float2half_rn(scaled * sd));
    }
  }
  __syncthreads();
  for (int idx = c; idx < kGroups * kWarp; idx += blockDim.x) {
    const int g = idx / kWarp, l = idx % kWarp;
    const int n = l / 4, k0 = 16 * g + 2 * (l % 4);
    const uint16_t* f = &s.folded[n][k0];
    const uint32_t b0 = f[0] | (uint32_t{f[1]} << 16);
    const uint32_t b1 = f[8] | (uint32_t{f[9]} << 16);
    s.frags[idx] = make_uint2(b0, b1);
  }
  __syncthreads();
}

// The residual window's exact logits of row (b, h), scale q~ . (k - mu), into TileArgs::logits:
// warp w of the block takes tokens first + w, first + w + stride, ... (a warp a token; every lane
// sums its channels, then the warp). scaled and mean are FoldRowQueries' (shared memory).
template <int D, int G>
__device__ __forceinline__ void ResidualLogits(const TileArgs& a, int b, int h,
                                               const float* scaled, const float* mean,
                                               int first, int stride) {
  const int lane = threadIdx.x % kWarp;
  const size_t row = RowOf(a, b, h);
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const int residual = a.in.residual_lens[b];
  const uint16_t* keys = a.in.residual_keys + row * a.max_residual * D;
  for (int r = first + static_cast<int>(threadIdx.x) / kWarp; r < residual; r += stride) {
    float dot[G] = {};
    for (int ch = lane; ch < D; ch += kWarp) {
      const float k =
          __uint_as_float(uint32_t{keys[static_cast<size_t>(r) * D + ch]} << 16) - mean[ch];
#pragma unroll
      for (int q = 0; q < G; ++q) dot[q] += scaled[ch * G + q] * k;
    }
#pragma unroll
    for (int q = 0; q < G; ++q) {
      const float total = internal::WarpSum(dot[q]);
      if (lane == 0) a.logits[(first_q + q) * a.max_residual + r] = total;
    }
  }
}

}  // namespace readkv::cuda::tile_kernels
