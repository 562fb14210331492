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

// The masks of depth T at compile time (the kernels unroll over them).
template <int T>
struct Terms {
  int mask[kMaxTerms] = {};
  constexpr Terms() { OddMasks(T, mask); }
};

#ifdef __CUDACC__
// d += popc(A AND B) over k = 128: A 16 x 128 bits (a0 rows lane / 4, a1 rows lane / 4 + 8, bit i
// the column 32 (lane % 4) + i), B 128 x 8 (b: column lane / 4, same bits), d the 16 x 8 int32
// (rows lane / 4 and + 8, columns 2 (lane % 4) and + 1). ProbeLayout checks this on the GPU.
__device__ __forceinline__ void MmaB1(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm("mma.sync.aligned.m16n8k128.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b));
}

// Row r's (0: lane / 4, 1: lane / 4 + 8) sum over all 8 columns of an MMA accumulator whose
// columns weigh w_j: this lane's two (j0 = 2 (lane % 4) and j0 + 1, weights w0, w1), then the
// quad's four lanes. Every lane of the quad gets it.
__device__ __forceinline__ int QuadColumnSum(const int (&acc)[4], int r, int w0, int w1) {
  int v = acc[2 * r] * w0 + acc[2 * r + 1] * w1;
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
#endif

// Where lane `lane`'s uint2 of plane `plane` of token tile `tile` of row bh (of `tiles` tiles)
// sits. Layout 0, tile-major: [bh][tile][plane][lane], a tile's W planes together (depth t reads
// t x 256 contiguous bytes a tile, as the tile pools keep a tile's planes). Layout 1,
// page-major: [bh][page of 16 tiles][plane][tile][lane], a page's plane together (depth t reads
// t x 4 KB contiguous a page; needs tiles % 16 == 0). Layout 2, pair-major: layout 0 with the
// 32 words of a plane ordered by channel pair (lane % 4) first, so a pair's 8 lanes' words are
// 64 contiguous bytes and a pair whose depth stops short of a plane costs none of its sectors.
__host__ __device__ inline size_t PlaneWord(int layout, size_t bh, int tiles, int tile, int plane,
                                            int lane) {
  if (layout == 1) {
    const size_t page = bh * static_cast<size_t>(tiles / 16) + tile / 16;
    return ((page * kStoreBits + plane) * 16 + tile % 16) * 32 + lane;
  }
  const int slot = layout == 2 ? (lane % 4) * 8 + lane / 4 : lane;
  return ((bh * tiles + tile) * kStoreBits + plane) * 32 + slot;
}

// Key depths: per row (b, h) each of the 4 channel pairs (32 channels: the bits of one lane's
// word) has its own depth in 1..kMaxDepth, the tile reader's per-16-channel depths at pair
// granularity. A depth t present in a row costs its 2^(t-1) terms, each an MMA whose B operand
// is the query's bits masked to the pairs at depth t; a pair's planes past its depth are never
// loaded. Uniform depth t is every pair at t.
constexpr int kPairs = 4;
constexpr int kMaxDepth = 4;

struct Args {
  const uint2* keys = nullptr;         // PlaneWord's layout
  const uint8_t* pair_depth = nullptr;  // [B][H][kPairs], each in 1..kMaxDepth
  const uint32_t* qbits = nullptr;     // [B][H][kMaxDepth][G][32]: B fragment of head g for
                                       // depth t (index t - 1): column j = bit j of q_int over
                                       // the pairs at depth t (zero elsewhere)
  const float* scale = nullptr;        // [B][H][G]: 2 x the query's scale x 2^-k
  const float* constant = nullptr;     // [B][H][G]: scale 2^-k sum_t sum_S A_{t,S} sum_{c at t} q_int_c
  int coeff[kMaxDepth][kMaxTerms] = {};  // A_{t,S} = round(a_{t,S} 2^k), OddMasks(t) order
  int heads_kv = 0, tiles = 0;         // tiles (of 16 tokens) per (b, h)
  int layout = 0;                      // PlaneWord's
  float* logits = nullptr;             // [B][H * G][tiles * 16] (write mode)
  float* stats = nullptr;              // [B][H][warps per (b, h)][G][2]: max, sum exp (else)
};

// Warps per (b, h) and the grid of one call.
inline int WarpsPerRow(int tiles) { return (tiles + kTilesPerWarp - 1) / kTilesPerWarp; }

// The logits of every token for `batch` x heads_kv rows, max_depth in [1, kMaxDepth] the
// largest of a.pair_depth: written to a.logits (write) or reduced to softmax statistics.
cudaError_t LaunchPlaneLogits(int max_depth, bool write, const Args& a, int batch);
// A streaming read of every tile's planes 0..depth-1 in `layout` (rows x tiles), or with
// pair_depth ([B][H][kPairs], layout 2) each pair's own: the bytes the logits read. Depth 8 in
// layout 0 reads everything, as FP8's keys (16 tokens x 128 bytes a tile).
cudaError_t LaunchStreamRead(const uint2* data, int batch, int heads, int tiles, int depth,
                             int layout, const uint8_t* pair_depth, uint32_t* sink);
// Pseudo-random words (the speed runs' planes: time does not depend on values).
cudaError_t LaunchFillRandom(uint2* words, size_t n);
// Checks the m16n8k128 .b1 fragment layout the kernels assume against CPU popcounts on random
// operands; prints the result. False when it differs (or on a CUDA error).
bool ProbeLayout();

// ---- The Value side (plane_values.cu; plane_values.cc checks and times it) ----------------------
//
// out_{g,c} = sum_r p_{g,r} C_t(code_{r,c}) = (1/255) sum_S a_S (2 sum_j 2^j popc(u^(j) AND b_S)
// - sum_r u_r), u_r = round(255 p_r) in 8 bits: MMA m16n8k128 .b1 with A = b_S of 16 channels x
// 128 tokens (k along tokens) and B = the 8 bit planes of one head's u over those tokens.
constexpr int kBlockTokens = 128;   // k of one MMA
constexpr int kChunkBlocks = 8;     // blocks (1024 tokens) per warp: one output partial each
constexpr int kChannelGroups = kDim / 16;

// Lane `lane`'s uint2 of plane `plane` of channel group cg of token block `block` of row bh (of
// `blocks` blocks): [bh][block][cg][plane][lane]; .x channel 16 cg + lane / 4, .y that + 8, bit
// i of either token 128 block + 32 (lane % 4) + i. Depth t reads t x 256 contiguous bytes a
// (block, group).
__host__ __device__ inline size_t ValueWord(size_t bh, int blocks, int block, int cg, int plane,
                                            int lane) {
  return (((bh * blocks + block) * kChannelGroups + cg) * kStoreBits + plane) * 32 + lane;
}

// The prototype's probabilities: u of head g of row bh at token r, a fixed hash (the kernel makes
// its B operands from it by ballots, as a reader would from its e values).
__host__ __device__ inline uint32_t ProbabilityByte(size_t bh, int g, int token) {
  uint32_t x = static_cast<uint32_t>(bh * 977u + g * 131u) ^ (static_cast<uint32_t>(token) * 2654435761u);
  x ^= x >> 15;
  x *= 0x2c1b3c6du;
  x ^= x >> 12;
  return x & 0xffu;
}

struct ValueArgs {
  const uint2* values = nullptr;  // ValueWord's layout
  int coeff[kMaxTerms] = {};      // A_S = round(a_S 2^k), OddMasks order
  float unit = 0.0f;              // 2^-k / 255
  int heads_kv = 0, blocks = 0;   // 128-token blocks per (b, h); a multiple of kChunkBlocks
  float* out = nullptr;           // [B][H][chunks][G][d]: each chunk's partial sum_r p_r V_r
};

// The partial outputs of every chunk at depth t in [1, 4]: blocks of 4 warps, one head each.
cudaError_t LaunchPlaneValues(int depth, const ValueArgs& a, int batch);

}  // namespace readkv::cuda::plane_logits
