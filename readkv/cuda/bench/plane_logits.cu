// readkv_plane_logits' kernels (plane_logits.h; the prototype is described in
// plane_logits_main.cc): the key logits from b1 AND-popc MMAs on the planes as stored, and the
// streaming reads they are timed against.
#include "plane_logits.h"

#include <cstdio>
#include <random>
#include <vector>

namespace readkv::cuda::plane_logits {
namespace {

// acc += the terms of depth t (those of the pairs read at depth t): for each odd plane set S of t
// planes, b_S (the XOR of its planes) against q_t's bit columns, weighted by A_{t,S}.
template <int t>
__device__ __forceinline__ void AddDepthTerms(int (&acc)[kGroup][4], const uint2* planes,
                                              const uint32_t (&q)[kGroup], const int* coeff) {
  constexpr Terms<t> kTerms;
#pragma unroll
  for (int s = 0; s < (1 << (t - 1)); ++s) {
    uint32_t x0 = 0, x1 = 0;
#pragma unroll
    for (int p = 0; p < t; ++p) {
      if (kTerms.mask[s] & (1 << p)) {
        x0 ^= planes[p].x;
        x1 ^= planes[p].y;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      int d[4] = {0, 0, 0, 0};
      MmaB1(d, x0, x1, q[g]);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[g][i] += coeff[s] * d[i];
    }
  }
}

// One warp: kTilesPerWarp tiles of one (b, h), whose pairs' depths are at most T. kWrite: every
// logit to `logits` (for the checks); else the four heads' running max and sum of exp, one pair
// per head and warp at the end.
template <int T, bool kWrite>
__global__ void __launch_bounds__(kWarps * 32) PlaneLogits(Args a) {
  const int lane = threadIdx.x % 32, warp_in_block = threadIdx.x / 32;
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = blockIdx.x * kWarps + warp_in_block;  // within (b, h)
  const size_t bh = static_cast<size_t>(b) * a.heads_kv + h;
  // The depths present in the row (uniform over the warp) and this lane's pair's.
  unsigned present = 0;
#pragma unroll
  for (int i = 0; i < kPairs; ++i) present |= 1u << a.pair_depth[bh * kPairs + i];
  const int my_depth = a.pair_depth[bh * kPairs + lane % 4];
  uint32_t q[kMaxDepth][kGroup];
  float scale[kGroup], constant[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int t = 0; t < T; ++t) q[t][g] = a.qbits[((bh * kMaxDepth + t) * kGroup + g) * 32 + lane];
    scale[g] = a.scale[bh * kGroup + g];
    constant[g] = a.constant[bh * kGroup + g];
  }
  // Lane's columns: bits j0 = 2 (lane % 4) and j0 + 1 of every head; weight of bit 7 is -128.
  const int j0 = 2 * (lane % 4);
  const int w0 = 1 << j0, w1 = j0 + 1 == 7 ? -128 : 1 << (j0 + 1);
  const int my_head = lane % 4;  // after the quad's sums, this lane keeps head lane % 4
  float run_max = -INFINITY, run_sum = 0.0f;
  const int first = warp * kTilesPerWarp;
  if (first >= a.tiles) return;  // the grid's last block may hold warps past the row
  for (int t0 = first; t0 < first + kTilesPerWarp && t0 < a.tiles; t0 += kUnroll) {
    uint2 planes[kUnroll][T];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int p = 0; p < T; ++p) {
        planes[u][p] = t0 + u < a.tiles && p < my_depth
                           ? __ldg(a.keys + PlaneWord(a.layout, bh, a.tiles, t0 + u, p, lane))
                           : make_uint2(0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int acc[kGroup][4] = {};
      if (present & 2u) AddDepthTerms<1>(acc, planes[u], q[0], a.coeff[0]);
      if constexpr (T >= 2) {
        if (present & 4u) AddDepthTerms<2>(acc, planes[u], q[1], a.coeff[1]);
      }
      if constexpr (T >= 3) {
        if (present & 8u) AddDepthTerms<3>(acc, planes[u], q[2], a.coeff[2]);
      }
      if constexpr (T >= 4) {
        if (present & 16u) AddDepthTerms<4>(acc, planes[u], q[3], a.coeff[3]);
      }
      // Rows lane / 4 (i = 0, 1) and lane / 4 + 8 (i = 2, 3): weight the lane's two bits, then
      // sum the quad's four lanes (all eight bits).
      float logit[kGroup][2];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int v = QuadColumnSum(acc[g], r, w0, w1);
          logit[g][r] = static_cast<float>(v) * scale[g] - constant[g];
        }
      }
      if (t0 + u >= a.tiles) continue;
      if constexpr (kWrite) {
        // Lane with lane % 4 == g writes head g's two rows.
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          if (my_head != g) continue;
          float* row = a.logits + (bh * kGroup + g) * (static_cast<size_t>(a.tiles) * 16) +
                       static_cast<size_t>(t0 + u) * 16;
          row[lane / 4] = logit[g][0];
          row[lane / 4 + 8] = logit[g][1];
        }
      } else {
        float x0 = logit[0][0], x1 = logit[0][1];
#pragma unroll
        for (int g = 1; g < kGroup; ++g) {
          if (my_head == g) {
            x0 = logit[g][0];
            x1 = logit[g][1];
          }
        }
        const float m = fmaxf(run_max, fmaxf(x0, x1));
        run_sum = run_sum * __expf(run_max - m) + __expf(x0 - m) + __expf(x1 - m);
        run_max = m;
      }
    }
  }
  if constexpr (!kWrite) {
    // The eight lanes of each head (lane % 4 equal) merge their running pairs.
#pragma unroll
    for (int o = 4; o < 32; o *= 2) {
      const float om = __shfl_xor_sync(0xffffffffu, run_max, o);
      const float os = __shfl_xor_sync(0xffffffffu, run_sum, o);
      const float m = fmaxf(run_max, om);
      run_sum = (m == -INFINITY) ? 0.0f : run_sum * __expf(run_max - m) + os * __expf(om - m);
      run_max = m;
    }
    if (lane < 4) {
      const int warps = (a.tiles + kTilesPerWarp - 1) / kTilesPerWarp;
      float* out = a.stats + ((bh * warps + warp) * kGroup + lane) * 2;
      out[0] = run_max;
      out[1] = run_sum;
    }
  }
}

