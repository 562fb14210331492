// ReadKV decode attention, launch 4 (Values): Value codes read at the chosen token depths,
// sum_i p_i centroid per chunk. Two readers: lane groups on CUDA cores (Values), and tokens
// sorted by depth into 16-token tiles multiplied on tensor cores (ValuesMma, the default).
// Included only by readkv_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv_attention_state.cuh"
#include "split_decode_kernel.cuh"

namespace readkv::cuda::readkv_kernels {

// ---- 4. Values -------------------------------------------------------------------------------

// spread[byte] puts bit k of the byte into the lowest bit of byte k of a 64-bit word.
__device__ __forceinline__ unsigned long long Spread(unsigned byte) {
  unsigned long long out = 0;
  for (int k = 0; k < 8; ++k) out |= static_cast<unsigned long long>((byte >> k) & 1u) << (8 * k);
  return out;
}

// ---- 5. Finish, by a row's last Values block ---------------------------------------------
//
// The block of a (sequence, KV head) row whose Values arrive last combines the row's chunks for
// its G query heads (no launch of its own): out = inverse V transform of (mu mass + sigma acc),
// acc and mass the chunks' partials summed in chunk order. x: G rows of 128 floats of shared
// memory the block is done with.
template <int D, int G>
__device__ void FinishRow(const Args& a, int b, int h, int chunks, float (*x)[128]) {
  __shared__ float mass[G];
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const int tid = threadIdx.x;
  if (tid < G) {
    const float* pm = a.partial_mass + (first_q + tid) * a.max_chunks;
    float sum = 0.0f;
#pragma unroll 8
    for (int k = 0; k < chunks; ++k) sum += __ldcg(pm + k);
    mass[tid] = sum;
  }
  __syncthreads();
  for (int idx = tid; idx < G * D; idx += blockDim.x) {
    const int q = idx / D, c = idx % D;
    const float* po = a.partial_out + (first_q + q) * a.max_chunks * D + c;
    float acc = 0.0f;
#pragma unroll 8
    for (int k = 0; k < chunks; ++k) acc += __ldcg(po + static_cast<size_t>(k) * D);
    const size_t channel = static_cast<size_t>(h) * D + c;
    x[q][c] = a.codec.value_mean[channel] * mass[q] + a.codec.value_std[channel] * acc;
  }
  internal::BlockFwhtRows(x, G, D, a.transform_scale);
  for (int idx = tid; idx < G * D; idx += blockDim.x) {
    const int q = idx / D, c = idx % D;
    const float v = x[q][c];
    a.out[(first_q + q) * D + c] =
        a.codec.value_signs[static_cast<size_t>(h) * D + c] < 0.0f ? -v : v;
  }
}

// Ends a Values block once its partials are written: the row's last block finishes the row.
// The row is re-read from blockIdx (nothing of the block's own needs to stay live for this).
template <int D, int G>
__device__ __forceinline__ void FinishIfLast(const Args& a, float (*x)[128]) {
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const int chunks = (a.seq_lens[b] + a.chunk_tokens - 1) / a.chunk_tokens;
  const size_t row = static_cast<size_t>(b) * a.heads_kv + h;
  if (internal::ArriveLast(&a.row_arrivals[row], chunks)) FinishRow<D, G>(a, b, h, chunks, x);
}

// The ledgers' Value terms of the chunk's tokens [start, end) (ReadKvDebug::totals): token i
// reads depths[i] planes of D bits, each token's planes in whole 32-byte sectors. Every thread
// of the block calls it (blockDim.x a multiple of 32); one add per warp and counter.
template <int D>
__device__ __forceinline__ void AccountValues(const Args& a, const uint8_t* depths, int start,
                                              int end) {
  if (a.debug.totals == nullptr) return;
  unsigned long long planes = 0, sectors = 0;
  for (int i = start + static_cast<int>(threadIdx.x); i < end; i += static_cast<int>(blockDim.x)) {
    const unsigned t = depths[i];
    planes += t;
    sectors += (t * (D / 8) + 31) / 32;
  }
  internal::AddToTotals(a.debug.totals, planes * D, sectors * 32);
}

template <int D, int G>
__global__ void __launch_bounds__(kValueWarps * kWarp) Values(Args a) {
  ChainEntry();
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
  AccountValues<D>(a, depths, start, start + n);
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
  static_assert(sizeof(reduce) >= sizeof(float[G][128]), "Finish's rows fit in reduce");
  FinishIfLast<D, G>(a, reinterpret_cast<float (*)[128]>(&reduce[0][0][0]));
}

// ---- 4b. Values on tensor cores ----------------------------------------------------------
//
// The chunk's tokens, in rounds of kSub, are sorted by depth (a stable counting sort: ballots
// per 32-token segment) and each depth's run is padded to a multiple of 16 with empty slots. Each
// warp then takes 16-token tiles of one depth and multiplies on tensor cores (mma.sync m16n8k16,
// f16 in, fp32 accumulate):
//   O^T[D x cols] += Vhat^T[D x 16 tokens] . P[16 tokens x cols]
// with cols = p of each query head rounded to f16 (hi) and its rounding error (lo), as the split
// kernels do for dense attention; centroids likewise (a table of f16 pairs: value, rounding
// error), and both halves are multiplied, so the sums keep ~22 bits like the CPU reader's fp32
// (f16 values alone left relative errors of 2.7e-4 against it, e.g. in the GPU KV backend's test).
// Depth-1 tiles ("sign tiles"): the tree is antisymmetric, so a depth-1 centroid is c1 s with
// s = +-1 the bit, c1 s = 2 c1 b - c1: A is the bits as f16 0 / 1 (exact; one prmt and one and per
// two tokens), B is 2 c1 p, and c1 sum p over the sign tiles is taken off at the end (the table,
// the code and the error half are skipped).
// Memory: a warp copies the planes and logits of its next tile into shared memory with cp.async
// while it computes the current one (two stages per warp), so DRAM latency hides behind the
// decode instead of stalling it.
// Lane (g = lane / 4, r = lane % 4) holds A rows g and g + 8 (channel 16 m + row of m-tile m)
// and k-slots 2r, 2r + 1, 2r + 8, 2r + 9: the tile's tokens 4r .. 4r + 3 (the k order of an MMA
// is free as long as A and B agree). Channels 16 m + g and 16 m + 8 + g are bit g of bytes 2m
// and 2m + 1 of a value plane, so a lane gathers its codes from whole plane words: bit g of every
// byte, rotated to the code's bit and masked, 2 instructions per 4 codes per plane.
constexpr int kMmaValueWarps = 8;
constexpr int kValueTile = 16;
// A slot of the depth order: the round's token (< 4096) | its depth << 12; or empty.
constexpr uint16_t kEmptySlot = 0xffff;
constexpr int kSlotDepthShift = 12;

template <int D, int G>
struct ValuesMmaShared {
  static constexpr int kSub = 1024;                  // tokens per round
  static constexpr int kCols = G <= 4 ? 8 : 16;      // hi and lo columns of p, zero-padded
  static constexpr int kPlaneBytes = D / 8;
  static constexpr int kSlots = kSub + (kValueTile - 1) * kMaxStoreBits;
  static constexpr int kSegments = kSub / kWarp;
  // One tile in shared memory: its value planes and logits. Plane p of slot j sits in row
  // 8 j + (p ^ Swizzle(j)). Unswizzled, a slot's 8 planes fill one 128-byte bank row (64 bytes at
  // d = 64), so the slots a quarter-warp reads together (4 r + u, r = 0..3) and the 16 slots a
  // copy writes all hit the same banks: ncu counted 16 wavefronts per 128-bit plane load (ideal
  // 4) and 60% of the kernel's shared wavefronts as excess (ReadKV(8,2), 32K x 16). The swizzle
  // gives slots u, u + 4, u + 8, u + 12 distinct bank groups, and slots 0..7 (and 8..15) too.
  // Aligned to 128 bytes, so a slot's 8 rows (8 x kPlaneBytes <= 128 bytes) start at an address
  // whose low bits are clear and plane p's row is one lop3 away (the gathering loop below).
  struct alignas(128) Stage {
    uint8_t planes[kValueTile * kMaxStoreBits][kPlaneBytes];
    float logits[G][kValueTile];
    static constexpr __host__ __device__ int Swizzle(int slot) {
      return (slot & 7) ^ ((slot >> 3) << 1);
    }
    // Slot 4 r + u's swizzle is s_r ^ u, s_r = 4 (r & 1) ^ 2 (r >> 1) (the gathering loop).
    static constexpr __host__ __device__ bool LaneSwizzles() {
      for (int r = 0; r < 4; ++r) {
        for (int u = 0; u < 4; ++u) {
          if (Swizzle(4 * r + u) != ((4 * (r & 1) ^ 2 * (r >> 1)) ^ u)) return false;
        }
      }
      return true;
    }
    static __device__ __forceinline__ int Row(int slot, int p) {
      return slot * kMaxStoreBits + (p ^ Swizzle(slot));
    }
    __device__ __forceinline__ uint8_t* Plane(int slot, int p) { return planes[Row(slot, p)]; }
    __device__ __forceinline__ const uint8_t* Plane(int slot, int p) const {
      return planes[Row(slot, p)];
    }
  };
  static_assert(kMaxStoreBits == 8, "the swizzle permutes a slot's 8 plane rows");
  static_assert(Stage::LaneSwizzles(), "a lane's slots' swizzles are s_r ^ u");
  union {
    Stage stage[kMmaValueWarps][2];  // per warp: the tile being read, the next one arriving
    // At the end: the warps' accumulators handed down a tree, lane by lane (region j, fragment
    // (m, nt) of lane l at [j][m NT + nt][l]), then their sum as O^T (over region 0).
    float4 xchg[kMmaValueWarps / 2][D / 16 * (kCols / 8)][kWarp];
    float out[D * kCols];
    float finish[G][128];  // a row's last block: Finish's rows (FinishRow)
  };
  unsigned pairs[kCentroids];  // centroid as f16 (low half) and its rounding error (high half)
  uint16_t order[kSlots];
  int seg_count[kSegments][kMaxStoreBits + 1];  // tokens of depth t in a segment, then its offset
  // [t]: the slots of depth t (its tokens, padded to whole tiles); [0] unused.
  int depth_slots[kMaxStoreBits + 1];
  int pages[kSub / kPageTokens];
  float warp_mass[kMmaValueWarps][G];
  float warp_sign_mass[kMmaValueWarps][G];  // p over the warp's tokens in sign tiles
  static_assert(sizeof(float[D * kCols]) == sizeof(float4[D / 16 * (kCols / 8)][kWarp]),
                "O^T fills exactly one region of the tree (region 0)");
  static_assert(sizeof(float4[kMmaValueWarps / 2][D / 16 * (kCols / 8)][kWarp]) <=
                    sizeof(Stage[kMmaValueWarps][2]),
                "the tree's regions fit in the stages' space");
  static_assert(kSub <= (1 << kSlotDepthShift), "a slot holds a round's token in 12 bits");
  static_assert(kMaxStoreBits < (1 << (16 - kSlotDepthShift)), "and its depth in 4");
};

// f16x2 of (low, high).
__device__ __forceinline__ uint32_t HalfPair(float low, float high) {
  const __half2 h = __floats2half2_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// cp.async of 4, 8 or 16 bytes; zeros instead when !fill.
template <int Bytes>
__device__ __forceinline__ void CpAsyncBytes(void* shared, const void* global, bool fill) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const int bytes = fill ? Bytes : 0;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
                 "r"(bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(address), "l"(global),
                 "n"(Bytes), "r"(bytes));
  }
}

