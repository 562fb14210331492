// Device pieces shared by the ReadKV kernels (the tile reader's and the append's encode): the
// exact Hadamard transform of the codec (same butterfly order, no contraction, so codes and Key
// importances are bit-identical to readkv::codec), block reductions, and the pieces of the
// threshold allocator: greedy's order as a radix-selectable composite, bin search over
// histograms, block-wide selection. Internal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cuda/atomic>

#include "split_decode.cuh"

namespace readkv::cuda::internal {

// Every thread of every block that counts in `arrivals` calls it after its last global write
// of the launch; true in the block that arrives last (the count reaches `blocks`), which then
// sees every other block's writes (read them with __ldcg: they are in L2, not in this SM's L1).
// The count is not reset here: the launch before zeroes it.
// Ordering: the barrier puts the block's writes before thread 0's add, an acquire-release at
// device scope (cumulative: it releases what the barrier ordered before it, and acquires what
// every earlier block's add released), and the second barrier puts the last block's reads after
// it: CUTLASS's semaphore pattern. It replaced a __threadfence() (fence.sc.gpu) in every thread,
// which held ~3.5% of TileWindowValues' stall samples (ncu, served point, 3345346).
__device__ inline bool ArriveLast(unsigned* arrivals, int blocks) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> count(*arrivals);
    last = count.fetch_add(1u, ::cuda::memory_order_acq_rel) + 1 == static_cast<unsigned>(blocks);
  }
  __syncthreads();
  return last;
}

