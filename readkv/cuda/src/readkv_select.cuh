// ReadKV decode attention, launch 3 (Select): the Value token importances and the threshold
// allocator's Value depths, exactly the CPU allocator's. Included only by readkv_attention.cu.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv_attention_state.cuh"

namespace readkv::cuda::readkv_kernels {

// ---- 3. Select -------------------------------------------------------------------------------
//
// One launch, grid (kCluster, H_kv, B) x kThreads (one of kSelectShapes, as SelectShapeFor picks
// it for the call's grid): a thread block cluster per row (sequence b, KV head h), block r of it
// owning the r-th share of the row's tokens (SelectShare tokens each). Every block computes
// the row's softmax statistics, its tokens' importances a_i = sum_q p_qi^2 (in double, kept in
// its shared memory) and their positive steps; the cluster then finds the steps-th element of
// greedy's order (readkv_device.cuh) by radix selection, 8 bits a pass: each block counts its
// gains' digits into its own histogram, and after a cluster barrier every block sums the
// cluster's histograms through distributed shared memory and picks the same bin. No global
// histograms, no last-block election, no second or third launch. Each pass adds one count per
// remaining gain into a 256-bin shared histogram, one add per lane. A token's steps (at most
// kMaxValueSteps) are unrolled in every pass over the share: with a loop that broke at the first
// non-positive gain, each step's product, compare and branch waited on the one before (ncu at the
// go/no-go model's 16K x 16: the kernel 37.8 -> 31.5 us, H200, 2026-11-30). Tried and slower on the
// H200 (docs/performance-notes.md, "Select's passes"): warp-aggregated adds (match_any, 3-9%),
// 11- and 12-bit first digits (1.1-2.8x), and the first digit taken from the gains' 11-bit
// exponents counted during the scan (slower at 6 of 8 points, by up to 3.6%). Every pass rescans
// the whole share, its steps recomputed from the importances: ~37% of the kernel's stall samples at
// 32K x 16 (8,2) (a source profile of 2026-12-01, ac4cfee). The instances with kList
// (KVGATE_READKV_SELECT=list) list a block's gains in shared memory once a pass's bin holds at most
// kSelectListEntries of them, and the later passes and the gathering go over the list (same cut;
// not yet measured on a GPU, so off; without kList the code is the rescanning one, unchanged). A
// block lists only when another pass follows, so on data whose passes narrow fast it never does:
// ReadKvDebug::select_listed counts the blocks that did.

namespace cg = cooperative_groups;

// The Value step budget of a row of T tokens: (floor(R_V T) - T) / 2 packets, at most T spo.
__device__ long long ValueSteps(const Args& a, int T) {
  const long long budget = internal::FloorBudget(a.policy.value_bits, static_cast<double>(T));
  long long steps = (budget - T) / 2;
  const long long most = static_cast<long long>(T) * a.policy.value_steps;
  if (steps > most) steps = most;
  return steps < 0 ? 0 : steps;
}

__device__ __forceinline__ void WriteValueDepth(const Args& a, size_t row, int token, int steps) {
  const auto depth = static_cast<uint8_t>(1 + 2 * steps);
  a.value_depths[row + token] = depth;
  if (a.debug.value_depths != nullptr) a.debug.value_depths[row + token] = depth;
}

// Where a listing Select block (kList) keeps its remaining gains: kSelectListEntries of each half
// and their count, in the kSelectListBytes of its dynamic shared memory past the importances
// (past none when they are kept in the workspace).
struct SelectList {
  unsigned long long* hi;
  unsigned* lo;
  unsigned* count;
  unsigned* blocks_listed;  // ReadKvDebug::select_listed, or null
};
static_assert(kSelectListBytes >= kSelectListEntries * (8 + 4) + 4, "the list and its count");

__device__ SelectList ListAfter(const Args& a, int cluster, double* dynamic_shared) {
  const bool in_shared = SelectInShared(a.max_tokens, cluster);
  auto* hi = reinterpret_cast<unsigned long long*>(
      dynamic_shared + (in_shared ? SelectShare(a.max_tokens, cluster) : 0));
  auto* lo = reinterpret_cast<unsigned*>(hi + kSelectListEntries);
  return {hi, lo, lo + kSelectListEntries, a.debug.select_listed};
}

// Shared memory of a Select block that other blocks of its cluster read.
struct SelectClusterShared {
  unsigned hist[2][internal::kSelectDigitBins];  // this pass's digit counts; the next pass's
  unsigned long long final_hi[internal::kSelectFinal];
  unsigned final_lo[internal::kSelectFinal];
  unsigned gathered;
  // The block's share of the row: positive steps, AND and OR of their gains' bits.
  unsigned long long positive, all, any;
};

// Cluster-wide selection of the element of rank `rank` (1-based, from the top) among the
// composites (hi = gain bits, lo = ~key) that the blocks' for_each yield and that match the
// prefix (hi's bits [top, 64) equal prefix_hi; `count` elements in all): BlockSelect's passes
// with the digit histograms summed over the cluster. Every thread of every block of the cluster
// calls it with the same arguments, and every block returns the same cut. With kList, a block
// whose share of a pass's bin is at most kSelectListEntries gains lists them in `list` and goes
// over the list from then on instead of calling for_each (`list` is unused without kList).
template <int kCluster, bool kList, typename ForEach>
__device__ internal::GreedyCut ClusterSelect(const ForEach& for_each, int top,
                                             unsigned long long prefix_hi,
                                             unsigned long long mask_hi, long long rank,
                                             long long count, SelectClusterShared& sh,
                                             SelectList list) {
  using internal::kSelectDigitBins;
  using internal::kSelectFinal;
  const cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  __shared__ unsigned total[kSelectDigitBins];
  __shared__ internal::BinPick picked;
  __shared__ internal::GreedyCut cut;
  [[maybe_unused]] bool on_list = false;  // the same in every thread of the block
  const auto each = [&](auto&& f) {
    if constexpr (kList) {
      if (on_list) {
        for (unsigned k = tid; k < *list.count; k += blockDim.x) f(list.hi[k], list.lo[k]);
        return;
      }
    }
    for_each(f);
  };
  // No other block reads this block's histograms before the first pass's cluster barrier.
  for (int j = tid; j < 2 * kSelectDigitBins; j += blockDim.x) {
    sh.hist[j / kSelectDigitBins][j % kSelectDigitBins] = 0;
  }
  if (tid == 0) {
    sh.gathered = 0;
    if constexpr (kList) *list.count = 0;
  }
  __syncthreads();
  internal::RadixPrefix p(top, prefix_hi, mask_hi, rank, count);
  int cur = 0;
  while (p.Narrowing()) {
    p.NextDigit();
    each([&](unsigned long long hi, unsigned lo) {
      if (p.Matches(hi, lo)) atomicAdd(&sh.hist[cur][p.Digit(hi, lo)], 1u);
    });
    cluster.sync();  // every block's counts of this digit are complete
    for (int j = tid; j <= static_cast<int>(p.digit_mask); j += blockDim.x) {
      unsigned sum = 0;
      for (unsigned r = 0; r < kCluster; ++r) {
        sum += cluster.map_shared_rank(&sh, r)->hist[cur][j];
      }
      total[j] = sum;
    }
    // The other histogram was last read by the cluster in the previous pass, which every block
    // finished before this pass's barrier: clear it for the next pass.
    for (int j = tid; j < kSelectDigitBins; j += blockDim.x) sh.hist[cur ^ 1][j] = 0;
    __syncthreads();
    if (warp == 0) {
      const internal::BinPick pick =
          internal::WarpFindBin([&](int j) { return total[j]; }, p.digit_mask + 1, p.rank);
      if (lane == 0) picked = pick;
    }
    __syncthreads();
    p.Take(picked);
    // This block's gains in the taken bin are its own count of that bin (complete since the
    // barrier; the histogram is cleared only in the next pass): list them if few enough and
    // another pass follows. Uniform over the block: shared values only.
    if constexpr (kList) {
      if (!on_list && p.Narrowing() &&
          sh.hist[cur][picked.bin] <= static_cast<unsigned>(kSelectListEntries)) {
        for_each([&](unsigned long long hi, unsigned lo) {
          if (!p.Matches(hi, lo)) return;
          const unsigned at = atomicAdd(list.count, 1u);
          list.hi[at] = hi;
          list.lo[at] = lo;
        });
        on_list = true;
        if (tid == 0 && list.blocks_listed != nullptr) atomicAdd(list.blocks_listed, 1u);
        __syncthreads();
      }
    }
    cur ^= 1;
  }
  // At most kSelectFinal elements match in the whole cluster (composites are distinct): each
  // block lists its own, and warp 0 of every block ranks the cluster's lists; the one with
  // rank - 1 elements above it is the cut.
  internal::GatherMatches(each, p, sh.gathered, sh.final_hi, sh.final_lo);
  cluster.sync();
  if (warp == 0) {
    unsigned long long hi = 0;
    unsigned lo = 0;
    int n = 0;
    for (unsigned r = 0; r < kCluster; ++r) {
      const SelectClusterShared* other = cluster.map_shared_rank(&sh, r);
      const int there = min(static_cast<int>(other->gathered), kSelectFinal - n);
      if (lane >= n && lane < n + there) {
        hi = other->final_hi[lane - n];
        lo = other->final_lo[lane - n];
      }
      n += there;
    }
    long long above = 0;
    for (int j = 0; j < n; ++j) {
      const unsigned long long hj = __shfl_sync(0xffffffffu, hi, j);
      const unsigned lj = __shfl_sync(0xffffffffu, lo, j);
      above += hj > hi || (hj == hi && lj > lo);
    }
    if (lane < n && above == p.rank - 1) {
      cut = {__longlong_as_double(static_cast<long long>(hi)), ~lo};
    }
  }
  cluster.sync();  // no block leaves (or reuses its lists) while another still reads them
  return cut;
}

// The Select launch. Dynamic shared memory: SelectShare(max_tokens, kCluster) doubles when
// SelectInShared, else none; then kSelectListBytes with kList.
template <int G, int kThreads, int kCluster, bool kList>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads)
    Select(Args a) {
  ChainEntry();
  const cg::cluster_group cluster = cg::this_cluster();
  const int r = static_cast<int>(cluster.block_rank());
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int T = a.seq_lens[b];
  if (T <= 0) return;  // the whole cluster: T is the row's
  const int chunks = (T + a.chunk_tokens - 1) / a.chunk_tokens;
  const int share = SelectShare(T, kCluster);
  const int begin = min(T, r * share);
  const int end = min(T, begin + share);
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  extern __shared__ double shared_importance[];
  __shared__ SelectClusterShared sh;
  __shared__ float stat_m[G], stat_inv[G];
  __shared__ long long scratch[2 * kThreads / kWarp];

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  if (warp < G) {
    // Warp q: the max over the chunks, then the sum of exps in a fixed order (lane-strided, then
    // a butterfly), so every block of the row gets the same statistics.
    const int q = warp;
    const float* ml = a.chunk_ml + (first_q + q) * a.max_chunks * 2;
    float mq = -INFINITY;
    for (int k = lane; k < chunks; k += kWarp) mq = fmaxf(mq, ml[2 * k]);
    mq = internal::WarpMax(mq);
    double z = 0.0;
    for (int k = lane; k < chunks; k += kWarp) {
      if (ml[2 * k] != -INFINITY) z += static_cast<double>(ml[2 * k + 1]) * exp(ml[2 * k] - mq);
    }
    for (int o = 16; o > 0; o /= 2) z += __shfl_xor_sync(0xffffffffu, z, o);
    const auto inv = static_cast<float>(1.0 / z);
    if (lane == 0) {
      stat_m[q] = mq;
      stat_inv[q] = inv;
      if (r == 0) {
        a.stats[(first_q + q) * 2] = mq;
        a.stats[(first_q + q) * 2 + 1] = inv;
      }
    }
  }
  __syncthreads();

  const size_t head = static_cast<size_t>(b) * a.heads_kv + h;
  const size_t row = head * a.max_tokens;
  double* importance = SelectInShared(a.max_tokens, kCluster) ? shared_importance
                                                              : a.importance + row + begin;
  const int spo = a.policy.value_steps;
  const ValueIncrements inc(a.policy);
  // The share's importances, its positive steps and the bits all / any of their gains share.
  unsigned long long positive = 0, all = ~0ull, any = 0;
  const float* logits = a.logits + first_q * a.max_tokens;
  for (int i0 = begin + tid; i0 < end; i0 += kScanUnroll * kThreads) {
    float x[kScanUnroll][G];  // loaded before any is used: independent loads in flight
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      const int i = i0 + u * kThreads;
#pragma unroll
      for (int q = 0; q < G; ++q) x[u][q] = i < end ? logits[q * a.max_tokens + i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= end) break;
      double w = 0.0;
#pragma unroll
      for (int q = 0; q < G; ++q) {
        const float p = expf(x[u][q] - stat_m[q]) * stat_inv[q];
        w = __dadd_rn(w, __dmul_rn(static_cast<double>(p), static_cast<double>(p)));
      }
      importance[i - begin] = w;
      if (a.debug.value_importance != nullptr) a.debug.value_importance[row + i] = w;
      internal::ForPositiveSteps<kMaxValueSteps>(w, inc, spo, [&](int, double gain) {
        ++positive;
        all &= internal::GainBits(gain);
        any |= internal::GainBits(gain);
      });
    }
  }
  positive = internal::BlockSumLL(static_cast<long long>(positive), scratch);
  internal::BlockAndOr(all, any, scratch);
  if (tid == 0) {
    sh.positive = positive;
    sh.all = all;
    sh.any = any;
  }
  cluster.sync();  // the shares' counts, and every importance of the block, are written
  long long positive_row = 0;
  all = ~0ull;
  any = 0;
  for (int q = 0; q < kCluster; ++q) {
    const SelectClusterShared* other = cluster.map_shared_rank(&sh, static_cast<unsigned>(q));
    positive_row += static_cast<long long>(other->positive);
    all &= other->all;
    any |= other->any;
  }

  // The mode, exactly the CPU allocator's cases: no step, every positive step, or a cut.
  const long long steps = ValueSteps(a, T);
  if (steps <= 0 || positive_row <= steps) {
    cluster.sync();  // no block leaves while another still reads its counts
    for (int i = begin + tid; i < end; i += kThreads) {
      const int k = steps <= 0 ? 0 : internal::CountAbove(importance[i - begin], 0.0, inc, spo, 0);
      WriteValueDepth(a, row, i, k);
    }
    return;
  }
  // Selection starts below the bits every positive gain of the row shares.
  const int top = 64 - __clzll(static_cast<long long>(all ^ any));
  const unsigned long long shared_mask = top >= 64 ? 0ull : ~0ull << top;
  const internal::GreedyCut cut = ClusterSelect<kCluster, kList>(
      [&](auto&& f) {
        for (int i = begin + tid; i < end; i += kThreads) {
          const double w = importance[i - begin];
          const auto first_key = static_cast<unsigned>(i) << kValueStepBits;
          internal::ForPositiveSteps<kMaxValueSteps>(w, inc, spo, [&](int s, double gain) {
            f(internal::GainBits(gain), ~(first_key | static_cast<unsigned>(s)));
          });
        }
      },
      top, all & shared_mask, shared_mask, steps, positive_row, sh,
      kList ? ListAfter(a, kCluster, shared_importance) : SelectList{});
  for (int i = begin + tid; i < end; i += kThreads) {
    WriteValueDepth(a, row, i,
                    internal::StepsTaken<kMaxValueSteps>(
                        importance[i - begin], inc, spo,
                        static_cast<unsigned>(i) << kValueStepBits, cut));
  }
}

}  // namespace readkv::cuda::readkv_kernels
