// ReadKV decode attention with the constrained reader (docs/readkv.md, "Read path"): four
// launches per call, all on one stream (chained by programmatic dependent launch with
// KVGATE_READKV_PDL=1; ChainEntry). This file holds Prepare and the launcher; the
// shared state is readkv_attention_state.cuh, the other launches readkv_logits.cuh,
// readkv_select.cuh and readkv_values.cuh (one translation unit: the headers are this file's).
//
//   1. Prepare   (H_kv, B) x d        transformed queries, Key importance, Key depths (threshold
//                                     allocator over d channels: cut by block radix selection),
//                                     the row's Key entry list (KeyList), a_qc = q~_qc sigma_c /
//                                     sqrt(d), bias_q = sum_c q~_qc mu_c / sqrt(d); zeroes the
//                                     row's arrival counter
//   2. Logits    (chunks, H_kv, B) x 256   one thread per token slot of a page (of up to 4 pages
//                                     per pass): reads t_c planes of each channel, logit = bias +
//                                     sum_c a_qc centroid; writes logits and the chunk's (max, sum
//                                     of exps). When R_K <= 2 or chunks are at most 512 tokens
//                                     (ReadKvUsesMmaLogits): on tensor cores (LogitsMma), the
//                                     channels of depth <= 2 as table-free sign features
//   3. Select    (C, H_kv, B) x 256    a cluster of C = 8 blocks per row (other shapes of
//                                     kSelectShapes follow the grid: SelectShapeOf): softmax
//                                     statistics, a_i = sum_q p_qi^2 in double (each block a
//                                     share of the row's tokens, in its shared memory), the
//                                     Value cut by radix selection over the bits of the positive
//                                     doubles a_i inc_k with the digit histograms summed over the
//                                     cluster (distributed shared memory), the Value depths
//   4. Values    (chunks, H_kv, B) x 256   sum_i p_i centroid per chunk: tokens sorted by depth
//                                     into 16-token tiles; a warp copies its next tile's planes
//                                     and logits (cp.async) while it decodes the current one and
//                                     multiplies P . Vhat on tensor cores (ValuesMma; depth-1
//                                     tiles take the bits as the operand, no table). Kept for
//                                     comparison: the CUDA-core reader (Values, x 128: lane groups
//                                     of d / 8 lanes per token, 8 channels at a time)
//   5. Finish    (no launch)          a row's last Values block: the chunks' partials, mu mass +
//                                     sigma acc, inverse V transform
//
// Depth choices are those of readkv::codec's Threshold allocator for the same weights: the same
// doubles (no contraction), the same cut (the steps-th largest gain, found by selection), the
// same tie order (object index). Outputs match the CPU reader within float tolerance: the logits
// are summed in a different order and p uses expf.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "readkv/cuda/decode_attention.h"
#include "readkv_attention_state.cuh"
#include "readkv_device.cuh"
#include "readkv_logits.cuh"
#include "readkv_logits_mma.cuh"
#include "readkv_select.cuh"
#include "readkv_values.cuh"

namespace readkv::cuda::readkv_kernels {

// ---- 1. Prepare ------------------------------------------------------------------------------

// The row's Key entry list (KeyList) from its depths: thread c of the block (c < d <= 128,
// every channel read, t >= 1) lists channel c's t planes after the planes of channels 0..c-1.
__device__ void WriteKeyList(KeyList& list, int t, int c, int d, int W) {
  __shared__ int warp_total[128 / kWarp];
  const int lane = c % kWarp, warp = c / kWarp;
  int through = t;  // t_0 + ... + t_c
  for (int o = 1; o < kWarp; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, through, o);
    if (lane >= o) through += y;
  }
  if (lane == kWarp - 1) warp_total[warp] = through;
  __syncthreads();
  for (int w = 0; w < warp; ++w) through += warp_total[w];
  const int off = through - t;
  for (int r = 0; r < t; ++r) {
    list.entry_word[off + r] = static_cast<uint16_t>((c * W + t - 1 - r) * 8);
  }
  // The code sits in the 64-bit window (group end_group, group end_group - 1) at `shift`.
  const int end_group = (off + t - 1) / kWarp;
  list.chan_desc[c] = PackChannel(off - kWarp * (end_group - 1), t);
  // group_first[g] = c for the groups whose first channel is c: those after the previous
  // channel's last group, up to this channel's.
  const int prev_end = c == 0 ? -1 : (off - 1) / kWarp;
  for (int g = prev_end + 1; g <= end_group; ++g) list.group_first[g] = c;
  if (c == d - 1) {
    list.group_first[end_group + 1] = d;
    list.entries = through;
  }
}