// Registers: capped for 3 blocks per SM (2 when G = 8, whose 64 accumulators would spill): at
// 32K x 16 the whole ReadKV(8,4) call took 1178.6 us this way against 1465.9 us uncapped (128
// registers, 2 blocks per SM), and 112.3 vs 110.8 us at 8K x 1 (same run on the H200).
template <int D, int G>
__global__ void __launch_bounds__(kMmaValueWarps* kWarp, G == 8 ? 2 : 3) ValuesMma(Args a) {
  ChainEntry();
  using Shared = ValuesMmaShared<D, G>;
  using Stage = typename Shared::Stage;
  constexpr int kSub = Shared::kSub;
  constexpr int kCols = Shared::kCols;
  constexpr int kPlaneBytes = Shared::kPlaneBytes;
  constexpr int NT = kCols / 8;   // n-tiles
  constexpr int MT = D / 16;      // m-tiles
  constexpr int kWords = D / 32;  // 32-bit words of a value plane
  constexpr int kThreads = kMmaValueWarps * kWarp;
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int chunk = blk.chunk, h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const int end = min(T, start + a.chunk_tokens);
  const int W = a.store_bits;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, r = lane % 4;
  __shared__ Shared sh;

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  // Depth-1 tiles ("sign tiles") skip the table when the two depth-1 centroids are -c1 and +c1
  // (the Lloyd tree is antisymmetric, codebook.cc): A is then the bits, exact in f16.
  const float c1 = a.codec.centroids[2];
  const bool signs = a.codec.centroids[1] == -c1;
  for (int j = tid; j < (2 << W) - 1; j += kThreads) {
    uint16_t hi, lo;
    internal::SplitHiLo<true>(a.codec.centroids[j], hi, lo);
    sh.pairs[j] = internal::Pack(hi, lo);
  }
  const auto pairs_address = static_cast<unsigned>(__cvta_generic_to_shared(sh.pairs));
  const int32_t* page_row = a.page_table + static_cast<size_t>(b) * a.max_pages;
  const uint8_t* depths = a.value_depths + (static_cast<size_t>(b) * a.heads_kv + h) * a.max_tokens;
  AccountValues<D>(a, depths, start, end);
  // The B column this lane holds in n-tile nt: its head, softmax statistics, and part
  // (0 hi, 1 lo, 2 zero padding).
  int col_head[NT], col_part[NT];
  float col_m[NT], col_inv[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int n = nt * 8 + g;
    col_part[nt] = n < G ? 0 : (n < 2 * G ? 1 : 2);
    col_head[nt] = n < G ? n : (n < 2 * G ? n - G : 0);
    col_m[nt] = a.stats[(first_q + col_head[nt]) * 2];
    col_inv[nt] = a.stats[(first_q + col_head[nt]) * 2 + 1];
  }

  float acc[MT][NT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[m][nt][k] = 0.0f;
    }
  }
  float mass = 0.0f;       // p of head col_head[0] over this lane's tokens (hi lanes only)
  float sign_mass = 0.0f;  // ... over its tokens in sign tiles

  // Copies tile `tile` of the round into `st`: lane's slot is lane % 16; it copies that token's
  // planes lane / 16, lane / 16 + 2, ... below the tile's depth, and its logits of heads
  // lane / 16, lane / 16 + 2, ... Empty slots get zeros.
  // The lane's sources without per-tile 64-bit products: its head's pages (a page of one KV
  // head holds 256 tokens x W planes), and its first head's logits.
  const unsigned token_bytes = static_cast<unsigned>(W) * kPlaneBytes;  // <= 128
  const size_t page_bytes = static_cast<size_t>(a.heads_kv) * kPageTokens * token_bytes;
  const uint8_t* head_planes = a.value_planes + static_cast<size_t>(h) * kPageTokens * token_bytes;
  const float* lane_logits = a.logits + (first_q + lane / kValueTile) * a.max_tokens;
  const size_t logits_step = 2 * static_cast<size_t>(a.max_tokens);  // heads q and q + 2
  const auto issue = [&](int round, int tile, Stage& st) {
    const int slot = lane % kValueTile;
    const int first = lane / kValueTile;
    const unsigned entry = sh.order[tile * kValueTile + slot];
    const int t = sh.order[tile * kValueTile] >> kSlotDepthShift;
    const bool live = entry != kEmptySlot;
    const unsigned i = live ? (entry & ((1u << kSlotDepthShift) - 1u)) : 0u;
    const unsigned token = static_cast<unsigned>(round) + i;
    const uint8_t* planes = head_planes +
                            static_cast<size_t>(sh.pages[i / kPageTokens]) * page_bytes +
                            (token % kPageTokens) * token_bytes;
    for (int p = first; p < t; p += 2) {
      CpAsyncBytes<kPlaneBytes>(st.Plane(slot, p), planes + p * kPlaneBytes, live);
    }
    const float* logits = lane_logits + token;
    for (int q = first; q < G; q += 2, logits += logits_step) {
      CpAsyncBytes<4>(&st.logits[q][slot], logits, live);
    }
  };

  for (int round = start; round < end; round += kSub) {
    const int n = min(kSub, end - round);
    const int segments = (n + kWarp - 1) / kWarp;
    __syncthreads();  // the previous round's tiles are done with sh
    for (int j = tid; j < (n + kPageTokens - 1) / kPageTokens; j += kThreads) {
      sh.pages[j] = page_row[round / kPageTokens + j];
    }
    for (int j = tid; j < Shared::kSlots; j += kThreads) sh.order[j] = kEmptySlot;
    for (int seg = warp; seg < segments; seg += kMmaValueWarps) {
      const int i = seg * kWarp + lane;
      const int t = i < n ? depths[round + i] : 0;
      for (int dt = 1; dt <= W; ++dt) {
        const unsigned same = __ballot_sync(0xffffffffu, t == dt);
        if (lane == 0) sh.seg_count[seg][dt] = __popc(same);
      }
    }
    __syncthreads();
    // Warp dt - 1, lane = segment: depth dt's segment offsets and its slots (W <= the warps: the
    // depths in parallel; one warp walking them in turn kept the others waiting at the next
    // barrier, 5.6% of the kernel's stall samples at 32K x 16 (8,4)).
    static_assert(kMaxStoreBits <= kMmaValueWarps, "a warp per depth");
    if (warp < W) {
      const int dt = warp + 1;
      const int count = lane < segments ? sh.seg_count[lane][dt] : 0;
      int through = count;
      for (int o = 1; o < kWarp; o *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, through, o);
        if (lane >= o) through += y;
      }
      if (lane < segments) sh.seg_count[lane][dt] = through - count;
      if (lane == kWarp - 1) {
        sh.depth_slots[dt] = (through + kValueTile - 1) / kValueTile * kValueTile;
      }
    }
    __syncthreads();
    // Every warp, lane = depth: the depths' first slots (depth 1's first) and the slots in all
    // (lane W's sum, which every warp holds: no shared copy).
    int first_slot, slots;
    {
      const int count = lane >= 1 && lane <= W ? sh.depth_slots[lane] : 0;
      int through = count;
      for (int o = 1; o <= kMaxStoreBits; o *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, through, o);
        if (lane >= o) through += y;
      }
      first_slot = through - count;
      slots = __shfl_sync(0xffffffffu, through, W);
    }
    for (int seg = warp; seg < segments; seg += kMmaValueWarps) {
      const int i = seg * kWarp + lane;
      const int t = i < n ? depths[round + i] : 0;
      const unsigned same = __match_any_sync(0xffffffffu, t);
      const int start = __shfl_sync(0xffffffffu, first_slot, t);
      if (t > 0) {
        const int rank = __popc(same & ((1u << lane) - 1u));
        sh.order[start + sh.seg_count[seg][t] + rank] =
            static_cast<uint16_t>(i | (t << kSlotDepthShift));
      }
    }
    __syncthreads();

    // Every tile starts a depth's run or continues it, so its first slot is a token.
    const int tiles = slots / kValueTile;
    if (warp < tiles) issue(round, warp, sh.stage[warp][0]);
    internal::CpAsyncCommit();
    for (int tile = warp, k = 0; tile < tiles; tile += kMmaValueWarps, ++k) {
      if (tile + kMmaValueWarps < tiles) {
        issue(round, tile + kMmaValueWarps, sh.stage[warp][(k + 1) % 2]);
      }
      internal::CpAsyncCommit();
      internal::CpAsyncWait<1>();
      __syncwarp();
      const Stage& st = sh.stage[warp][k % 2];
      const int t = sh.order[tile * kValueTile] >> kSlotDepthShift;
      const bool sign_tile = signs && t == 1;  // uniform over the warp
      bool live[4];
      uint32_t codes[4][kWords];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        live[u] = sh.order[tile * kValueTile + 4 * r + u] != kEmptySlot;
#pragma unroll
        for (int w = 0; w < kWords; ++w) codes[u][w] = 0;
      }
      // Plane p's row of slot 4 r + u (Stage::Row, kPlaneBytes each): slot 4 r's rows start at
      // an address F whose bits below a slot's 8 kPlaneBytes are clear (the stage is 128-byte
      // aligned), slot 4 r + u's u 8 kPlaneBytes later, and its swizzle is s_r ^ u with
      // s_r = 4 (r & 1) ^ 2 (r >> 1). So the row is (F ^ s_r kPlaneBytes ^ p kPlaneBytes ^
      // u kPlaneBytes) + u 8 kPlaneBytes: one lop3 per load and the load's immediate offset,
      // where the index arithmetic took four instructions per load (ncu's SASS counts at
      // 32K x 16 (8,4), H200, 2026-12-01).
      const unsigned lane_rows =
          (static_cast<unsigned>(__cvta_generic_to_shared(st.planes)) +
           static_cast<unsigned>(4 * r * kMaxStoreBits * kPlaneBytes)) ^
          static_cast<unsigned>((4 * (r & 1) ^ 2 * (r >> 1)) * kPlaneBytes);
      // Bit g of every byte to bit s = t - 1 - p (the code's bit of plane p) of the same byte:
      // keep and the rotation g - s (mod 32 in the funnel shift) follow p.
      unsigned keep = 0x01010101u << (t - 1);
      auto rot = static_cast<unsigned>(g - (t - 1));
      const unsigned rows_end = sign_tile ? 0u : static_cast<unsigned>(t * kPlaneBytes);
      for (unsigned row = 0; row < rows_end; row += kPlaneBytes, keep >>= 1, ++rot) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const unsigned address = internal::Xor3(lane_rows, row, u * kPlaneBytes) +
                                   u * kMaxStoreBits * kPlaneBytes;
          uint32_t x[kWords];
          if constexpr (kWords == 4) {
            internal::LoadSharedV4(address, x);
          } else {
            internal::LoadSharedV2(address, x);
          }
