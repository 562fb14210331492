// ReadKV decode attention, launch 3 (Select, three kernels): the Value token importances and
// the threshold allocator's Value depths, exactly the CPU allocator's. Included only by
// readkv_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "readkv_attention_state.cuh"

namespace readkv::cuda::readkv_kernels {

// ---- 3. Select -------------------------------------------------------------------------------
//
// Three launches over the same grid as Logits, (chunks, H_kv, B) x 256, one block per chunk of a
// row (sequence b, KV head h). The steps-th element of greedy's order (readkv_device.cuh) is
// found digit by digit on the gain bits: SelectImportance counts the exponents of every positive
// gain, SelectNarrow the next 12 bits of those in the chosen exponent; SelectDepths then knows
// every token's depth except for the few gains that share the cut's top 23 bits, lists those,
// and the row's last block selects the cut among them and finishes their tokens. A row's last
// block (the last to arrive, as in CUDA's threadFenceReduction sample) does the row-wide step
// of each launch; no grid-wide synchronisation is needed.

// Adds a block's histogram (shared, Bins a multiple of kSelectThreads) into its row's global
// one: each thread reads its Bins / kSelectThreads bins first, then sends the non-zero ones as
// fire-and-forget reductions. (The plain loop of atomicAdds compiled to ATOMG, each waiting on
// the last one's registers: 26% of SelectNarrow's stall samples at the go/no-go model's shape.)
// The block's ArriveLast fence orders them before its arrival.
template <int Bins>
__device__ __forceinline__ void FlushHistogram(const unsigned* hist, unsigned* row_hist) {
  static_assert(Bins % kSelectThreads == 0, "whole runs of bins per thread");
  constexpr int kPer = Bins / kSelectThreads;
  unsigned count[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) count[u] = hist[threadIdx.x + u * kSelectThreads];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    if (count[u] != 0) {
      asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;\n" ::"l"(
                       row_hist + threadIdx.x + u * kSelectThreads),
                   "r"(count[u])
                   : "memory");
    }
  }
}

// Block-wide: the bin of a complete global histogram (bins a multiple of kSelectThreads) holding
// the rank-th largest element: each thread sums its run of bins, one warp finds the run and then
// the bin in it.
__device__ internal::BinPick BlockFindBin(const unsigned* hist, int bins, long long rank) {
  __shared__ long long runs[kSelectThreads];
  __shared__ internal::BinPick result;
  const int per = bins / kSelectThreads;
  const unsigned* run = hist + threadIdx.x * per;
  long long sum = 0;
  for (int j = 0; j < per; ++j) sum += __ldcg(run + j);
  runs[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    const internal::BinPick coarse =
        internal::WarpFindBin([&](int j) { return runs[j]; }, kSelectThreads, rank);
    const unsigned* chosen = hist + coarse.bin * per;
    const internal::BinPick fine =
        internal::WarpFindBin([&](int j) { return __ldcg(chosen + j); }, per, coarse.rank);
    if (threadIdx.x == 0) result = {coarse.bin * per + fine.bin, fine.rank, fine.count};
  }
  __syncthreads();
  return result;
}

// The Value step budget of a row of T tokens: (floor(R_V T) - T) / 2 packets, at most T spo.
__device__ long long ValueSteps(const Args& a, int T) {
  const long long budget = internal::FloorBudget(a.policy.value_bits, static_cast<double>(T));
  long long steps = (budget - T) / 2;
  const long long most = static_cast<long long>(T) * a.policy.value_steps;
  if (steps > most) steps = most;
  return steps < 0 ? 0 : steps;
}

// A token's steps against the cut's 23-bit prefix p: `above` steps certainly taken (their top
// bits exceed p), then `open` steps sharing p (decided by the row's final selection).
struct PrefixSplit {
  int above, open;
};
__device__ __forceinline__ PrefixSplit SplitAtPrefix(double w, const ValueIncrements& inc, int spo,
                                                     unsigned long long p) {
  int k = 0;
  while (k < spo && (internal::GainBits(__dmul_rn(w, inc[k])) >> kPrefixShift) > p) ++k;
  int u = k;
  while (u < spo) {
    const double gain = __dmul_rn(w, inc[u]);
    if (!(gain > 0.0) || (internal::GainBits(gain) >> kPrefixShift) != p) break;
    ++u;
  }
  return {k, u - k};
}

