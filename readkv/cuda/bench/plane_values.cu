// readkv_plane_logits' Value kernel (plane_logits.h, "The Value side"): the weighted sum of a
// chunk's values from b1 AND-popc MMAs, k along tokens, the probabilities' 8 bit planes made by
// ballots in the kernel.
#include "plane_logits.h"

namespace readkv::cuda::plane_logits {
namespace {

// Block (chunk, h, b): warp g is query head g of KV head h; it reads every channel group of the
// chunk's blocks (the four warps read the same planes, from L1 after the first) and writes the
// chunk's partial output of its head.
template <int T>
__global__ void __launch_bounds__(kGroup * 32) PlaneValues(ValueArgs a) {
  constexpr Terms<T> kTerms;
  const int lane = threadIdx.x % 32, g = threadIdx.x / 32;
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const size_t bh = static_cast<size_t>(b) * a.heads_kv + h;
  int acc[kChannelGroups][4] = {};
  int u_sum = 0;  // this lane's tokens' u
  for (int blk = chunk * kChunkBlocks; blk < (chunk + 1) * kChunkBlocks; ++blk) {
    // B: lane L holds bit j = L / 4 of u over tokens 32 (L % 4) + i: ballot c, bit j.
    uint32_t bword = 0;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint32_t u = ProbabilityByte(bh, g, blk * kBlockTokens + 32 * c + lane);
      u_sum += static_cast<int>(u);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t w = __ballot_sync(0xffffffffu, (u >> j) & 1u);
        bword = lane == 4 * j + c ? w : bword;
      }
    }
    uint2 planes[kChannelGroups][T];
#pragma unroll
    for (int cg = 0; cg < kChannelGroups; ++cg) {
#pragma unroll
      for (int p = 0; p < T; ++p) planes[cg][p] = __ldg(a.values + ValueWord(bh, a.blocks, blk, cg, p, lane));
    }
#pragma unroll
    for (int s = 0; s < (1 << (T - 1)); ++s) {
      const int coeff = a.coeff[s];
#pragma unroll
      for (int cg = 0; cg < kChannelGroups; ++cg) {
        uint32_t x0 = 0, x1 = 0;
#pragma unroll
        for (int p = 0; p < T; ++p) {
          if (kTerms.mask[s] & (1 << p)) {
            x0 ^= planes[cg][p].x;
            x1 ^= planes[cg][p].y;
          }
        }
        int d[4] = {0, 0, 0, 0};
        MmaB1(d, x0, x1, bword);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[cg][i] += coeff * d[i];
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) u_sum += __shfl_xor_sync(0xffffffffu, u_sum, o);
  int coeff_sum = 0;
#pragma unroll
  for (int s = 0; s < (1 << (T - 1)); ++s) coeff_sum += a.coeff[s];
  const int j0 = 2 * (lane % 4);
  const int w0 = 1 << j0, w1 = 1 << (j0 + 1);  // u is unsigned: every bit weighs 2^j
  const int chunks = a.blocks / kChunkBlocks;
  float* out = a.out + ((bh * chunks + chunk) * kGroup + g) * kDim;
#pragma unroll
  for (int cg = 0; cg < kChannelGroups; ++cg) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int v = QuadColumnSum(acc[cg], r, w0, w1);
      if (lane % 4 == 0) {
        out[16 * cg + lane / 4 + 8 * r] =
            a.unit * (2.0f * static_cast<float>(v) -
                      static_cast<float>(coeff_sum) * static_cast<float>(u_sum));
      }
    }
  }
}

}  // namespace

cudaError_t LaunchPlaneValues(int depth, const ValueArgs& a, int batch) {
  if (a.blocks % kChunkBlocks != 0 || a.blocks <= 0) return cudaErrorInvalidValue;
  const dim3 grid(a.blocks / kChunkBlocks, a.heads_kv, batch);
  switch (depth) {
    case 1: PlaneValues<1><<<grid, kGroup * 32>>>(a); break;
    case 2: PlaneValues<2><<<grid, kGroup * 32>>>(a); break;
    case 3: PlaneValues<3><<<grid, kGroup * 32>>>(a); break;
    case 4: PlaneValues<4><<<grid, kGroup * 32>>>(a); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace readkv::cuda::plane_logits