__global__ void __launch_bounds__(128) Prepare(Args a) {
  ChainEntry();
  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int d = a.head_dim;
  const int c = threadIdx.x;
  const int group = a.group;
  constexpr int kMaxGroup = 8;  // query heads per KV head (the launcher's cases: 1, 2, 4, 8)
  __shared__ float x[kMaxGroup][128];  // the transform's cross-warp stages
  __shared__ long long scratch[32];
  __shared__ float bias_part[kMaxGroup][128 / kWarp];  // per head, per warp
  __shared__ internal::SelectShared selection;
  // Zero this row's arrival counter: the row's Values blocks count themselves on it.
  const size_t row = static_cast<size_t>(b) * a.heads_kv + h;
  if (c == 0) a.row_arrivals[row] = 0;

  const size_t head = static_cast<size_t>(h) * d;
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * group;
  // Every global input of the block is loaded here, before the first barrier: one round trip
  // instead of one per use (loads do not move across the transform's barriers).
  const float sign = a.codec.key_signs[head + c];
  const float sd = a.codec.key_std[head + c];
  const float mu = a.codec.key_mean[head + c];
  const int spo = a.policy.key_steps;
  constexpr int kMaxKeySteps = (1 << kKeyStepBits) - 1;
  double inc[kMaxKeySteps];
#pragma unroll
  for (int s = 0; s < kMaxKeySteps; ++s) inc[s] = s < spo ? a.policy.key_increments[s] : 0.0;
  float v[kMaxGroup];  // the group's queries at channel c
#pragma unroll
  for (int q = 0; q < kMaxGroup; ++q) {
    const float y = q < group ? a.queries[(first_q + q) * d + c] : 0.0f;
    v[q] = sign < 0.0f ? -y : y;
  }
  internal::FwhtChannelRows<kMaxGroup>(v, group, d, a.transform_scale, x);

  // Key channel importance, exactly codec::KeyChannelImportance (heads in order).
  double w = 0.0;
#pragma unroll
  for (int q = 0; q < kMaxGroup; ++q) {
    if (q >= group) break;
    const double scaled = __dmul_rn(static_cast<double>(v[q]), static_cast<double>(sd));
    w = __dadd_rn(w, __dmul_rn(scaled, scaled));
  }
  // a_qc, and the bias: every channel contributes scaled * mu; read channels add a_qc centroid.
#pragma unroll
  for (int q = 0; q < kMaxGroup; ++q) {
    if (q >= group) break;  // uniform over the block
    const float scaled = v[q] * a.attention_scale;
    a.qa[(first_q + q) * d + c] = scaled * sd;
    const float part = internal::WarpSum(scaled * mu);
    if (c % kWarp == 0) bias_part[q][c / kWarp] = part;
  }

  // Key depths: t_min 1, step 1, budget floor(R_K d); thread c owns channel c and its <= 7 steps.
  // The threshold allocator (codec::DepthAllocator::Threshold): steps above the cut, then the
  // cut's ties by channel, i.e. the steps at or before the steps-th element of greedy's order,
  // found by BlockSelect over the channels' positive gains (2-3 histogram passes, no sort).
  // The channel's gains w inc[s] are computed once, into registers (every loop over them is
  // unrolled): the selection's passes re-read them instead of reloading inc and multiplying.
  const long long budget = internal::FloorBudget(a.policy.key_bits, static_cast<double>(d));
  long long steps = budget - d;
  if (steps > static_cast<long long>(d) * spo) steps = static_cast<long long>(d) * spo;
  double gain[kMaxKeySteps];
  int positive_steps = 0;  // CountAbove(w, 0): the leading steps of positive gain
#pragma unroll
  for (int s = 0; s < kMaxKeySteps; ++s) {
    gain[s] = s < spo ? __dmul_rn(w, inc[s]) : 0.0;
    positive_steps += positive_steps == s && s < spo && gain[s] > 0.0;
  }
  const long long positive = internal::BlockSumLL(positive_steps, scratch);
  int k = positive_steps;
  if (steps <= 0) {
    k = 0;
  } else if (positive > steps) {
    const auto first_key = static_cast<unsigned>(c) << kKeyStepBits;
    // The top bits every positive gain of the row shares: the selection's digits start below
    // them, not at bit 63, where the sign and the exponent's top bits rarely split anything.
    unsigned long long all = ~0ull, any = 0;
#pragma unroll
    for (int s = 0; s < kMaxKeySteps; ++s) {
      if (s < positive_steps) {
        all &= internal::GainBits(gain[s]);
        any |= internal::GainBits(gain[s]);
      }
    }
    internal::BlockAndOr(all, any, scratch);
    const int top = 64 - __clzll(static_cast<long long>(all ^ any));  // bits [top, 64) shared
    const unsigned long long shared_mask = top >= 64 ? 0ull : ~0ull << top;
    const internal::GreedyCut cut = internal::BlockSelect(
        [&](auto&& f) {
#pragma unroll
          for (int s = 0; s < kMaxKeySteps; ++s) {
            if (s < positive_steps) f(internal::GainBits(gain[s]), ~(first_key + s));
          }
        },
        top, all & shared_mask, shared_mask, steps, positive, selection);
    k = 0;  // StepsTaken(w, inc, spo, first_key, cut): the leading steps at or above the cut
#pragma unroll
    for (int s = 0; s < kMaxKeySteps; ++s) {
      k += k == s && s < spo &&
           (gain[s] > cut.gain || (gain[s] == cut.gain && first_key + s <= cut.key));
    }
  }
  const auto depth = static_cast<uint8_t>(1 + k);
  a.key_depths[row * d + c] = depth;
  if (a.debug.key_depths != nullptr) a.debug.key_depths[row * d + c] = depth;
  if (a.debug.totals != nullptr) {
    // The ledgers' Key terms: channel c reads `depth` planes of T bits, in the 32-byte plane
    // sector of each of the row's pages.
    const auto tokens = static_cast<unsigned long long>(a.seq_lens[b]);
    internal::AddToTotals(a.debug.totals, depth * tokens,
                          depth * ((tokens + kPageTokens - 1) / kPageTokens) * 32ull);
  }
  WriteKeyList(a.key_lists[row], depth, c, d, a.store_bits);
  __syncthreads();
  if (c < group) {
    float sum = 0.0f;
    for (int wv = 0; wv < d / kWarp; ++wv) sum += bias_part[c][wv];
    a.bias[first_q + c] = sum;
  }
}

}  // namespace readkv::cuda::readkv_kernels

