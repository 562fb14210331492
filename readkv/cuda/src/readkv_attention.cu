// ReadKV decode attention with the constrained reader (spec/readkv.md, "Read path"): seven
// launches per call, all on one stream.
//
//   1. Prepare   (H_kv, B) x d        transformed queries, Key importance, Key depths (threshold
//                                     allocator over d channels: cut by block radix selection),
//                                     a_qc = q~_qc sigma_c / sqrt(d), bias_q = sum_c q~_qc mu_c /
//                                     sqrt(d); zeroes the row's Select state
//   2. Logits    (chunks, H_kv, B) x 256   one thread per token slot of a page (of up to 4 pages
//                                     per pass): reads t_c planes of each channel, logit = bias +
//                                     sum_c a_qc centroid; writes logits and the chunk's (max, sum
//                                     of exps)
//   3. Select    (chunks, H_kv, B) x 256, three launches: the Value cut by radix selection over
//                                     the bits of the positive doubles a_i inc_k, a row's last
//                                     block finishing each step (section 3)
//      a. SelectImportance            softmax statistics, a_i = sum_q p_qi^2 in double, positive
//                                     steps, histogram of the gains' exponents -> cut's exponent
//      b. SelectNarrow                histogram of the next 12 bits -> cut's top 23 bits
//      c. SelectDepths                Value depths of every token not decided by those bits; the
//                                     row's last block selects the cut among the rest (usually a
//                                     handful) with greedy's tie order and writes their depths
//   4. Values    (chunks, H_kv, B) x 128   lane groups of d / 8 lanes per token: t_i value planes
//                                     decoded 8 channels at a time, sum_i p_i centroid per chunk
//   5. Finish    (H_q, B) x d         mu mass + sigma acc, inverse V transform
//
// Depth choices are those of readkv::codec's Threshold allocator for the same weights: the same
// doubles (no contraction), the same cut (the steps-th largest gain, found by selection), the
// same tie order (object index). Outputs match the CPU reader within float tolerance: the logits
// are summed in a different order and p uses expf.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "readkv/cuda/decode_attention.h"
#include "readkv_device.cuh"