__device__ __forceinline__ void WriteValueDepth(const Args& a, size_t row, int token, int steps) {
  const auto depth = static_cast<uint8_t>(1 + 2 * steps);
  a.value_depths[row + token] = depth;
  if (a.debug.value_depths != nullptr) a.debug.value_depths[row + token] = depth;
}

// 3a. Softmax statistics (every block of a row computes the same), a_i = sum_q p_qi^2 in double
// for the chunk's tokens, the row's positive steps and the histogram of their gains' exponents.
// The row's last block picks the row's mode and the exponent of the cut.
template <int G>
__global__ void __launch_bounds__(kSelectThreads) SelectImportance(Args a) {
  ChainEntry();
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int chunk = blk.chunk, h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const int end = min(T, start + a.chunk_tokens);
  const int chunks = (T + a.chunk_tokens - 1) / a.chunk_tokens;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  __shared__ float stat_m[G], stat_inv[G];
  __shared__ unsigned hist[kExponentBins];

  for (int j = tid; j < kExponentBins; j += blockDim.x) hist[j] = 0;
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
      if (chunk == 0) {
        a.stats[(first_q + q) * 2] = mq;
        a.stats[(first_q + q) * 2 + 1] = inv;
      }
    }
  }
  __syncthreads();

  const size_t head = static_cast<size_t>(b) * a.heads_kv + h;
  const size_t row = head * a.max_tokens;
  SelectRow& state = a.select_rows[head];
  const int spo = a.policy.value_steps;
  const ValueIncrements inc(a.policy);
  unsigned positive = 0;
  // kScanUnroll tokens per thread and trip, their logits loaded before any is used: one load
  // at a time left the kernel waiting on DRAM (ncu: 44% of its stalls on those loads).
  const float* logits = a.logits + first_q * a.max_tokens;
  for (int i0 = start + tid; i0 < end; i0 += kScanUnroll * blockDim.x) {
    float x[kScanUnroll][G];
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
#pragma unroll
      for (int q = 0; q < G; ++q) x[u][q] = i < end ? logits[q * a.max_tokens + i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
      if (i >= end) break;
      double w = 0.0;
#pragma unroll
      for (int q = 0; q < G; ++q) {
        const float p = expf(x[u][q] - stat_m[q]) * stat_inv[q];
        w = __dadd_rn(w, __dmul_rn(static_cast<double>(p), static_cast<double>(p)));
      }
      a.importance[row + i] = w;
      if (a.debug.value_importance != nullptr) a.debug.value_importance[row + i] = w;
      for (int s = 0; s < spo; ++s) {  // the positive steps: a prefix (gains fall with the step)
        const double gain = __dmul_rn(w, inc[s]);
        if (!(gain > 0.0)) break;
        ++positive;
        atomicAdd(&hist[internal::GainBits(gain) >> kExponentShift], 1u);
      }
    }
  }
  positive = __reduce_add_sync(0xffffffffu, positive);
  if (lane == 0 && positive > 0) {
    atomicAdd(&state.positive, static_cast<unsigned long long>(positive));
  }
  __syncthreads();
  unsigned* row_hist = a.exponent_hist + head * kExponentBins;
  FlushHistogram<kExponentBins>(hist, row_hist);
  if (!ArriveLast(&state.arrivals[0], chunks)) return;

  // The row's last block: the mode (exactly the CPU allocator's cases) and the cut's exponent.
  const long long steps = ValueSteps(a, T);
  const auto positive_all = static_cast<long long>(__ldcg(&state.positive));
  if (steps <= 0 || positive_all <= steps) {
    if (tid == 0) state.mode = steps <= 0 ? kNoSteps : kAllPositive;
    return;
  }
  const internal::BinPick pick = BlockFindBin(row_hist, kExponentBins, steps);
  if (tid == 0) {
    state.mode = kSelectCut;
    state.prefix = static_cast<unsigned long long>(pick.bin);
    state.rank = pick.rank;
    state.count = pick.count;
  }
}