// LaunchStreamRead: each lane loads its uint2 of planes 0..depth-1 of each tile, one XOR each,
// kept alive by one store per warp.
__global__ void __launch_bounds__(kWarps * 32) StreamRead(const uint2* data, int tiles, int depth,
                                                          int layout, const uint8_t* pair_depth,
                                                          uint32_t* sink) {
  const int lane = threadIdx.x % 32;
  const int warp = blockIdx.x * kWarps + threadIdx.x / 32;
  const size_t bh = static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y;
  if (pair_depth != nullptr) depth = pair_depth[bh * kPairs + lane % 4];
  uint32_t x = 0;
  const int first = warp * kTilesPerWarp;
  for (int t = first; t < first + kTilesPerWarp && t < tiles; ++t) {
#pragma unroll 4
    for (int p = 0; p < depth; ++p) {
      const uint2 v = __ldg(data + PlaneWord(layout, bh, tiles, t, p, lane));
      x ^= v.x ^ v.y;
    }
  }
  x = __reduce_xor_sync(0xffffffffu, x);
  if (lane == 0) sink[(bh * gridDim.x + blockIdx.x) * kWarps + threadIdx.x / 32] = x;
}

// Random plane words for the speed runs (the time does not depend on values).
__global__ void FillRandom(uint2* words, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    words[i] = make_uint2(static_cast<uint32_t>(x), static_cast<uint32_t>(x >> 32));
  }
}


// The m16n8k128 .b1 fragment layout assumed above, checked on one warp against popcounts.
__global__ void LayoutProbe(const uint32_t* a, const uint32_t* b, int* d) {
  const int lane = threadIdx.x;
  int acc[4] = {0, 0, 0, 0};
  MmaB1(acc, a[2 * lane], a[2 * lane + 1], b[lane]);
  for (int i = 0; i < 4; ++i) d[4 * lane + i] = acc[i];
}

}  // namespace