#pragma unroll
          for (int w = 0; w < kWords; ++w) codes[u][w] |= __funnelshift_r(x[w], x[w], rot) & keep;
        }
      }
      // P's columns for this lane: p of its 4 tokens (0 in empty slots), hi, lo or zero. A sign
      // tile's columns are 2 c1 p: its A holds the bits as 0 / 1, c1 s = 2 c1 b - c1, and the
      // -c1 p of its tokens is taken off once at the end (sign_mass).
      const float scale = sign_tile ? 2.0f * c1 : 1.0f;
      uint32_t bfrag[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float4 logit4 = *reinterpret_cast<const float4*>(&st.logits[col_head[nt]][4 * r]);
        const float logit[4] = {logit4.x, logit4.y, logit4.z, logit4.w};
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float e = __expf(logit[u] - col_m[nt]) * col_inv[nt];
          const float p = live[u] ? e : 0.0f;
          if (nt == 0 && col_part[0] == 0) {
            mass += p;
            sign_mass += sign_tile ? p : 0.0f;
          }
          const float x = p * scale;
          const float hi = __half2float(__float2half_rn(x));
          v[u] = col_part[nt] == 0 ? hi : (col_part[nt] == 1 ? x - hi : 0.0f);
        }
        bfrag[nt][0] = HalfPair(v[0], v[1]);
        bfrag[nt][1] = HalfPair(v[2], v[3]);
      }
      if (sign_tile) {
        // Plane 0 of each token, bit g of every byte moved to the byte's top bit: channel
        // 16 m + g (+ 8) is then the sign of byte 2 m (+ 1), two tokens per prmt.
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
          uint32_t y[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            y[u] = reinterpret_cast<const uint32_t*>(st.Plane(4 * r + u, 0))[w] << (7 - g);
          }
          // m-tile 2w: bytes 0 (row g) and 1 (row g + 8); m-tile 2w + 1: bytes 2 and 3.
          const uint32_t a0[4] = {internal::ZeroOne(internal::SignPair<0>(y[0], y[1])),
                                  internal::ZeroOne(internal::SignPair<1>(y[0], y[1])),
                                  internal::ZeroOne(internal::SignPair<0>(y[2], y[3])),
                                  internal::ZeroOne(internal::SignPair<1>(y[2], y[3]))};
          const uint32_t a1[4] = {internal::ZeroOne(internal::SignPair<2>(y[0], y[1])),
                                  internal::ZeroOne(internal::SignPair<3>(y[0], y[1])),
                                  internal::ZeroOne(internal::SignPair<2>(y[2], y[3])),
                                  internal::ZeroOne(internal::SignPair<3>(y[2], y[3]))};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            internal::Mma16816<true>(acc[2 * w][nt], a0, bfrag[nt][0], bfrag[nt][1]);
            internal::Mma16816<true>(acc[2 * w + 1][nt], a1, bfrag[nt][0], bfrag[nt][1]);
          }
        }
        __syncwarp();
        continue;
      }
      // Depth t's pairs, as a shared-memory address: a lookup is then a byte permute, one
      // address add and the load.
      const unsigned table = pairs_address + 4u * ((1u << t) - 1u);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const int w = m / 2;  // bytes 2m, 2m + 1 of the plane: bytes 2 (m % 2) (+ 1) of word w
        unsigned c0[4], c1[4];  // (f16 value, f16 rounding error) of channels 2m and 2m + 1
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const unsigned x = codes[u][w];
          const unsigned b0 = m % 2 == 0 ? internal::ByteOf<0>(x) : internal::ByteOf<2>(x);
          const unsigned b1 = m % 2 == 0 ? internal::ByteOf<1>(x) : internal::ByteOf<3>(x);
          c0[u] = internal::LoadSharedU32(table + 4u * b0);
          c1[u] = internal::LoadSharedU32(table + 4u * b1);
        }
        // Rows g (channel 2m's byte) and g + 8 (2m + 1), k-slots of tokens u = 0, 1 and 2, 3:
        // the values (low halves), then their rounding errors (high halves).
        constexpr unsigned kLows = 0x5410, kHighs = 0x7632;  // __byte_perm selectors
        const uint32_t a_hi[4] = {
            __byte_perm(c0[0], c0[1], kLows), __byte_perm(c1[0], c1[1], kLows),
            __byte_perm(c0[2], c0[3], kLows), __byte_perm(c1[2], c1[3], kLows)};
        const uint32_t a_lo[4] = {
            __byte_perm(c0[0], c0[1], kHighs), __byte_perm(c1[0], c1[1], kHighs),
            __byte_perm(c0[2], c0[3], kHighs), __byte_perm(c1[2], c1[3], kHighs)};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          internal::Mma16816<true>(acc[m][nt], a_hi, bfrag[nt][0], bfrag[nt][1]);
          internal::Mma16816<true>(acc[m][nt], a_lo, bfrag[nt][0], bfrag[nt][1]);
        }
      }
      __syncwarp();  // every lane is done with this stage before it is refilled
    }
    internal::CpAsyncWait<0>();
  }

  // Mass per head: the hi lanes of head g are lanes 4 g .. 4 g + 3; then warps.
  mass += __shfl_xor_sync(0xffffffffu, mass, 1);
  mass += __shfl_xor_sync(0xffffffffu, mass, 2);
  sign_mass += __shfl_xor_sync(0xffffffffu, sign_mass, 1);
  sign_mass += __shfl_xor_sync(0xffffffffu, sign_mass, 2);
  if (r == 0 && g < G) {
    sh.warp_mass[warp][g] = mass;
    sh.warp_sign_mass[warp][g] = sign_mass;
  }
  // The warps' O^T added down a tree in a fixed order (the result does not depend on timing):
  // warps half .. 2 half - 1 hand their accumulators to warps 0 .. half - 1 (half = 4, 2, 1),
  // lane to lane (the same lane of every warp holds the same fragment elements), so the sum is
  // ((w0 + w4) + (w2 + w6)) + ((w1 + w5) + (w3 + w7)) in 5 barriers, where one warp at a time
  // adding into O^T took 9 (their waits: 5.0% of the kernel's stall samples at 32K x 16 (8,4),
  // H200, 2026-11-30). The first level writes regions 0 .. 3; later, a writer reuses the region it
  // read itself (its lanes' own elements), so only the barrier between write and read is needed.
  __syncthreads();  // every warp is done with the stages