namespace readkv::cuda {
namespace {

using internal::AlignUp;
using internal::kWarp;

constexpr int kCentroids = (2 << kMaxStoreBits) - 1;  // 511 floats, depth-major
constexpr int kValueWarps = 4;
constexpr size_t kKeyPlaneWords32 = 8;  // a 32-byte key plane as 32-bit words

// The Value cut's radix selection (section 3): digit 1 = gain bits 52..62 (the exponent; gains
// are positive), digit 2 = bits 40..51; then at most kCandidates gains share the cut's top 23
// bits and are listed for the final selection of the row (else the row's gains are re-read).
constexpr int kSelectThreads = 256;
constexpr int kExponentBins = 2048;
constexpr int kMantissaBins = 4096;
constexpr int kExponentShift = 52;
constexpr int kPrefixShift = 40;
constexpr int kCandidates = 16384;
constexpr int kScanUnroll = 4;  // loads in flight per thread in a last block's scans
// Allocation keys (section 1 and 3): object * 2^s + step, steps < 2^s.
constexpr int kKeyStepBits = 3;    // Key channels: key_steps <= 7
constexpr int kValueStepBits = 2;  // Value tokens: value_steps <= 3

// How a row's Value depths are chosen, once its positive steps are counted.
enum ValueMode : int {
  kNoSteps = 0,  // the budget leaves no step: every token at depth 1
  kAllPositive,  // the budget covers every positive step
  kSelectCut,    // the cut is selected
};

// One (sequence, KV head) row's Value selection state, in the workspace; Prepare zeroes it.
struct SelectRow {
  unsigned long long positive;  // positive steps of the row's tokens
  unsigned arrivals[3];         // blocks done with SelectImportance, SelectNarrow, SelectDepths
  unsigned listed;              // entries of the row's candidate list
  int mode;                     // ValueMode (SelectImportance's last block)
  long long rank;               // the cut's rank (1-based, from the top) among gains with...
  unsigned long long prefix;    // ...these top bits: bits >> 52, then bits >> 40
  long long count;              // how many gains have them
};

// Workspace layout of one call (every part 256-byte aligned).
struct Layout {
  size_t qa, bias, key_depths, logits, chunk_ml, stats, importance, value_depths, partial_out,
      partial_mass, select_rows, exponent_hist, mantissa_hist, candidates, total;
  explicit Layout(const DecodeShape& s) {
    const size_t bq = static_cast<size_t>(s.batch) * s.heads_q;
    const size_t bk = static_cast<size_t>(s.batch) * s.heads_kv;
    const size_t chunks = s.max_chunks();
    size_t at = 0;
    const auto take = [&](size_t bytes) {
      const size_t here = at;
      at += AlignUp(bytes);
      return here;
    };
    qa = take(bq * s.head_dim * 4);
    bias = take(bq * 4);
    key_depths = take(bk * s.head_dim);
    logits = take(bq * s.max_tokens * 4);
    chunk_ml = take(bq * chunks * 2 * 4);
    stats = take(bq * 2 * 4);
    importance = take(bk * s.max_tokens * 8);
    value_depths = take(bk * s.max_tokens);
    partial_out = take(bq * chunks * s.head_dim * 4);
    partial_mass = take(bq * chunks * 4);
    select_rows = take(bk * sizeof(SelectRow));
    exponent_hist = take(bk * kExponentBins * 4);
    mantissa_hist = take(bk * kMantissaBins * 4);
    candidates = take(bk * kCandidates * 4);
    total = at;
  }
};

struct Args {
  int batch, heads_q, heads_kv, head_dim, group, max_pages, max_tokens, chunk_tokens, max_chunks;
  int store_bits;
  float attention_scale;  // 1 / sqrtf(d), as the CPU reader's
  float transform_scale;  // (float)(1 / sqrt((double)d)), as HadamardTransform's
  const float* queries;
  const int32_t* page_table;
  const int32_t* seq_lens;
  float* out;
  const uint8_t* key_planes;
  const uint8_t* value_planes;
  ReadKvCodec codec;
  ReadKvReadPolicy policy;
  // Workspace parts.
  float* qa;
  float* bias;
  uint8_t* key_depths;
  float* logits;
  float* chunk_ml;
  float* stats;
  double* importance;
  uint8_t* value_depths;
  float* partial_out;
  float* partial_mass;
  SelectRow* select_rows;   // [B][H_kv]
  unsigned* exponent_hist;  // [B][H_kv][kExponentBins]
  unsigned* mantissa_hist;  // [B][H_kv][kMantissaBins]
  unsigned* candidates;     // [B][H_kv][kCandidates] keys token << 2 | step
  ReadKvDebug debug;
};

// ---- 1. Prepare ------------------------------------------------------------------------------

__global__ void __launch_bounds__(128) Prepare(Args a) {
  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int d = a.head_dim;
  const int c = threadIdx.x;
  const int group = a.group;
  __shared__ float x[8][128];
  __shared__ long long scratch[32];
  __shared__ float bias_part[8][4];
  __shared__ internal::SelectShared selection;

  // Zero this row's Select state and histograms: the Select kernels count into them.
  const size_t row = static_cast<size_t>(b) * a.heads_kv + h;
  {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    auto* exponent = reinterpret_cast<uint4*>(a.exponent_hist + row * kExponentBins);
    auto* mantissa = reinterpret_cast<uint4*>(a.mantissa_hist + row * kMantissaBins);
    for (int j = c; j < kExponentBins / 4; j += blockDim.x) exponent[j] = zero;
    for (int j = c; j < kMantissaBins / 4; j += blockDim.x) mantissa[j] = zero;
    if (c == 0) a.select_rows[row] = SelectRow{};
  }

  const size_t head = static_cast<size_t>(h) * d;
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * group;
  const float sign = a.codec.key_signs[head + c];
  for (int q = 0; q < group; ++q) {
    const float v = a.queries[(first_q + q) * d + c];
    x[q][c] = sign < 0.0f ? -v : v;
  }
  internal::BlockFwhtRows(x, group, d, a.transform_scale);

  // Key channel importance, exactly codec::KeyChannelImportance.
  const float sd = a.codec.key_std[head + c];
  const float mu = a.codec.key_mean[head + c];
  double w = 0.0;
  for (int q = 0; q < group; ++q) {
    const double scaled = __dmul_rn(static_cast<double>(x[q][c]), static_cast<double>(sd));
    w = __dadd_rn(w, __dmul_rn(scaled, scaled));
  }
  // a_qc, and the bias: every channel contributes scaled * mu; read channels add a_qc centroid.
  for (int q = 0; q < group; ++q) {
    const float scaled = x[q][c] * a.attention_scale;
    a.qa[(first_q + q) * d + c] = scaled * sd;
    const float part = internal::WarpSum(scaled * mu);
    if (c % kWarp == 0) bias_part[q][c / kWarp] = part;
  }

  // Key depths: t_min 1, step 1, budget floor(R_K d); thread c owns channel c and its <= 7 steps.
  // The threshold allocator (codec::DepthAllocator::Threshold): steps above the cut, then the
  // cut's ties by channel, i.e. the steps at or before the steps-th element of greedy's order,
  // found by BlockSelect over the channels' positive gains (2-3 histogram passes, no sort).
  const int spo = a.policy.key_steps;
  const double* inc = a.policy.key_increments;
  const long long budget = internal::FloorBudget(a.policy.key_bits, static_cast<double>(d));
  long long steps = budget - d;
  if (steps > static_cast<long long>(d) * spo) steps = static_cast<long long>(d) * spo;
  const int positive_steps = internal::CountAbove(w, 0.0, inc, spo, 0);
  const long long positive = internal::BlockSumLL(positive_steps, scratch);
  int k = positive_steps;
  if (steps <= 0) {
    k = 0;
  } else if (positive > steps) {
    const auto first_key = static_cast<unsigned>(c) << kKeyStepBits;
    const internal::GreedyCut cut = internal::BlockSelect(
        [&](auto&& f) {
          for (int s = 0; s < positive_steps; ++s) {
            f(internal::GainBits(__dmul_rn(w, inc[s])), ~(first_key + s));
          }
        },
        63, 0, 0, steps, positive, selection);
    k = internal::StepsTaken(w, inc, spo, first_key, cut);
  }
  const auto depth = static_cast<uint8_t>(1 + k);
  a.key_depths[row * d + c] = depth;
  if (a.debug.key_depths != nullptr) a.debug.key_depths[row * d + c] = depth;
  __syncthreads();
  if (c < group) {
    float sum = 0.0f;
    for (int wv = 0; wv < d / kWarp; ++wv) sum += bias_part[c][wv];
    a.bias[first_q + c] = sum;
  }
}

// ---- 2. Logits -------------------------------------------------------------------------------

// What both logits kernels share: the inputs every thread reads (centroids, a_qc, bias), the
// running softmax statistics of a thread's tokens, and the chunk's (max, sum of exps).
template <int G>
struct LogitsShared {
  float centroids[kCentroids];
  float qa[128][G];
  float bias[G];
  float red_m[G][kPageTokens / kWarp], red_l[G][kPageTokens / kWarp];
};

template <int G>
__device__ void LoadLogitsInputs(const Args& a, size_t first_q, LogitsShared<G>& sh) {
  const int d = a.head_dim;
  for (int j = threadIdx.x; j < (2 << a.store_bits) - 1; j += blockDim.x) {
    sh.centroids[j] = a.codec.centroids[j];
  }
  for (int j = threadIdx.x; j < d * G; j += blockDim.x) {
    const int q = j / d, c = j % d;
    sh.qa[c][q] = a.qa[(first_q + q) * d + c];
  }
  if (threadIdx.x < G) sh.bias[threadIdx.x] = a.bias[first_q + threadIdx.x];
}

// Writes a token's logits and folds them into the thread's running (max, sum of exps).
template <int G>
__device__ __forceinline__ void EmitLogits(const Args& a, size_t first_q, int token,
                                           const float (&s)[G], const LogitsShared<G>& sh,
                                           float (&m)[G], float (&l)[G]) {
#pragma unroll
  for (int q = 0; q < G; ++q) {
    const float logit = sh.bias[q] + s[q];
    a.logits[(first_q + q) * a.max_tokens + token] = logit;
    const float mn = fmaxf(m[q], logit);
    l[q] = l[q] * expf(m[q] - mn) + expf(logit - mn);
    m[q] = mn;
  }
}

// Combines the threads' (max, sum of exps) over the block into the chunk's.
template <int G>
__device__ void WriteChunkStats(const Args& a, size_t first_q, int chunk, const float (&m)[G],
                                const float (&l)[G], LogitsShared<G>& sh) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int q = 0; q < G; ++q) {
    const float mq = internal::WarpMax(m[q]);
    float lq = (m[q] == -INFINITY) ? 0.0f : l[q] * expf(m[q] - mq);
    lq = internal::WarpSum(lq);
    if (lane == 0) {
      sh.red_m[q][warp] = mq;
      sh.red_l[q][warp] = lq;
    }
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int q = threadIdx.x;
    float mq = -INFINITY;
    for (int wv = 0; wv < kPageTokens / kWarp; ++wv) mq = fmaxf(mq, sh.red_m[q][wv]);
    float lq = 0.0f;
    for (int wv = 0; wv < kPageTokens / kWarp; ++wv) {
      if (sh.red_m[q][wv] != -INFINITY) lq += sh.red_l[q][wv] * expf(sh.red_m[q][wv] - mq);
    }
    float* ml = a.chunk_ml + ((first_q + q) * a.max_chunks + chunk) * 2;
    ml[0] = mq;
    ml[1] = lq;
  }
}