// In-place FWHT of rows x[0..rows) (each d <= 128 long) by the whole block, then x *= scale; the
// caller synchronises before. One barrier per butterfly stage for all rows. Same butterflies as
// codec::Fwht; each element sees the same operations in the same order, so the result is
// bit-identical.
// d is a power of two: indices by shifts and masks (runtime divisions cost ~20 instructions
// each, in a kernel whose time is this chain's latency).
__device__ __forceinline__ void BlockFwhtRows(float (*x)[128], int rows, int d, float scale) {
  const int log_d = __ffs(d) - 1;
  const int half_d = d / 2;
  for (int log_half = 0; log_half < log_d; ++log_half) {
    const int half = 1 << log_half;
    __syncthreads();
    for (int t = threadIdx.x; t < rows * half_d; t += blockDim.x) {
      float* row = x[t >> (log_d - 1)];
      const int u = t & (half_d - 1);
      const int i = ((u >> log_half) << (log_half + 1)) | (u & (half - 1));
      const float a = row[i];
      const float b = row[i + half];
      row[i] = __fadd_rn(a, b);
      row[i + half] = __fsub_rn(a, b);
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < rows * d; t += blockDim.x) {
    float& v = x[t >> log_d][t & (d - 1)];
    v = __fmul_rn(v, scale);
  }
  __syncthreads();
}

// BlockFwhtRows for a block whose thread c (c < d <= blockDim.x <= 128, d a multiple of 64) holds
// channel c of `rows` <= R rows in registers, v[q]: the same butterflies in the same order (half
// = 1, 2, 4, ...; the lower channel gets a + b, the upper a - b), so the same bits. Stages within
// a warp by shuffles, no barrier; the others through x (rows x 128 floats of shared memory); then
// the scale. Every thread of the block calls it; threads c >= d compute nothing of use.
template <int R>
__device__ __forceinline__ void FwhtChannelRows(float (&v)[R], int rows, int d, float scale,
                                                float (*x)[128]) {
  const int c = threadIdx.x;
  for (int half = 1; half < d; half *= 2) {
    const bool upper = (c & half) != 0;
    if (half < 32) {
#pragma unroll
      for (int q = 0; q < R; ++q) {
        const float y = __shfl_xor_sync(0xffffffffu, v[q], half);
        v[q] = upper ? __fsub_rn(y, v[q]) : __fadd_rn(v[q], y);
      }
      continue;
    }
#pragma unroll
    for (int q = 0; q < R; ++q) {
      if (q < rows) x[q][c] = v[q];
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < R; ++q) {
      if (q < rows) {
        const float y = x[q][c ^ half];
        v[q] = upper ? __fsub_rn(y, v[q]) : __fadd_rn(v[q], y);
      }
    }
    __syncthreads();  // the next stage rewrites x
  }
#pragma unroll
  for (int q = 0; q < R; ++q) v[q] = __fmul_rn(v[q], scale);
}

// BlockFwhtRows of one row x[0..d).
__device__ __forceinline__ void BlockFwht(float* x, int d, float scale) {
  BlockFwhtRows(reinterpret_cast<float (*)[128]>(x), 1, d, scale);
}

// Block-wide sum of an int64 (every thread gets the result). `scratch` holds >= 32 entries.
__device__ __forceinline__ long long BlockSumLL(long long v, long long* scratch) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warps = (blockDim.x + 31) / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  long long total = 0;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

// codec::DepthAllocator's count_above: steps of an object whose gain w * inc[k] exceeds x. Inc:
// the increments, a pointer or anything with operator[] (ValueIncrements).
template <typename Inc>
__device__ __forceinline__ int CountAbove(double w, double x, const Inc& inc, int spo, int from) {
  int k = from;
  while (k < spo && __dmul_rn(w, inc[k]) > x) ++k;
  return k;
}

// The budget of a scope (a row, or a Value window), exactly ReaderPlan::KeyBudget / ValueBudget.
__device__ __forceinline__ long long FloorBudget(double bits, double count) {
  return static_cast<long long>(floor(__dadd_rn(__dmul_rn(bits, count), 1e-9)));
}

// ---- The threshold allocator's cut ------------------------------------------------------------
//
// Greedy (codec::DepthAllocator) takes steps in the order: gain descending, then object index,
// then step (an object's gains never increase with the step, so its steps at one gain are
// consecutive). Give step k of object j the key j * 2^s + k (k < 2^s): greedy's order is then
// (gain descending, key ascending), a total order, and the Threshold allocator's depths are the
// steps at or before the element of rank `steps` in it: every gain above the cut, then the cut's
// ties in key order. For positive doubles the bit patterns order as the values, so the element
// is the steps-th largest of the 96-bit composites (gain bits, ~key), all distinct, which radix
// selection finds exactly.

// The element of rank `steps` in greedy's order: its gain (the cut) and key (where ties stop).
struct GreedyCut {
  double gain;
  unsigned key;
};

// Steps of an object (weight w, first key first_key, spo <= kMaxSteps) taken by the allocation
// that stops at cut. Unrolled over kMaxSteps (inc[s] must be readable for every s < kMaxSteps):
// the products issue back to back, not one per round of a loop that may break.
template <int kMaxSteps, typename Inc>
__device__ __forceinline__ int StepsTaken(double w, const Inc& inc, int spo, unsigned first_key,
                                          const GreedyCut& cut) {
  int k = 0;
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    const double gain = __dmul_rn(w, inc[s]);
    k += k == s && s < spo &&
         (gain > cut.gain || (gain == cut.gain && first_key + s <= cut.key));
  }
  return k;
}

// Calls f(s, gain) for each of an object's leading steps of positive gain (weight w, spo <=
// kMaxSteps steps; gains fall with the step, so these are CountAbove(w, 0) steps). Unrolled over
// kMaxSteps as StepsTaken, inc[s] readable for every s < kMaxSteps.
template <int kMaxSteps, typename Inc, typename F>
__device__ __forceinline__ void ForPositiveSteps(double w, const Inc& inc, int spo, const F& f) {
  bool on = true;
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    const double gain = __dmul_rn(w, inc[s]);
    on = on && s < spo && gain > 0.0;
    if (on) f(s, gain);
  }
}

__device__ __forceinline__ unsigned long long GainBits(double gain) {
  return static_cast<unsigned long long>(__double_as_longlong(gain));
}

// A bin chosen by rank: its index, the rank within it (1-based, from its top) and its count.
struct BinPick {
  int bin;
  long long rank;
  long long count;
};