// 3b. Histogram of gain bits 40..51 among the gains with the cut's exponent; the row's last
// block fixes the cut's top 23 bits.
__global__ void __launch_bounds__(kSelectThreads) SelectNarrow(Args a) {
  ChainEntry();
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const size_t head = static_cast<size_t>(b) * a.heads_kv + h;
  SelectRow& state = a.select_rows[head];
  if (state.mode != kSelectCut) return;
  const int end = min(T, start + a.chunk_tokens);
  const int chunks = (T + a.chunk_tokens - 1) / a.chunk_tokens;
  const int tid = threadIdx.x;
  const unsigned long long exponent = state.prefix;
  const long long rank = state.rank;
  __shared__ unsigned hist[kMantissaBins];

  for (int j = tid; j < kMantissaBins; j += blockDim.x) hist[j] = 0;
  __syncthreads();
  const double* importance = a.importance + head * a.max_tokens;
  const int spo = a.policy.value_steps;
  const ValueIncrements inc(a.policy);
  for (int i0 = start + tid; i0 < end; i0 += kScanUnroll * blockDim.x) {
    double w[kScanUnroll];  // loaded before any is used, as in SelectImportance
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
      w[u] = i < end ? importance[i] : 0.0;  // weight 0: no positive step
    }
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      for (int s = 0; s < spo; ++s) {
        const double gain = __dmul_rn(w[u], inc[s]);
        if (!(gain > 0.0)) break;
        const unsigned long long bits = internal::GainBits(gain);
        if ((bits >> kExponentShift) > exponent) continue;  // a token's gains fall with the step
        if ((bits >> kExponentShift) < exponent) break;
        atomicAdd(&hist[(bits >> kPrefixShift) & (kMantissaBins - 1)], 1u);
      }
    }
  }
  __syncthreads();
  unsigned* row_hist = a.mantissa_hist + head * kMantissaBins;
  FlushHistogram<kMantissaBins>(hist, row_hist);
  if (!ArriveLast(&state.arrivals[1], chunks)) return;

  const internal::BinPick pick = BlockFindBin(row_hist, kMantissaBins, rank);
  if (tid == 0) {
    state.prefix = (exponent << (kExponentShift - kPrefixShift)) | static_cast<unsigned>(pick.bin);
    state.rank = pick.rank;
    state.count = pick.count;
  }
}