template <int G>
__global__ void __launch_bounds__(kPageTokens) Logits(Args a) {
  const int chunk = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int T = a.seq_lens[b];
  const int start = chunk * a.chunk_tokens;
  if (start >= T) return;
  const int d = a.head_dim;
  const int W = a.store_bits;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  __shared__ LogitsShared<G> sh;
  __shared__ uint8_t depth[128];

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  LoadLogitsInputs(a, first_q, sh);
  for (int j = tid; j < d; j += blockDim.x) {
    depth[j] = a.key_depths[(static_cast<size_t>(b) * a.heads_kv + h) * d + j];
  }
  __syncthreads();

  float m[G], l[G];
#pragma unroll
  for (int q = 0; q < G; ++q) {
    m[q] = -INFINITY;
    l[q] = 0.0f;
  }
  const int end = min(T, start + a.chunk_tokens);
  const int32_t* pages = a.page_table + static_cast<size_t>(b) * a.max_pages;
  const size_t plane_words = kKeyPlaneWords32;
  for (int page_start = start; page_start < end; page_start += kPageTokens) {
    const int token = page_start + tid;
    const int page = pages[page_start / kPageTokens];
    // Word (tid / 32) of every plane of this (page, head): 8 words of 32 bits per plane.
    const uint32_t* words = reinterpret_cast<const uint32_t*>(a.key_planes) +
                            ((static_cast<size_t>(page) * a.heads_kv + h) * d) * W * plane_words +
                            tid / kWarp;
    float s[G];
#pragma unroll
    for (int q = 0; q < G; ++q) s[q] = 0.0f;
    for (int c = 0; c < d; ++c) {
      const int t = depth[c];
      if (t == 0) continue;
      const uint32_t* plane = words + static_cast<size_t>(c) * W * plane_words;
      uint32_t code = 0;
      for (int p = 0; p < t; ++p) {
        code = (code << 1) | ((__ldg(plane + p * plane_words) >> lane) & 1u);
      }
      const float centroid = sh.centroids[(1 << t) - 1 + code];
#pragma unroll
      for (int q = 0; q < G; ++q) s[q] = fmaf(sh.qa[c][q], centroid, s[q]);
    }
    if (token < end) EmitLogits(a, first_q, token, s, sh, m, l);
  }
  WriteChunkStats(a, first_q, chunk, m, l, sh);
}