// Warp-wide: the bin of counts load(0..bins) holding the rank-th largest element (1-based,
// counted from the top bin down); every lane returns it. Lane l sums a contiguous run of bins,
// a suffix scan over lanes finds the run, and its lane walks the run down.
template <typename Load>
__device__ BinPick WarpFindBin(const Load& load, int bins, long long rank) {
  const int lane = threadIdx.x % kWarp;
  const int per = (bins + kWarp - 1) / kWarp;
  const int first = lane * per;
  long long mine = 0;
  for (int j = 0; j < per; ++j) {
    if (first + j < bins) mine += static_cast<long long>(load(first + j));
  }
  long long through = mine;  // this lane's bins and all bins above them
  for (int o = 1; o < kWarp; o *= 2) {
    const long long y = __shfl_down_sync(0xffffffffu, through, o);
    if (lane + o < kWarp) through += y;
  }
  const bool holds = through - mine < rank && rank <= through;
  BinPick pick{0, 0, 0};
  if (holds) {
    long long above = through - mine;
    for (int j = per - 1; j >= 0; --j) {
      if (first + j >= bins) continue;
      const auto count = static_cast<long long>(load(first + j));
      if (above < rank && rank <= above + count) {
        pick = {first + j, rank - above, count};
        break;
      }
      above += count;
    }
  }
  const int src = max(0, __ffs(__ballot_sync(0xffffffffu, holds)) - 1);
  pick.bin = __shfl_sync(0xffffffffu, pick.bin, src);
  pick.rank = __shfl_sync(0xffffffffu, pick.rank, src);
  pick.count = __shfl_sync(0xffffffffu, pick.count, src);
  return pick;
}

inline constexpr int kSelectDigitBins = 256;  // 8-bit digits
inline constexpr int kSelectFinal = 32;       // elements left when one warp ranks them pairwise

// The state of BlockSelect's radix selection of greedy's cut: the composite bits fixed so far
// (prefix and mask of hi and of lo), how many remain free (pos, counted from the bottom of lo;
// hi sits above lo), the rank of the sought element among the `count` that match, and the digit
// of the current pass (up to 8 bits, the next below the fixed ones).
struct RadixPrefix {
  unsigned long long prefix_hi, mask_hi;
  unsigned prefix_lo = 0, mask_lo = 0;
  int pos;
  long long rank, count;
  // Set by NextDigit.
  bool in_hi;
  int width, shift;
  unsigned digit_mask;

  __device__ RadixPrefix(int top, unsigned long long prefix_hi_, unsigned long long mask_hi_,
                         long long rank_, long long count_)
      : prefix_hi(prefix_hi_), mask_hi(mask_hi_), pos(32 + top), rank(rank_), count(count_) {}
  // Whether another pass is needed: more than kSelectFinal elements match and bits remain.
  __device__ __forceinline__ bool Narrowing() const { return count > kSelectFinal && pos > 0; }
  // Sets the digit of the pass about to run.
  __device__ __forceinline__ void NextDigit() {
    in_hi = pos > 32;
    width = min(8, in_hi ? pos - 32 : pos);
    shift = (in_hi ? pos - 32 : pos) - width;
    digit_mask = (1u << width) - 1u;
  }
  __device__ __forceinline__ bool Matches(unsigned long long hi, unsigned lo) const {
    return (hi & mask_hi) == prefix_hi && (lo & mask_lo) == prefix_lo;
  }
  __device__ __forceinline__ unsigned Digit(unsigned long long hi, unsigned lo) const {
    return (in_hi ? static_cast<unsigned>(hi >> shift) : lo >> shift) & digit_mask;
  }
  // Fixes the current digit to the picked bin; rank and count become those within it.
  __device__ __forceinline__ void Take(BinPick pick) {
    if (in_hi) {
      prefix_hi |= static_cast<unsigned long long>(pick.bin) << shift;
      mask_hi |= static_cast<unsigned long long>(digit_mask) << shift;
    } else {
      prefix_lo |= static_cast<unsigned>(pick.bin) << shift;
      mask_lo |= digit_mask << shift;
    }
    rank = pick.rank;
    count = pick.count;
    pos -= width;
  }
};

