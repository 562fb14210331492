// readkv_plane_logits' kernels (plane_logits.cu, CUDA C++17) and what its host side
// (plane_logits_main.cc, C++20 with the codec) hands them. The prototype, its algebra and its
// layout are described in plane_logits_main.cc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace readkv::cuda::plane_logits {

constexpr int kStoreBits = 8;  // W: planes stored per tile
constexpr int kDim = 128;      // d
constexpr int kGroup = 4;      // query heads per KV head
constexpr int kWarps = 4;      // warps per block
constexpr int kTilesPerWarp = 32;
constexpr int kUnroll = 4;     // tiles whose planes are loaded before any is computed
constexpr int kMaxTerms = 8;   // odd plane sets of depth 4

// The odd plane sets of depth t, as masks (bit p = plane p), in the order the kernel applies
// their coefficients. Returns their count, 2^(t-1).
__host__ __device__ constexpr int OddMasks(int t, int* out) {
  int n = 0;
  for (int m = 1; m < (1 << t); ++m) {
    int bits = 0;
    for (int x = m; x != 0; x >>= 1) bits += x & 1;
    if (bits % 2 == 1) out[n++] = m;
  }
  return n;
}

struct Args {
  const uint2* keys = nullptr;      // [B][H][tiles][W][32]: A fragments (plane_logits_main.cc)
  const uint32_t* qbits = nullptr;  // [B][H][G][32]: B fragment of head g: column j = bit j
  const float* scale = nullptr;     // [B][H][G]: 2 x the query's scale x 2^-k
  const float* constant = nullptr;  // [B][H][G]: scale 2^-k sum_S A_S sum_c q_int_c
  int coeff[kMaxTerms] = {};        // A_S = round(a_S 2^k), in OddMasks order
  int heads_kv = 0, tiles = 0;      // tiles (of 16 tokens) per (b, h)
  float* logits = nullptr;          // [B][H * G][tiles * 16] (write mode)
  float* stats = nullptr;           // [B][H][warps per (b, h)][G][2]: max, sum exp (else)
};

// Warps per (b, h) and the grid of one call.
inline int WarpsPerRow(int tiles) { return (tiles + kTilesPerWarp - 1) / kTilesPerWarp; }

// The logits of every token at depth t in [1, 4] for `batch` x heads_kv rows: written to
// a.logits (write) or reduced to softmax statistics in a.stats.
cudaError_t LaunchPlaneLogits(int depth, bool write, const Args& a, int batch);
// A streaming read of `words` uint2 per tile at a stride of `stride` uint2 (rows x tiles).
cudaError_t LaunchStreamRead(const uint2* data, int batch, int heads, int tiles, int words,
                             int stride, uint32_t* sink);
// Pseudo-random words (the speed runs' planes: time does not depend on values).
cudaError_t LaunchFillRandom(uint2* words, size_t n);
// Checks the m16n8k128 .b1 fragment layout the kernels assume against CPU popcounts on random
// operands; prints the result. False when it differs (or on a CUDA error).
bool ProbeLayout();

}  // namespace readkv::cuda::plane_logits