// The same logits with the bit planes transposed in registers: a warp owns 32 tokens of a
// page; the planes to read form one list of P = sum_c t_c entries (channel by channel, least
// significant plane first), loaded 32 at a time (lane e loads entry e's 32-bit word of the
// warp's tokens) and transposed by five shuffle butterflies, after which lane j holds bit e of
// entry e for its token. A channel's code is then one shift of a 64-bit window over two
// consecutive groups: ~1 instruction per plane bit instead of ~4.
__device__ __forceinline__ unsigned Transpose32(unsigned x, int lane) {
  const unsigned masks[5] = {0x0000FFFFu, 0x00FF00FFu, 0x0F0F0F0Fu, 0x33333333u, 0x55555555u};
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    const int s = 16 >> k;
    const unsigned m = masks[k];
    const unsigned y = __shfl_xor_sync(0xffffffffu, x, s);
    x = (lane & s) == 0 ? ((x & m) | ((y & m) << s)) : ((x & ~m) | ((y & ~m) >> s));
  }
  return x;
}

// A channel of the entry list, packed for one shared load: bits 0-7 the shift of its code in
// the 64-bit window, 8-15 the code mask 2^t - 1, 16-23 the first centroid of depth t (also
// 2^t - 1, kept apart for clarity), 24-31 the channel index.
__device__ __forceinline__ unsigned PackChannel(int shift, int t, int c) {
  const unsigned ones = (1u << t) - 1u;
  return static_cast<unsigned>(shift) | (ones << 8) | (ones << 16) |
         (static_cast<unsigned>(c) << 24);
}