#pragma unroll
  for (int half = kMmaValueWarps / 2; half >= 1; half /= 2) {
    const bool first = half == kMmaValueWarps / 2;
    if (warp >= half && warp < 2 * half) {
      auto& to = sh.xchg[first ? warp - half : warp];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          to[m * NT + nt][lane] = make_float4(acc[m][nt][0], acc[m][nt][1], acc[m][nt][2],
                                              acc[m][nt][3]);
        }
      }
    }
    __syncthreads();
    if (warp < half) {
      const auto& from = sh.xchg[first ? warp : warp + half];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float4 y = from[m * NT + nt][lane];
          acc[m][nt][0] += y.x;
          acc[m][nt][1] += y.y;
          acc[m][nt][2] += y.z;
          acc[m][nt][3] += y.w;
        }
      }
    }
  }
  // Warp 0 holds the sum. O^T lies over region 0, which warp 0 read before the later levels'
  // barriers and nobody reads since.
  if (warp == 0) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int row = 16 * m + g + 8 * (k / 2);
          const int col = nt * 8 + 2 * r + k % 2;
          sh.out[row * kCols + col] = acc[m][nt][k];
        }
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < G * D; idx += kThreads) {
    const int q = idx / D, c = idx % D;
    float sign_part = 0.0f;
    for (int wv = 0; wv < kMmaValueWarps; ++wv) sign_part += sh.warp_sign_mass[wv][q];
    a.partial_out[((first_q + q) * a.max_chunks + chunk) * D + c] =
        sh.out[c * kCols + q] + sh.out[c * kCols + G + q] - c1 * sign_part;
  }
  if (tid < G) {
    float sum = 0.0f;
    for (int wv = 0; wv < kMmaValueWarps; ++wv) sum += sh.warp_mass[wv][tid];
    a.partial_mass[(first_q + tid) * a.max_chunks + chunk] = sum;
  }
  FinishIfLast<D, G>(a, sh.finish);
}

}  // namespace readkv::cuda::readkv_kernels