namespace readkv::cuda {
namespace {

using namespace readkv_kernels;  // NOLINT: the kernels and their arguments, this file's own
using internal::Launch;

// Which logits kernel runs, read per call so a bench can compare them in one process:
// KVGATE_READKV_LOGITS=plain is the per-bit reader (0), wide1 / wide2 / wide4 the transposed
// reader with 1, 2 or 4 pages per pass, mma the tensor-core reader (LogitsMma, 5). Unset: mma
// when ReadKvUsesMmaLogits says so (at most 2 Key bits per channel, or chunks of 1-2 pages),
// else wide4, the fastest transposed reader on the H200 (2026-11-30; docs/performance-notes.md,
// "Logits readers").
int LogitsVariant(double key_bits, int chunk_tokens) {
  if (ReadKvUsesMmaLogits(key_bits, chunk_tokens)) return 5;
  const char* v = std::getenv("KVGATE_READKV_LOGITS");
  if (v == nullptr) return 4;
  if (std::strcmp(v, "plain") == 0) return 0;
  if (std::strcmp(v, "wide1") == 0) return 1;
  if (std::strcmp(v, "wide2") == 0) return 2;
  return 4;
}

// Which Values kernel runs, read per call like LogitsVariant: KVGATE_READKV_VALUES=lanes is the
// CUDA-core reader (0); unset or anything else: mma, the tensor-core reader (1), 1.39x faster
// for the whole ReadKV(8,4) call at 32K x 16 and 2.2x at 8K x 1 (H200, 2026-11-30;
// docs/performance-notes.md, "Values reader").
int ValuesVariant() {
  const char* v = std::getenv("KVGATE_READKV_VALUES");
  return v != nullptr && std::strcmp(v, "lanes") == 0 ? 0 : 1;
}

// Whether the launches use programmatic dependent launch (each kernel scheduled while the one
// before it ends; ChainEntry keeps the order): only with KVGATE_READKV_PDL=1. Measured on the
// H200 (2026-11-30 and 2026-12-01; docs/performance-notes.md, "Programmatic dependent launch")
// it was at most 1% faster anywhere and up to 18% slower where grids are small (8K x 1 (8,2):
// 73.6 against 70.2 us), so it is off.
// Read per call like LogitsVariant.
bool ChainedLaunches() {
  const char* v = std::getenv("KVGATE_READKV_PDL");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// Whether Select lists a block's last gains in shared memory instead of rescanning its share in
// every radix pass: only with KVGATE_READKV_SELECT=list (the same cut either way; off until an
// H200 round measures it). Read per call like LogitsVariant.
bool SelectListing() {
  const char* v = std::getenv("KVGATE_READKV_SELECT");
  return v != nullptr && std::strcmp(v, "list") == 0;
}

// Select<G, threads, cluster, kList> of every launch shape, in kSelectShapes' order.
using SelectKernels = std::array<void (*)(Args), internal::kSelectShapeCount>;
template <int G, bool kList, size_t... S>
SelectKernels SelectInstances(std::index_sequence<S...>) {
  return {Select<G, kSelectShapes[S].threads, kSelectShapes[S].cluster, kList>...};
}

// The kernels' arguments: the call's inputs and the workspace cut into its arrays (Layout).
Args MakeArgs(const DecodeShape& s, const DecodeInputs& in, const ReadKvCache& cache,
              const ReadKvCodec& codec, const ReadKvReadPolicy& policy, void* workspace,
              const ReadKvDebug& debug) {
  const Layout layout(s);
  char* base = static_cast<char*>(workspace);
  Args a{};
  a.batch = s.batch;
  a.heads_q = s.heads_q;
  a.heads_kv = s.heads_kv;
  a.head_dim = s.head_dim;
  a.group = s.group();
  a.max_pages = s.max_pages;
  a.max_tokens = s.max_tokens;
  a.chunk_tokens = s.chunk_tokens;
  a.max_chunks = s.max_chunks();
  a.store_bits = codec.store_bits;
  a.attention_scale = 1.0f / sqrtf(static_cast<float>(s.head_dim));
  a.transform_scale = static_cast<float>(1.0 / sqrt(static_cast<double>(s.head_dim)));
  a.queries = in.queries;
  a.page_table = in.page_table;
  a.seq_lens = in.seq_lens;
  a.out = in.out;
  a.key_planes = cache.key_planes;
  a.value_planes = cache.value_planes;
  a.codec = codec;
  a.policy = policy;
  a.qa = reinterpret_cast<float*>(base + layout.qa);
  a.bias = reinterpret_cast<float*>(base + layout.bias);
  a.key_depths = reinterpret_cast<uint8_t*>(base + layout.key_depths);
  a.key_lists = reinterpret_cast<KeyList*>(base + layout.key_lists);
  a.logits = reinterpret_cast<float*>(base + layout.logits);
  a.chunk_ml = reinterpret_cast<float*>(base + layout.chunk_ml);
  a.stats = reinterpret_cast<float*>(base + layout.stats);
  a.importance = reinterpret_cast<double*>(base + layout.importance);
  a.value_depths = reinterpret_cast<uint8_t*>(base + layout.value_depths);
  a.partial_out = reinterpret_cast<float*>(base + layout.partial_out);
  a.partial_mass = reinterpret_cast<float*>(base + layout.partial_mass);
  a.row_arrivals = reinterpret_cast<unsigned*>(base + layout.row_arrivals);
  a.debug = debug;
  return a;
}

}  // namespace

size_t ReadKvDecodeWorkspaceBytes(const DecodeShape& shape) {
  return Layout(internal::Resolved(shape)).total;
}

cudaError_t ReadKvDecodeAttention(const DecodeShape& requested, const DecodeInputs& in,
                                  const ReadKvCache& cache, const ReadKvCodec& codec,
                                  const ReadKvReadPolicy& policy, void* workspace,
                                  cudaStream_t stream, const ReadKvDebug& debug) {
  const DecodeShape s = internal::Resolved(requested);
  const int W = codec.store_bits;
  if (!internal::ValidShape(s) || in.queries == nullptr || in.page_table == nullptr ||
      in.seq_lens == nullptr || in.out == nullptr || workspace == nullptr ||
      cache.key_planes == nullptr || cache.value_planes == nullptr || W < 2 ||
      W > kMaxStoreBits || codec.key_mean == nullptr || codec.key_std == nullptr ||
      codec.value_mean == nullptr || codec.value_std == nullptr || codec.key_signs == nullptr ||
      codec.value_signs == nullptr || codec.centroids == nullptr ||
      policy.key_increments == nullptr || policy.value_increments == nullptr ||
      policy.key_steps != W - 1 || policy.value_steps != (W - 1) / 2 ||
      static_cast<long long>(s.head_dim) * policy.key_steps > 1024 ||
      !(policy.key_bits >= 1.0 && policy.key_bits <= W) ||
      !(policy.value_bits >= 1.0 && policy.value_bits <= W) ||
      s.max_tokens >= (1 << (32 - kValueStepBits))) {
    // (The last: Value allocation keys token << 2 | step are 32-bit.)
    return cudaErrorInvalidValue;
  }
  const Args a = MakeArgs(s, in, cache, codec, policy, workspace, debug);

  const dim3 heads(s.heads_kv, s.batch);
  const dim3 chunks(s.max_chunks(), s.heads_kv, s.batch);
  const bool chain = ChainedLaunches();
  cudaError_t status = Launch(Prepare, heads, s.head_dim, 0, stream, chain, a);
  if (status != cudaSuccess) return status;
  // Logits readers (KVGATE_READKV_LOGITS, for same-run comparisons): plain (per bit), wide1 (the
  // transposed reader, one page per pass), wide2, wide4 (2 or 4 pages per pass), mma (tensor
  // cores; shallow channels as sign features).
  const int variant = LogitsVariant(policy.key_bits, s.chunk_tokens);
  // LogitsMma stages a page's planes, at most floor(R_K d) (t_min = 1), and <= 15 padding slots.
  const int max_entries = static_cast<int>(std::min<double>(
      static_cast<double>(s.head_dim) * W, std::floor(policy.key_bits * s.head_dim + 1e-9) + 8)) + 16;
#define KVGATE_LOGITS_CASE(G)                                                                 \
  case G:                                                                                     \
    if (variant == 0) {                                                                       \
      status = Launch(Logits<G>, chunks, kPageTokens, 0, stream, chain, a);                   \
    } else if (variant == 1) {                                                                \
      status = Launch(LogitsTransposed<G, 1>, chunks, kPageTokens, 0, stream, chain, a);      \
    } else if (variant == 2) {                                                                \
      status = Launch(LogitsTransposed<G, 2>, chunks, kPageTokens, 0, stream, chain, a);      \
    } else if (variant == 5) {                                                                \
      static const cudaError_t opt_in = cudaFuncSetAttribute(                                 \
          LogitsMma<G>, cudaFuncAttributeMaxDynamicSharedMemorySize,                          \
          static_cast<int>(LogitsMmaStageBytes(kMaxStagedEntries)));                          \
      if (opt_in != cudaSuccess) return opt_in;                                               \
      status = Launch(LogitsMma<G>, chunks, kPageTokens, LogitsMmaStageBytes(max_entries),    \
                      stream, chain, a, max_entries);                                         \
    } else {                                                                                  \
      status = Launch(LogitsTransposed<G, 4>, chunks, kPageTokens, 0, stream, chain, a);      \
    }                                                                                         \
    break;
  switch (s.group()) {
    KVGATE_LOGITS_CASE(1)
    KVGATE_LOGITS_CASE(2)
    KVGATE_LOGITS_CASE(4)
    default:
    KVGATE_LOGITS_CASE(8)
  }
#undef KVGATE_LOGITS_CASE
  if (status != cudaSuccess) return status;
  // Select: a cluster of blocks per row, its importances in shared memory when they fit
  // (SelectInShared), else in the workspace. Its shape (blocks per row, threads per block) is
  // the one of kSelectShapes that SelectShapeOf picks for the grid; the listing instances
  // (KVGATE_READKV_SELECT=list) take kSelectListBytes more.
  constexpr auto kShapes = std::make_index_sequence<internal::kSelectShapeCount>();
  static const SelectKernels kSelects[2][4] = {
      {SelectInstances<1, false>(kShapes), SelectInstances<2, false>(kShapes),
       SelectInstances<4, false>(kShapes), SelectInstances<8, false>(kShapes)},
      {SelectInstances<1, true>(kShapes), SelectInstances<2, true>(kShapes),
       SelectInstances<4, true>(kShapes), SelectInstances<8, true>(kShapes)}};
  const int list = SelectListing() ? 1 : 0;
  const int group_index = s.group() == 1 ? 0 : s.group() == 2 ? 1 : s.group() == 4 ? 2 : 3;
  const int shape = SelectShapeOf(s);
  const SelectGrid grid = kSelectShapes[shape];
  // Its importances pass 48 KB of shared memory from ~45K tokens per row: every instance opts in
  // to the most it may take, once.
  static const cudaError_t select_opt_in = [] {
    for (int listing = 0; listing < 2; ++listing) {
      for (const SelectKernels& row : kSelects[listing]) {
        for (void (*kernel)(Args) : row) {
          const cudaError_t e = cudaFuncSetAttribute(
              kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
              static_cast<int>(kSelectMaxSharedBytes + (listing ? kSelectListBytes : 0)));
          if (e != cudaSuccess) return e;
        }
      }
    }
    return cudaSuccess;
  }();
  if (select_opt_in != cudaSuccess) return select_opt_in;
  const size_t select_shared = (SelectInShared(s.max_tokens, grid.cluster)
                                    ? SelectShare(s.max_tokens, grid.cluster) * sizeof(double)
                                    : 0) +
                               (list ? kSelectListBytes : 0);
  status = Launch(kSelects[list][group_index][shape], dim3(grid.cluster, s.heads_kv, s.batch),
                  grid.threads, select_shared, stream, chain, a);
  if (status != cudaSuccess) return status;
  // Values readers (KVGATE_READKV_VALUES, for same-run comparisons): lanes (CUDA cores, lane
  // groups per token) or mma (tensor cores on depth-sorted tiles, the default). Either finishes
  // each row in the row's last block (FinishRow).
  const bool values_mma = ValuesVariant() == 1;
#define KVGATE_VALUES_CASE(D, G)                                                              \
  if (s.head_dim == D && s.group() == G) {                                                    \
    status = values_mma                                                                       \
                 ? Launch(ValuesMma<D, G>, chunks, kMmaValueWarps * kWarp, 0, stream, chain, a) \
                 : Launch(Values<D, G>, chunks, kValueWarps * kWarp, 0, stream, chain, a);    \
  } else
  KVGATE_VALUES_CASE(128, 1) KVGATE_VALUES_CASE(128, 2) KVGATE_VALUES_CASE(128, 4)
  KVGATE_VALUES_CASE(128, 8) KVGATE_VALUES_CASE(64, 1) KVGATE_VALUES_CASE(64, 2)
  KVGATE_VALUES_CASE(64, 4) KVGATE_VALUES_CASE(64, 8) {}
#undef KVGATE_VALUES_CASE
  if (status != cudaSuccess) return status;
  return cudaGetLastError();
}

}  // namespace readkv::cuda