// K pages per pass: lane j of warp w holds token 32 w + j of each of K consecutive pages, so
// the per-channel work that does not depend on the token (the descriptor, a_qc, the loop) is
// shared by K tokens. K = 1 is the one-page reader.
template <int G, int K>
__global__ void __launch_bounds__(kPageTokens) LogitsTransposed(Args a) {
  const int chunk = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int T = a.seq_lens[b];
  const int start = chunk * a.chunk_tokens;
  if (start >= T) return;
  const int d = a.head_dim;
  const int W = a.store_bits;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  constexpr int kMaxEntries = 128 * kMaxStoreBits;
  __shared__ LogitsShared<G> sh;
  __shared__ uint16_t entry_word[kMaxEntries];  // (c W + p) 8: the plane's first word
  // Channels in list order (PackChannel); and per group the first one.
  __shared__ unsigned chan_desc[128];
  __shared__ int group_first[kMaxEntries / kWarp + 1];
  __shared__ int entries;

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  LoadLogitsInputs(a, first_q, sh);
  if (tid == 0) {
    // The entry list and channel descriptors (d <= 128 channels: one thread is enough).
    const uint8_t* depth = a.key_depths + (static_cast<size_t>(b) * a.heads_kv + h) * d;
    int off = 0, n = 0;
    int group_of_last[128];  // the group holding each listed channel's last entry
    for (int c = 0; c < d; ++c) {
      const int t = depth[c];
      if (t == 0) continue;
      for (int r = 0; r < t; ++r) entry_word[off + r] = static_cast<uint16_t>((c * W + t - 1 - r) * 8);
      const int end_group = (off + t - 1) / kWarp;
      chan_desc[n] = PackChannel(off - kWarp * (end_group - 1), t, c);
      group_of_last[n] = end_group;
      ++n;
      off += t;
    }
    entries = off;
    // group_first[g]: the first channel (in list order) whose last entry lies in group g.
    const int groups = (off + kWarp - 1) / kWarp;
    int c = 0;
    for (int g = 0; g <= groups; ++g) {
      while (c < n && group_of_last[c] < g) ++c;
      group_first[g] = c;
    }
  }
  __syncthreads();
  const int P = entries;
  const int groups = (P + kWarp - 1) / kWarp;

  float m[G], l[G];
#pragma unroll
  for (int q = 0; q < G; ++q) {
    m[q] = -INFINITY;
    l[q] = 0.0f;
  }
  const int end = min(T, start + a.chunk_tokens);
  const int32_t* pages = a.page_table + static_cast<size_t>(b) * a.max_pages;
  for (int pass_start = start; pass_start < end; pass_start += K * kPageTokens) {
    const uint32_t* words[K];
    bool live[K];  // uniform over the block: page j of the pass holds tokens of the chunk
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int page_start = pass_start + j * kPageTokens;
      live[j] = page_start < end;
      const int page = pages[(live[j] ? page_start : pass_start) / kPageTokens];
      words[j] = reinterpret_cast<const uint32_t*>(a.key_planes) +
                 ((static_cast<size_t>(page) * a.heads_kv + h) * d) * W * 8 + warp;
    }
    float s[K][G];
#pragma unroll
    for (int j = 0; j < K; ++j) {
#pragma unroll
      for (int q = 0; q < G; ++q) s[j][q] = 0.0f;
    }
    unsigned prev[K];
#pragma unroll
    for (int j = 0; j < K; ++j) prev[j] = 0;
    for (int grp = 0; grp < groups; ++grp) {
      const int e = grp * kWarp + lane;
      unsigned long long window[K];
      unsigned x[K];
#pragma unroll
      for (int j = 0; j < K; ++j) {
        x[j] = Transpose32(e < P && live[j] ? __ldg(words[j] + entry_word[e]) : 0u, lane);
        window[j] =
            (static_cast<unsigned long long>(x[j]) << 32) | static_cast<unsigned long long>(prev[j]);
      }
      for (int k = group_first[grp]; k < group_first[grp + 1]; ++k) {
        const unsigned desc = chan_desc[k];
        const int shift = static_cast<int>(desc & 0xffu);
        const unsigned mask = (desc >> 8) & 0xffu;
        const float* table = sh.centroids + ((desc >> 16) & 0xffu);
        const float* qa = sh.qa[desc >> 24];
#pragma unroll
        for (int j = 0; j < K; ++j) {
          const float centroid = table[static_cast<unsigned>(window[j] >> shift) & mask];
#pragma unroll
          for (int q = 0; q < G; ++q) s[j][q] = fmaf(qa[q], centroid, s[j][q]);
        }
      }
#pragma unroll
      for (int j = 0; j < K; ++j) prev[j] = x[j];
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int token = pass_start + j * kPageTokens + tid;
      if (token < end) EmitLogits(a, first_q, token, s[j], sh, m, l);
    }
  }
  WriteChunkStats(a, first_q, chunk, m, l, sh);
}

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