// After the passes: lists the elements a thread owns that match (at most kSelectFinal in all,
// composites being distinct) into final_hi / final_lo at the slots counted by `gathered`.
template <typename ForEach>
__device__ __forceinline__ void GatherMatches(const ForEach& for_each, const RadixPrefix& p,
                                              unsigned& gathered, unsigned long long* final_hi,
                                              unsigned* final_lo) {
  for_each([&](unsigned long long hi, unsigned lo) {
    if (!p.Matches(hi, lo)) return;
    const unsigned at = atomicAdd(&gathered, 1u);
    if (at < kSelectFinal) {
      final_hi[at] = hi;
      final_lo[at] = lo;
    }
  });
}

// Shared memory of BlockSelect.
struct SelectShared {
  unsigned hist[2][kSelectDigitBins];  // this digit's histogram; the next one, being cleared
  unsigned long long final_hi[kSelectFinal];
  unsigned final_lo[kSelectFinal];
  unsigned gathered;
  BinPick pick;
  GreedyCut cut;
};

// Block-wide selection of the element of rank `rank` (1-based, from the top) among the
// composites (hi = gain bits, lo = ~key) that for_each yields and that match the prefix: hi's
// bits [top, 64) equal prefix_hi (mask_hi marks them), `count` elements in all. for_each(f) calls
// f(hi, lo) for each element a thread owns; it runs once per 8-bit digit until at most
// kSelectFinal elements match (2 or 3 times on real data), then once more to gather those.
// Every thread of the block calls it (blockDim.x >= 64); it synchronises the block.
template <typename ForEach>
__device__ GreedyCut BlockSelect(const ForEach& for_each, int top, unsigned long long prefix_hi,
                                 unsigned long long mask_hi, long long rank, long long count,
                                 SelectShared& sh) {
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  for (int j = tid; j < 2 * kSelectDigitBins; j += blockDim.x) {
    sh.hist[j / kSelectDigitBins][j % kSelectDigitBins] = 0;
  }
  if (tid == 0) sh.gathered = 0;
  __syncthreads();
  RadixPrefix p(top, prefix_hi, mask_hi, rank, count);
  int cur = 0;
  while (p.Narrowing()) {
    p.NextDigit();
    unsigned* hist = sh.hist[cur];
    for_each([&](unsigned long long hi, unsigned lo) {
      if (p.Matches(hi, lo)) atomicAdd(&hist[p.Digit(hi, lo)], 1u);
    });
    __syncthreads();
    if (warp == 0) {
      const BinPick pick = WarpFindBin([&](int j) { return hist[j]; }, p.digit_mask + 1, p.rank);
      if (lane == 0) sh.pick = pick;
    } else {
      for (int j = tid - kWarp; j < kSelectDigitBins; j += blockDim.x - kWarp) {
        sh.hist[cur ^ 1][j] = 0;
      }
    }
    __syncthreads();
    p.Take(sh.pick);
    cur ^= 1;
  }
  // At most kSelectFinal elements match (composites are distinct): gather them, and the one with
  // rank - 1 elements above it is the cut.
  GatherMatches(for_each, p, sh.gathered, sh.final_hi, sh.final_lo);
  __syncthreads();
  if (warp == 0) {
    const int n = min(static_cast<int>(sh.gathered), kSelectFinal);
    const unsigned long long hi = lane < n ? sh.final_hi[lane] : 0;
    const unsigned lo = lane < n ? sh.final_lo[lane] : 0;
    long long above = 0;
    for (int j = 0; j < n; ++j) {
      above += sh.final_hi[j] > hi || (sh.final_hi[j] == hi && sh.final_lo[j] > lo);
    }
    if (lane < n && above == p.rank - 1) {
      sh.cut = {__longlong_as_double(static_cast<long long>(hi)), ~lo};
    }
  }
  __syncthreads();
  return sh.cut;
}

}  // namespace readkv::cuda::internal
