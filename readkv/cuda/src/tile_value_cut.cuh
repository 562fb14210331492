// The Value cut of the GPU tile reader, shared by TileSelect (over a row) and TileWindowValues
// (over a window): block weights from the tiles' softmax statistics, the threshold allocator's
// cut and each block's depth (tile_attention.h). Included only through tile_attention.cu.
// Internal.
#pragma once

#include <cuda_runtime.h>

#include "readkv_device.cuh"
#include "tile_kernel_args.cuh"

namespace readkv::cuda::tile_kernels {

// ---- The Value cut, shared by TileSelect (over a row) and TileWindowValues (over a window) ----

// One head's share of a tile's weight: (sum e^2) exp(2 (M - max)) / S^2, e against M.
__device__ __forceinline__ double HeadBlockWeight(float sum_sq, float tile_max, float head_max,
                                                  double head_inv) {
  const double scale = expf(2.0f * (tile_max - head_max)) * head_inv * head_inv;
  return static_cast<double>(sum_sq) * scale;
}

// A token tile's Value block weight, sum_h sum_i p_hi^2, from its statistics st (TileLogits': M
// [G], sum e [G], sum e^2 [G]) and the row's per-head maximum and 1 / sum:
// sum_h (sum e^2) exp(2 (M - max_h)) / S_h^2, in double.
template <int G>
__device__ __forceinline__ double ValueBlockWeight(const float* st, const float* head_max,
                                                   const double* head_inv) {
  double w = 0.0;
#pragma unroll
  for (int q = 0; q < G; ++q) w += HeadBlockWeight(st[2 * G + q], st[q], head_max[q], head_inv[q]);
  return w;
}

// The same weight with a Value window, where TileLogits writes per tile only M [G] (its
// reference maxima) and the e values [G][16] (f16, against M): sum e^2 from those, in f32.
template <int G>
__device__ __forceinline__ double ValueBlockWeightOfProbs(const float* tile_max,
                                                          const __half* tile_probs,
                                                          const float* head_max,
                                                          const double* head_inv) {
  double w = 0.0;
#pragma unroll
  for (int q = 0; q < G; ++q) {
    const auto* e = reinterpret_cast<const uint4*>(tile_probs + q * 16);
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint4 v = e[k];
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
        sq = fmaf(f.x, f.x, sq);
        sq = fmaf(f.y, f.y, sq);
      }
    }
    w += HeadBlockWeight(sq, tile_max[q], head_max[q], head_inv[q]);
  }
  return w;
}

// What the threshold allocator does with objects weights[0, n) (the blocks of a row or of a
// window, each with `spo` steps of increments inc): the steps the budget floor(R_V n) buys above
// t_min (clamped), and when fewer than `positive` (the objects' leading positive steps, summed
// over the block) the cut, the steps-th largest gain in greedy's order, found by BlockSelect.
// Every thread of the block calls it (uniform); thread t owns objects t, t + blockDim.x, ...
struct ValueCut {
  internal::GreedyCut cut{0.0, 0u};
  long long steps = 0;
  bool cutting = false;
};
__device__ __forceinline__ ValueCut CutValueBlocks(const double* weights, int n, long long positive,
                                                   double value_bits, const double* inc, int spo,
                                                   internal::SelectShared& selection) {
  ValueCut c;
  c.steps = internal::FloorBudget(value_bits, static_cast<double>(n)) - n;
  if (c.steps > static_cast<long long>(n) * spo) c.steps = static_cast<long long>(n) * spo;
  c.cutting = c.steps > 0 && positive > c.steps;
  if (c.cutting) {
    c.cut = internal::BlockSelect(
        [&](auto&& f) {
          for (int j = static_cast<int>(threadIdx.x); j < n; j += static_cast<int>(blockDim.x)) {
            const double w = weights[j];
            const auto first_key = static_cast<unsigned>(j) << kStepBits;
            internal::ForPositiveSteps<kMaxSteps>(w, inc, spo, [&](int s, double gain) {
              f(internal::GainBits(gain), ~(first_key + s));
            });
          }
        },
        64, 0ull, 0ull, c.steps, positive, selection);
  }
  return c;
}

// The depth of object j (weight w) under that cut: 1 + the steps taken.
__device__ __forceinline__ uint8_t ValueBlockDepth(const ValueCut& c, double w, int j,
                                                   const double* inc, int spo) {
  int k = 0;
  if (c.cutting) {
    k = internal::StepsTaken<kMaxSteps>(w, inc, spo, static_cast<unsigned>(j) << kStepBits, c.cut);
  } else if (c.steps > 0) {
    k = internal::CountAbove(w, 0.0, inc, spo, 0);
  }
  return static_cast<uint8_t>(1 + k);
}

}  // namespace readkv::cuda::tile_kernels
