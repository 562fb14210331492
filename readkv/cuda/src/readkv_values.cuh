// ReadKV decode attention, launch 4 (Values): Value codes read at the chosen token depths,
// sum_i p_i centroid per chunk. Included only by readkv_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv_attention_state.cuh"

namespace readkv::cuda::readkv_kernels {

// ---- 4. Values -------------------------------------------------------------------------------

// spread[byte] puts bit k of the byte into the lowest bit of byte k of a 64-bit word.
__device__ __forceinline__ unsigned long long Spread(unsigned byte) {
  unsigned long long out = 0;
  for (int k = 0; k < 8; ++k) out |= static_cast<unsigned long long>((byte >> k) & 1u) << (8 * k);
  return out;
}

template <int D, int G>
__global__ void __launch_bounds__(kValueWarps * kWarp) Values(Args a) {
  constexpr int LPT = D / 8;
  constexpr int TPW = kWarp / LPT;
  constexpr int kStride = kValueWarps * TPW;
  constexpr int kPlaneBytes = D / 8;
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int chunk = blk.chunk, h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const int n = min(a.chunk_tokens, T - start);
  const int W = a.store_bits;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int sub = lane / LPT;
  const int lig = lane % LPT;
  __shared__ float centroids[kCentroids];
  __shared__ unsigned long long spread[256];
  __shared__ float stat_m[G], stat_inv[G];
  __shared__ float reduce[kValueWarps][G][D];
  __shared__ float mass_part[kValueWarps][G];

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  for (int j = threadIdx.x; j < (2 << W) - 1; j += blockDim.x) centroids[j] = a.codec.centroids[j];
  for (int j = threadIdx.x; j < 256; j += blockDim.x) spread[j] = Spread(j);
  if (threadIdx.x < G) {
    stat_m[threadIdx.x] = a.stats[(first_q + threadIdx.x) * 2];
    stat_inv[threadIdx.x] = a.stats[(first_q + threadIdx.x) * 2 + 1];
  }
  __syncthreads();

  const int32_t* pages = a.page_table + static_cast<size_t>(b) * a.max_pages;
  const uint8_t* depths = a.value_depths + (static_cast<size_t>(b) * a.heads_kv + h) * a.max_tokens;
  float acc[G][8];
  float mass[G];
#pragma unroll
  for (int q = 0; q < G; ++q) {
    mass[q] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[q][j] = 0.0f;
  }
  for (int i = warp * TPW + sub; i < n; i += kStride) {
    const int token = start + i;
    const int t = depths[token];
    const uint8_t* planes =
        a.value_planes +
        ((static_cast<size_t>(pages[token / kPageTokens]) * a.heads_kv + h) * kPageTokens +
         token % kPageTokens) *
            W * kPlaneBytes +
        lig;
    unsigned long long codes = 0;
    for (int p = 0; p < t; ++p) codes = (codes << 1) | spread[__ldg(planes + p * kPlaneBytes)];
    float p_q[G];
#pragma unroll
    for (int q = 0; q < G; ++q) {
      p_q[q] = expf(a.logits[(first_q + q) * a.max_tokens + token] - stat_m[q]) * stat_inv[q];
      mass[q] += p_q[q];
    }
    const float* table = centroids + (1 << t) - 1;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float centroid = table[(codes >> (8 * j)) & 0xffu];
#pragma unroll
      for (int q = 0; q < G; ++q) acc[q][j] = fmaf(p_q[q], centroid, acc[q][j]);
    }
  }
#pragma unroll
  for (int o = LPT; o < kWarp; o *= 2) {
#pragma unroll
    for (int q = 0; q < G; ++q) {
      mass[q] += __shfl_xor_sync(0xffffffffu, mass[q], o);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[q][j] += __shfl_xor_sync(0xffffffffu, acc[q][j], o);
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int q = 0; q < G; ++q) {
#pragma unroll
      for (int j = 0; j < 8; ++j) reduce[warp][q][lig * 8 + j] = acc[q][j];
      if (lig == 0) mass_part[warp][q] = mass[q];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    const int q = idx / D, c = idx % D;
    float sum = 0.0f;
#pragma unroll
    for (int wv = 0; wv < kValueWarps; ++wv) sum += reduce[wv][q][c];
    a.partial_out[((first_q + q) * a.max_chunks + chunk) * D + c] = sum;
  }
  if (threadIdx.x < G) {
    float sum = 0.0f;
    for (int wv = 0; wv < kValueWarps; ++wv) sum += mass_part[wv][threadIdx.x];
    a.partial_mass[(first_q + threadIdx.x) * a.max_chunks + chunk] = sum;
  }
}

}  // namespace readkv::cuda::readkv_kernels