#define CUDA_CHECK(expr)                                                             \
  do {                                                                               \
    const cudaError_t e = (expr);                                                    \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "readkv_plane_logits: %s: %s\n", #expr, cudaGetErrorString(e)); \
      return false;                                                                  \
    }                                                                                \
  } while (0)

bool ProbeLayout() {
  std::mt19937 rng(7);
  std::vector<uint32_t> a(64), b(32);
  for (auto& x : a) x = rng();
  for (auto& x : b) x = rng();
  // Assumed: A[row][k]: lane L holds row L/4 (.x) and L/4 + 8 (.y), k = 32 (L % 4) + bit;
  // B[k][n]: lane L holds column L/4, k = 32 (L % 4) + bit; D[row][n]: lane L holds rows L/4,
  // L/4 + 8 and columns 2 (L % 4), 2 (L % 4) + 1.
  auto A = [&](int row, int k) {
    const int lane = 4 * (row % 8) + k / 32;
    return (a[2 * lane + (row >= 8)] >> (k % 32)) & 1u;
  };
  auto B = [&](int k, int n) { return (b[4 * n + k / 32] >> (k % 32)) & 1u; };
  uint32_t *da, *db;
  int* dd;
  CUDA_CHECK(cudaMalloc(&da, 64 * 4));
  CUDA_CHECK(cudaMalloc(&db, 32 * 4));
  CUDA_CHECK(cudaMalloc(&dd, 128 * 4));
  CUDA_CHECK(cudaMemcpy(da, a.data(), 64 * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(db, b.data(), 32 * 4, cudaMemcpyHostToDevice));
  LayoutProbe<<<1, 32>>>(da, db, dd);
  std::vector<int> d(128);
  CUDA_CHECK(cudaMemcpy(d.data(), dd, 128 * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const int row = lane / 4 + (i >= 2 ? 8 : 0), n = 2 * (lane % 4) + (i & 1);
      int want = 0;
      for (int k = 0; k < 128; ++k) want += static_cast<int>(A(row, k) & B(k, n));
      bad += d[4 * lane + i] != want;
    }
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  std::printf("fragment layout (m16n8k128 .b1 and.popc): %s (%d of 128 values differ)\n",
              bad ? "DIFFERS" : "as assumed", bad);
  return bad == 0;
}


cudaError_t LaunchPlaneLogits(int depth, bool write, const Args& a, int batch) {
  if (a.layout < 0 || a.layout > 2 || (a.layout == 1 && a.tiles % 16 != 0) ||
      a.pair_depth == nullptr) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid((WarpsPerRow(a.tiles) + kWarps - 1) / kWarps, a.heads_kv, batch);
  const dim3 block(kWarps * 32);
  switch (depth * 2 + (write ? 1 : 0)) {
    case 2: PlaneLogits<1, false><<<grid, block>>>(a); break;
    case 3: PlaneLogits<1, true><<<grid, block>>>(a); break;
    case 4: PlaneLogits<2, false><<<grid, block>>>(a); break;
    case 5: PlaneLogits<2, true><<<grid, block>>>(a); break;
    case 6: PlaneLogits<3, false><<<grid, block>>>(a); break;
    case 7: PlaneLogits<3, true><<<grid, block>>>(a); break;
    case 8: PlaneLogits<4, false><<<grid, block>>>(a); break;
    case 9: PlaneLogits<4, true><<<grid, block>>>(a); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchStreamRead(const uint2* data, int batch, int heads, int tiles, int depth,
                             int layout, const uint8_t* pair_depth, uint32_t* sink) {
  if (depth < 1 || depth > kStoreBits || layout < 0 || layout > 2 ||
      (layout == 1 && tiles % 16 != 0) || (pair_depth != nullptr && layout != 2)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid((WarpsPerRow(tiles) + kWarps - 1) / kWarps, heads, batch);
  StreamRead<<<grid, kWarps * 32>>>(data, tiles, depth, layout, pair_depth, sink);
  return cudaGetLastError();
}

cudaError_t LaunchFillRandom(uint2* words, size_t n) {
  FillRandom<<<1024, 256>>>(words, n);
  return cudaGetLastError();
}

}  // namespace readkv::cuda::plane_logits