// 3c. Value depths. Outside kSelectCut they follow from the mode. Else a token whose gains all
// differ from the cut's top 23 bits takes exactly its steps above them; the others' open steps
// (usually a handful per row) go to the row's candidate list, and the row's last block selects
// the cut among them (BlockSelect from bit 40 down, then ties by key = greedy's tie order) and
// writes those tokens' depths. A list that would overflow is not written: the last block then
// selects over the row's importances instead (slow, exact; only for massive exact ties).
__global__ void __launch_bounds__(kSelectThreads) SelectDepths(Args a) {
  ChainEntry();
  const ChunkBlock blk(a);
  if (blk.empty()) return;
  const int h = blk.h, b = blk.b, T = blk.T, start = blk.start;
  const int end = min(T, start + a.chunk_tokens);
  const int chunks = (T + a.chunk_tokens - 1) / a.chunk_tokens;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  const size_t head = static_cast<size_t>(b) * a.heads_kv + h;
  const size_t row = head * a.max_tokens;
  SelectRow& state = a.select_rows[head];
  const double* importance = a.importance + row;
  const int spo = a.policy.value_steps;
  const ValueIncrements inc(a.policy);
  const int mode = state.mode;
  if (mode != kSelectCut) {
    for (int i = start + tid; i < end; i += blockDim.x) {
      const int k = mode == kNoSteps ? 0 : internal::CountAbove(importance[i], 0.0, inc, spo, 0);
      WriteValueDepth(a, row, i, k);
    }
    return;
  }
  const unsigned long long prefix = state.prefix;
  const long long rank = state.rank;
  const long long count = state.count;
  const bool listed = count <= kCandidates;
  unsigned* list = a.candidates + head * kCandidates;

  // Warp-uniform trips so the warp can append its open steps with one atomic.
  const auto trip = [&](int base, double w) {
    const int i = base + lane;
    PrefixSplit split{0, 0};
    if (i < end) {
      split = SplitAtPrefix(w, inc, spo, prefix);
      if (split.open == 0) WriteValueDepth(a, row, i, split.above);
    }
    if (listed && __any_sync(0xffffffffu, split.open > 0)) {
      unsigned through = split.open;  // inclusive scan over lanes
      for (int o = 1; o < kWarp; o *= 2) {
        const unsigned y = __shfl_up_sync(0xffffffffu, through, o);
        if (lane >= o) through += y;
      }
      unsigned at = 0;
      if (lane == kWarp - 1) at = atomicAdd(&state.listed, through);
      at = __shfl_sync(0xffffffffu, at, kWarp - 1) + through - split.open;
      for (int s = 0; s < split.open; ++s) {
        if (at + s < static_cast<unsigned>(kCandidates)) {
          list[at + s] = (static_cast<unsigned>(i) << kValueStepBits) | (split.above + s);
        }
      }
    }
  };
  // kScanUnroll trips per pass, their importances loaded first (as in SelectImportance).
  const int step = static_cast<int>(blockDim.x);
  for (int base0 = start + warp * kWarp; base0 < end; base0 += kScanUnroll * step) {
    double w[kScanUnroll];
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      const int i = base0 + u * step + lane;
      w[u] = i < end ? importance[i] : 0.0;
    }
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      if (base0 + u * step < end) trip(base0 + u * step, w[u]);  // uniform over the warp
    }
  }
  if (!ArriveLast(&state.arrivals[2], chunks)) return;

  __shared__ internal::SelectShared selection;
  const unsigned long long prefix_hi = prefix << kPrefixShift;
  const unsigned long long mask_hi = ~0ull << kPrefixShift;
  // One block scans what the whole row produced: kScanUnroll independent loads per thread.
  const int stride = kScanUnroll * blockDim.x;
  if (listed) {
    const int n = min(static_cast<int>(__ldcg(&state.listed)), kCandidates);
    const internal::GreedyCut cut = internal::BlockSelect(
        [&](auto&& f) {
          for (int e0 = tid; e0 < n; e0 += stride) {
            unsigned key[kScanUnroll];
            double w[kScanUnroll];
#pragma unroll
            for (int u = 0; u < kScanUnroll; ++u) {
              const int e = e0 + u * blockDim.x;
              key[u] = e < n ? __ldcg(list + e) : 0u;
            }
#pragma unroll
            for (int u = 0; u < kScanUnroll; ++u) {
              w[u] = e0 + u * blockDim.x < n ? importance[key[u] >> kValueStepBits] : 0.0;
            }
#pragma unroll
            for (int u = 0; u < kScanUnroll; ++u) {
              if (e0 + u * blockDim.x >= n) continue;
              const double gain = __dmul_rn(w[u], inc[key[u] & ((1u << kValueStepBits) - 1)]);
              f(internal::GainBits(gain), ~key[u]);
            }
          }
        },
        kPrefixShift, prefix_hi, mask_hi, rank, count, selection);
    // Every open step's token; a token listed twice gets the same depth twice.
    for (int e = tid; e < n; e += blockDim.x) {
      const unsigned token = __ldcg(list + e) >> kValueStepBits;
      WriteValueDepth(
          a, row, static_cast<int>(token),
          internal::StepsTaken(importance[token], inc, spo, token << kValueStepBits, cut));
    }
  } else {
    const internal::GreedyCut cut = internal::BlockSelect(
        [&](auto&& f) {
          for (int i0 = tid; i0 < T; i0 += stride) {
            double w[kScanUnroll];
#pragma unroll
            for (int u = 0; u < kScanUnroll; ++u) {
              const int i = i0 + u * blockDim.x;
              w[u] = i < T ? importance[i] : 0.0;  // weight 0: no positive step
            }
#pragma unroll
            for (int u = 0; u < kScanUnroll; ++u) {
              const auto first_key = static_cast<unsigned>(i0 + u * blockDim.x) << kValueStepBits;
              for (int s = 0; s < spo; ++s) {
                const double gain = __dmul_rn(w[u], inc[s]);
                if (!(gain > 0.0)) break;
                f(internal::GainBits(gain), ~(first_key | s));
              }
            }
          }
        },
        kPrefixShift, prefix_hi, mask_hi, rank, count, selection);
    for (int i = tid; i < T; i += blockDim.x) {
      const double w = importance[i];
      if (SplitAtPrefix(w, inc, spo, prefix).open > 0) {
        WriteValueDepth(
            a, row, i,
            internal::StepsTaken(w, inc, spo, static_cast<unsigned>(i) << kValueStepBits, cut));
      }
    }
  }
}

}  // namespace readkv::cuda::readkv_kernels