// Every thread of every non-empty block of a row calls it after its last global write of the
// launch; true in the block that arrives last, which then sees every other block's writes
// (read them with __ldcg: they are in L2, not in this SM's L1).
__device__ bool ArriveLast(unsigned* arrivals, int blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(arrivals, 1u) + 1 == static_cast<unsigned>(blocks);
  __syncthreads();
  if (last) __threadfence();
  return last;
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
__device__ __forceinline__ PrefixSplit SplitAtPrefix(double w, const double* inc, int spo,
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
  const int chunk = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int T = a.seq_lens[b];
  const int start = chunk * a.chunk_tokens;
  if (start >= T) return;
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
  const double* inc = a.policy.value_increments;
  unsigned positive = 0;
  for (int i = start + tid; i < end; i += blockDim.x) {
    double w = 0.0;
#pragma unroll
    for (int q = 0; q < G; ++q) {
      const float p = expf(a.logits[(first_q + q) * a.max_tokens + i] - stat_m[q]) * stat_inv[q];
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
  positive = __reduce_add_sync(0xffffffffu, positive);
  if (lane == 0 && positive > 0) {
    atomicAdd(&state.positive, static_cast<unsigned long long>(positive));
  }
  __syncthreads();
  unsigned* row_hist = a.exponent_hist + head * kExponentBins;
  for (int j = tid; j < kExponentBins; j += blockDim.x) {
    if (hist[j] != 0) atomicAdd(&row_hist[j], hist[j]);
  }
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
  const int chunk = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int T = a.seq_lens[b];
  const int start = chunk * a.chunk_tokens;
  if (start >= T) return;
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
  const double* inc = a.policy.value_increments;
  for (int i = start + tid; i < end; i += blockDim.x) {
    const double w = importance[i];
    for (int s = 0; s < spo; ++s) {
      const double gain = __dmul_rn(w, inc[s]);
      if (!(gain > 0.0)) break;
      const unsigned long long bits = internal::GainBits(gain);
      if ((bits >> kExponentShift) > exponent) continue;  // a token's gains fall with the step
      if ((bits >> kExponentShift) < exponent) break;
      atomicAdd(&hist[(bits >> kPrefixShift) & (kMantissaBins - 1)], 1u);
    }
  }
  __syncthreads();
  unsigned* row_hist = a.mantissa_hist + head * kMantissaBins;
  for (int j = tid; j < kMantissaBins; j += blockDim.x) {
    if (hist[j] != 0) atomicAdd(&row_hist[j], hist[j]);
  }
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
  const int chunk = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int T = a.seq_lens[b];
  const int start = chunk * a.chunk_tokens;
  if (start >= T) return;
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
  const double* inc = a.policy.value_increments;
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
  for (int base = start + warp * kWarp; base < end; base += blockDim.x) {
    const int i = base + lane;
    PrefixSplit split{0, 0};
    if (i < end) {
      split = SplitAtPrefix(importance[i], inc, spo, prefix);
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
  const int chunk = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int T = a.seq_lens[b];
  const int start = chunk * a.chunk_tokens;
  if (start >= T) return;
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

// ---- 5. Finish -------------------------------------------------------------------------------

__global__ void __launch_bounds__(128) Finish(Args a) {
  const int hq = blockIdx.x;
  const int b = blockIdx.y;
  const int d = a.head_dim;
  const int c = threadIdx.x;
  const int h = hq / a.group;
  __shared__ float x[128];
  const int T = a.seq_lens[b];
  const int chunks = (T + a.chunk_tokens - 1) / a.chunk_tokens;
  const size_t row = static_cast<size_t>(b) * a.heads_q + hq;
  float acc = 0.0f, mass = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    acc += a.partial_out[(row * a.max_chunks + k) * d + c];
    mass += a.partial_mass[row * a.max_chunks + k];
  }
  const size_t channel = static_cast<size_t>(h) * d + c;
  x[c] = a.codec.value_mean[channel] * mass + a.codec.value_std[channel] * acc;
  internal::BlockFwht(x, d, a.transform_scale);
  const float v = x[c];
  a.out[row * d + c] = a.codec.value_signs[channel] < 0.0f ? -v : v;
}

// Which logits kernel runs, read per call so a bench can compare them in one process:
// KVGATE_READKV_LOGITS=plain is the per-bit reader (0), wide1 / wide2 / wide4 the transposed
// reader with 1, 2 or 4 pages per pass; unset or anything else: wide4, the fastest on the H200
// (BENCHMARKS.md, issue 8's third round: 1.07x wide1 at 32K x 16, 1.14x at 8K x 1).
int LogitsVariant() {
  const char* v = std::getenv("KVGATE_READKV_LOGITS");
  if (v == nullptr) return 4;
  if (std::strcmp(v, "plain") == 0) return 0;
  if (std::strcmp(v, "wide1") == 0) return 1;
  if (std::strcmp(v, "wide2") == 0) return 2;
  return 4;
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
  a.store_bits = W;
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
  a.logits = reinterpret_cast<float*>(base + layout.logits);
  a.chunk_ml = reinterpret_cast<float*>(base + layout.chunk_ml);
  a.stats = reinterpret_cast<float*>(base + layout.stats);
  a.importance = reinterpret_cast<double*>(base + layout.importance);
  a.value_depths = reinterpret_cast<uint8_t*>(base + layout.value_depths);
  a.partial_out = reinterpret_cast<float*>(base + layout.partial_out);
  a.partial_mass = reinterpret_cast<float*>(base + layout.partial_mass);
  a.select_rows = reinterpret_cast<SelectRow*>(base + layout.select_rows);
  a.exponent_hist = reinterpret_cast<unsigned*>(base + layout.exponent_hist);
  a.mantissa_hist = reinterpret_cast<unsigned*>(base + layout.mantissa_hist);
  a.candidates = reinterpret_cast<unsigned*>(base + layout.candidates);
  a.debug = debug;

  const dim3 heads(s.heads_kv, s.batch);
  const dim3 chunks(s.max_chunks(), s.heads_kv, s.batch);
  Prepare<<<heads, s.head_dim, 0, stream>>>(a);
  // Logits readers (KVGATE_READKV_LOGITS, for same-run comparisons): plain (per bit), wide1 (the
  // transposed reader, one page per pass), wide2, wide4 (2 or 4 pages per pass).
  const int variant = LogitsVariant();
#define KVGATE_LOGITS_CASE(G)                                                          \
  case G:                                                                              \
    if (variant == 0) {                                                                \
      Logits<G><<<chunks, kPageTokens, 0, stream>>>(a);                                \
    } else if (variant == 1) {                                                         \
      LogitsTransposed<G, 1><<<chunks, kPageTokens, 0, stream>>>(a);                   \
    } else if (variant == 2) {                                                         \
      LogitsTransposed<G, 2><<<chunks, kPageTokens, 0, stream>>>(a);                   \
    } else {                                                                           \
      LogitsTransposed<G, 4><<<chunks, kPageTokens, 0, stream>>>(a);                   \
    }                                                                                  \
    break;
  switch (s.group()) {
    KVGATE_LOGITS_CASE(1)
    KVGATE_LOGITS_CASE(2)
    KVGATE_LOGITS_CASE(4)
    default:
    KVGATE_LOGITS_CASE(8)
  }
#undef KVGATE_LOGITS_CASE
  switch (s.group()) {
    case 1: SelectImportance<1><<<chunks, kSelectThreads, 0, stream>>>(a); break;
    case 2: SelectImportance<2><<<chunks, kSelectThreads, 0, stream>>>(a); break;
    case 4: SelectImportance<4><<<chunks, kSelectThreads, 0, stream>>>(a); break;
    default: SelectImportance<8><<<chunks, kSelectThreads, 0, stream>>>(a); break;
  }
  SelectNarrow<<<chunks, kSelectThreads, 0, stream>>>(a);
  SelectDepths<<<chunks, kSelectThreads, 0, stream>>>(a);
#define KVGATE_VALUES_CASE(D, G)                                          if (s.head_dim == D && s.group() == G) {                                  Values<D, G><<<chunks, kValueWarps * kWarp, 0, stream>>>(a);          } else
  KVGATE_VALUES_CASE(128, 1) KVGATE_VALUES_CASE(128, 2) KVGATE_VALUES_CASE(128, 4)
  KVGATE_VALUES_CASE(128, 8) KVGATE_VALUES_CASE(64, 1) KVGATE_VALUES_CASE(64, 2)
  KVGATE_VALUES_CASE(64, 4) KVGATE_VALUES_CASE(64, 8) {}
#undef KVGATE_VALUES_CASE
  Finish<<<dim3(s.heads_q, s.batch), s.head_dim, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace readkv::cuda
