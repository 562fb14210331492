// ReadKV decode attention with the constrained reader (spec/readkv.md, "Read path"): five
// launches per call, all on one stream.
//
//   1. Prepare   (H_kv, B) x d        transformed queries, Key importance, Key depths (threshold
//                                     allocator over d channels), a_qc = q~_qc sigma_c / sqrt(d),
//                                     bias_q = sum_c q~_qc mu_c / sqrt(d)
//   2. Logits    (chunks, H_kv, B) x 256   one thread per token slot of a page: reads t_c planes
//                                     of each channel, logit = bias + sum_c a_qc centroid; writes
//                                     logits and the chunk's (max, sum of exps)
//   3. Select    (H_kv, B) x 1024     softmax statistics, a_i = sum_q p_qi^2 in double, the cut
//                                     gain by radix selection over the bits of the positive
//                                     doubles a_i inc_k, Value depths with greedy's tie order
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
constexpr int kSelectThreads = 1024;
constexpr int kValueWarps = 4;
constexpr size_t kKeyPlaneWords32 = 8;  // a 32-byte key plane as 32-bit words

// Workspace layout of one call (every part 256-byte aligned).
struct Layout {
  size_t qa, bias, key_depths, logits, chunk_ml, stats, importance, value_depths, partial_out,
      partial_mass, total;
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
  ReadKvDebug debug;
};

// ---- 1. Prepare ------------------------------------------------------------------------------

// Bitonic sort of v[0, n) in shared memory, descending (n a power of two); every thread of the
// block calls it, and it synchronises after each stage.
__device__ void BlockSortDescending(double* v, int n) {
  for (int size = 2; size <= n; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int partner = j ^ stride;
        if (partner > j) {
          const bool descending = (j & size) == 0;
          const double lo = v[j], hi = v[partner];
          if (descending ? (lo < hi) : (lo > hi)) {
            v[j] = hi;
            v[partner] = lo;
          }
        }
      }
      __syncthreads();
    }
  }
}

// The threshold allocator for a block whose thread c owns object c (n <= 128 objects, at most
// 1024 / n steps each): returns object c's step count. Bit-identical to
// codec::DepthAllocator::Threshold for the same weights, budget and increments.
__device__ int AllocateSmall(double w, int n, int spo, const double* inc, long long steps,
                             double* gains, double* weights, int* counts, long long* scratch) {
  const int c = threadIdx.x;
  int k = internal::CountAbove(w, 0.0, inc, spo, 0);
  const long long positive = internal::BlockSumLL(c < n ? k : 0, scratch);
  if (steps <= 0) return 0;
  if (positive <= steps) return k;
  // The cut: the steps-th largest positive gain, by a bitonic sort of every slot (non-positive
  // gains and padding sort last as -1).
  constexpr int kSlots = 1024;
  for (int j = c; j < kSlots; j += blockDim.x) gains[j] = -1.0;
  __syncthreads();
  if (c < n) {
    for (int s = 0; s < k; ++s) gains[c * spo + s] = __dmul_rn(w, inc[s]);
    weights[c] = w;
  }
  __syncthreads();
  BlockSortDescending(gains, kSlots);
  const double cut = gains[steps - 1];
  if (c < n) counts[c] = internal::CountAbove(w, cut, inc, spo, 0);
  __syncthreads();
  // Steps exactly at the cut go object by object in index order, as greedy takes them.
  if (c == 0) {
    long long remaining = steps;
    for (int o = 0; o < n; ++o) remaining -= counts[o];
    for (int o = 0; o < n && remaining > 0; ++o) {
      int kk = counts[o];
      while (kk < spo && remaining > 0 && __dmul_rn(weights[o], inc[kk]) == cut) {
        ++kk;
        --remaining;
      }
      counts[o] = kk;
    }
  }
  __syncthreads();
  return c < n ? counts[c] : 0;
}

__global__ void __launch_bounds__(128) Prepare(Args a) {
  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int d = a.head_dim;
  const int c = threadIdx.x;
  const int group = a.group;
  __shared__ float x[8][128];
  __shared__ double gains[1024];
  __shared__ double weights[128];
  __shared__ int counts[128];
  __shared__ long long scratch[32];
  __shared__ float bias_part[8][4];

  const size_t head = static_cast<size_t>(h) * d;
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * group;
  const float sign = a.codec.key_signs[head + c];
  for (int q = 0; q < group; ++q) {
    const float v = a.queries[(first_q + q) * d + c];
    x[q][c] = sign < 0.0f ? -v : v;
  }
  for (int q = 0; q < group; ++q) internal::BlockFwht(x[q], d, a.transform_scale);

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

  // Key depths: t_min 1, step 1, budget floor(R d).
  const int spo = a.policy.key_steps;
  const long long budget = internal::FloorBudget(a.policy.read_bits, static_cast<double>(d));
  long long steps = budget - d;
  if (steps > static_cast<long long>(d) * spo) steps = static_cast<long long>(d) * spo;
  const int k = AllocateSmall(w, d, spo, a.policy.key_increments, steps, gains, weights, counts,
                              scratch);
  const auto depth = static_cast<uint8_t>(1 + k);
  a.key_depths[(static_cast<size_t>(b) * a.heads_kv + h) * d + c] = depth;
  if (a.debug.key_depths != nullptr) {
    a.debug.key_depths[(static_cast<size_t>(b) * a.heads_kv + h) * d + c] = depth;
  }
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

template <int G>
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
  // Channels in list order: channel index, window shift, depth; and per group the first one.
  __shared__ uint8_t chan_index[128], chan_shift[128], chan_depth[128];
  __shared__ int group_first[kMaxEntries / kWarp + 1];
  __shared__ int entries, channels;

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  LoadLogitsInputs(a, first_q, sh);
  if (tid == 0) {
    // The entry list and channel descriptors (d <= 128 channels: one thread is enough).
    const uint8_t* depth = a.key_depths + (static_cast<size_t>(b) * a.heads_kv + h) * d;
    int off = 0, n = 0;
    for (int c = 0; c < d; ++c) {
      const int t = depth[c];
      if (t == 0) continue;
      for (int r = 0; r < t; ++r) entry_word[off + r] = static_cast<uint16_t>((c * W + t - 1 - r) * 8);
      const int end_group = (off + t - 1) / kWarp;
      chan_index[n] = static_cast<uint8_t>(c);
      chan_shift[n] = static_cast<uint8_t>(off - kWarp * (end_group - 1));
      chan_depth[n] = static_cast<uint8_t>(t);
      ++n;
      off += t;
    }
    entries = off;
    channels = n;
    // group_first[g]: the first channel (in list order) whose last entry lies in group g.
    const int groups = (off + kWarp - 1) / kWarp;
    int c = 0, cursor = 0;
    for (int g = 0; g <= groups; ++g) {
      while (c < n && (cursor + chan_depth[c] - 1) / kWarp < g) cursor += chan_depth[c++];
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
  for (int page_start = start; page_start < end; page_start += kPageTokens) {
    const int token = page_start + tid;
    const int page = pages[page_start / kPageTokens];
    const uint32_t* words = reinterpret_cast<const uint32_t*>(a.key_planes) +
                            ((static_cast<size_t>(page) * a.heads_kv + h) * d) * W * 8 + warp;
    float s[G];
#pragma unroll
    for (int q = 0; q < G; ++q) s[q] = 0.0f;
    unsigned prev = 0;
    for (int grp = 0; grp < groups; ++grp) {
      const int e = grp * kWarp + lane;
      const unsigned x = Transpose32(e < P ? __ldg(words + entry_word[e]) : 0u, lane);
      const unsigned long long window =
          (static_cast<unsigned long long>(x) << 32) | static_cast<unsigned long long>(prev);
      for (int k = group_first[grp]; k < group_first[grp + 1]; ++k) {
        const int t = chan_depth[k];
        const unsigned code =
            static_cast<unsigned>(window >> chan_shift[k]) & ((1u << t) - 1u);
        const float centroid = sh.centroids[(1 << t) - 1 + code];
        const int c = chan_index[k];
#pragma unroll
        for (int q = 0; q < G; ++q) s[q] = fmaf(sh.qa[c][q], centroid, s[q]);
      }
      prev = x;
    }
    if (token < end) EmitLogits(a, first_q, token, s, sh, m, l);
  }
  WriteChunkStats(a, first_q, chunk, m, l, sh);
}

// ---- 3. Select -------------------------------------------------------------------------------

// Block-wide exclusive scan of one int64 per thread (1024 threads); returns the thread's prefix
// and writes the total.
__device__ long long BlockExclusiveScan(long long v, long long* scratch, long long* total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  long long inclusive = v;
  for (int o = 1; o < kWarp; o *= 2) {
    const long long y = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  __syncthreads();
  if (lane == kWarp - 1) scratch[warp] = inclusive;
  __syncthreads();
  long long before = 0, all = 0;
  for (int wv = 0; wv < static_cast<int>(blockDim.x / kWarp); ++wv) {
    if (wv < warp) before += scratch[wv];
    all += scratch[wv];
  }
  __syncthreads();
  *total = all;
  return before + inclusive - v;
}

template <int G>
__global__ void __launch_bounds__(kSelectThreads) Select(Args a) {
  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int T = a.seq_lens[b];
  const int tid = threadIdx.x;
  const int chunks = (T + a.chunk_tokens - 1) / a.chunk_tokens;
  constexpr int kBins = 2048;
  __shared__ float stat_m[G], stat_inv[G];
  __shared__ unsigned hist[kBins];
  __shared__ long long scratch[32];
  constexpr int kGather = 2048;
  __shared__ long long chosen_prefix, chosen_rank, chosen_count;
  __shared__ double candidates[kGather];
  __shared__ unsigned gathered;

  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  if (tid < G) {
    const float* ml = a.chunk_ml + (first_q + tid) * a.max_chunks * 2;
    float mq = -INFINITY;
    for (int k = 0; k < chunks; ++k) mq = fmaxf(mq, ml[2 * k]);
    double z = 0.0;
    for (int k = 0; k < chunks; ++k) {
      if (ml[2 * k] != -INFINITY) z += static_cast<double>(ml[2 * k + 1]) * exp(ml[2 * k] - mq);
    }
    const auto inv = static_cast<float>(1.0 / z);
    stat_m[tid] = mq;
    stat_inv[tid] = inv;
    a.stats[(first_q + tid) * 2] = mq;
    a.stats[(first_q + tid) * 2 + 1] = inv;
  }
  __syncthreads();

  const size_t row = (static_cast<size_t>(b) * a.heads_kv + h) * a.max_tokens;
  double* importance = a.importance + row;
  const int spo = a.policy.value_steps;
  const double* inc = a.policy.value_increments;
  long long positive_local = 0;
  for (int i = tid; i < T; i += blockDim.x) {
    double w = 0.0;
#pragma unroll
    for (int q = 0; q < G; ++q) {
      const float p = expf(a.logits[(first_q + q) * a.max_tokens + i] - stat_m[q]) * stat_inv[q];
      w = __dadd_rn(w, __dmul_rn(static_cast<double>(p), static_cast<double>(p)));
    }
    importance[i] = w;
    positive_local += internal::CountAbove(w, 0.0, inc, spo, 0);
  }
  const long long positive = internal::BlockSumLL(positive_local, scratch);
  const long long budget = internal::FloorBudget(a.policy.read_bits, static_cast<double>(T));
  long long steps = (budget - T) / 2;
  if (steps > static_cast<long long>(T) * spo) steps = static_cast<long long>(T) * spo;
  if (steps < 0) steps = 0;

  double cut = 0.0;
  const bool select = steps > 0 && positive > steps;
  if (select) {
    // Radix selection of the steps-th largest positive gain on the bits of the doubles (for
    // positive doubles the bit patterns order as the values): 11-bit digits from the top.
    unsigned long long prefix = 0, mask = 0;
    long long rank = steps;  // 1-based rank from the top within the matching set
    constexpr int kDigitShift[6] = {53, 42, 31, 20, 9, 0};
    constexpr int kDigitWidth[6] = {11, 11, 11, 11, 11, 9};
    for (int digit = 0; digit < 6; ++digit) {
      const int digit_shift = kDigitShift[digit];
      const unsigned digit_mask = (1u << kDigitWidth[digit]) - 1u;
      for (int j = tid; j < kBins; j += blockDim.x) hist[j] = 0;
      __syncthreads();
      // Gains cluster in few bins (their exponents), so lanes of a warp that hit the same bin
      // add once for all of them instead of contending on one shared-memory word.
      for (int base = tid - tid % kWarp; base < T; base += blockDim.x) {
        const int i = base + tid % kWarp;
        const double w = i < T ? importance[i] : 0.0;
        for (int k = 0; k < spo; ++k) {
          const double gain = __dmul_rn(w, inc[k]);
          const auto bits = static_cast<unsigned long long>(__double_as_longlong(gain));
          const bool counted = gain > 0.0 && (bits & mask) == prefix;
          const unsigned bin = counted ? static_cast<unsigned>((bits >> digit_shift) & digit_mask)
                                       : 0xffffffffu;
          const unsigned peers = __match_any_sync(0xffffffffu, bin);
          if (counted && (tid % kWarp) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
      }
      __syncthreads();
      // Find the bin holding the rank-th largest: suffix sums over bins, two bins per thread.
      const int bins = static_cast<int>(digit_mask) + 1;
      const int hi_bin = bins - 1 - 2 * tid;  // this thread's bins, counted from the top
      long long mine = 0;
      if (hi_bin >= 0) mine += hist[hi_bin];
      if (hi_bin - 1 >= 0) mine += hist[hi_bin - 1];
      long long total = 0;
      const long long above = BlockExclusiveScan(mine, scratch, &total);
      if (hi_bin >= 0) {
        long long cum = above;
        for (int bin = hi_bin; bin >= 0 && bin >= hi_bin - 1; --bin) {
          const long long count = hist[bin];
          if (cum < rank && rank <= cum + count) {
            chosen_prefix = static_cast<long long>(
                prefix | (static_cast<unsigned long long>(bin) << digit_shift));
            chosen_rank = rank - cum;
            chosen_count = count;
          }
          cum += count;
        }
      }
      __syncthreads();
      prefix = static_cast<unsigned long long>(chosen_prefix);
      rank = chosen_rank;
      mask |= static_cast<unsigned long long>(digit_mask) << digit_shift;
      if (digit == 5) break;  // every bit fixed: prefix is the cut
      if (chosen_count <= kGather) {
        // Few candidates left: gather them and finish with a sort in shared memory.
        if (tid == 0) gathered = 0;
        for (int j = tid; j < kGather; j += blockDim.x) candidates[j] = -1.0;
        __syncthreads();
        for (int i = tid; i < T; i += blockDim.x) {
          const double w = importance[i];
          for (int k = 0; k < spo; ++k) {
            const double gain = __dmul_rn(w, inc[k]);
            if (!(gain > 0.0)) break;
            const auto bits = static_cast<unsigned long long>(__double_as_longlong(gain));
            if ((bits & mask) == prefix) candidates[atomicAdd(&gathered, 1u)] = gain;
          }
        }
        __syncthreads();
        BlockSortDescending(candidates, kGather);
        prefix = static_cast<unsigned long long>(__double_as_longlong(candidates[rank - 1]));
        __syncthreads();
        break;
      }
      __syncthreads();
    }
    cut = __longlong_as_double(static_cast<long long>(prefix));
  }

  // Depths: contiguous token ranges per thread so greedy's tie order (object index) is a scan.
  const int per = (T + blockDim.x - 1) / blockDim.x;
  const int first = min(T, tid * per), last = min(T, first + per);
  long long counted = 0, ties = 0;
  if (select) {
    for (int i = first; i < last; ++i) {
      const double w = importance[i];
      const int k = internal::CountAbove(w, cut, inc, spo, 0);
      counted += k;
      int kk = k;
      while (kk < spo && __dmul_rn(w, inc[kk]) == cut) ++kk;
      ties += kk - k;
    }
  }
  const long long counted_all = internal::BlockSumLL(counted, scratch);
  long long ties_all = 0;
  const long long ties_before = BlockExclusiveScan(ties, scratch, &ties_all);
  long long tie_budget = steps - counted_all - ties_before;  // tie steps left when we start
  uint8_t* depths = a.value_depths + row;
  for (int i = first; i < last; ++i) {
    const double w = importance[i];
    int k;
    if (steps <= 0) {
      k = 0;
    } else if (!select) {
      k = internal::CountAbove(w, 0.0, inc, spo, 0);
    } else {
      k = internal::CountAbove(w, cut, inc, spo, 0);
      while (k < spo && tie_budget > 0 && __dmul_rn(w, inc[k]) == cut) {
        ++k;
        --tie_budget;
      }
    }
    const auto depth = static_cast<uint8_t>(1 + 2 * k);
    depths[i] = depth;
    if (a.debug.value_depths != nullptr) a.debug.value_depths[row + i] = depth;
    if (a.debug.value_importance != nullptr) a.debug.value_importance[row + i] = w;
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

// Which logits kernel runs: KVGATE_READKV_LOGITS=plain selects the per-bit reader, anything
// else the transposed one (read per call, so a bench can compare both in one process).
int LogitsVariant() {
  const char* v = std::getenv("KVGATE_READKV_LOGITS");
  return v != nullptr && std::strcmp(v, "plain") == 0 ? 0 : 1;
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
      static_cast<long long>(s.head_dim) * policy.key_steps > 1024 || !(policy.read_bits >= 1.0) ||
      policy.read_bits > W) {
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
  a.debug = debug;

  const dim3 heads(s.heads_kv, s.batch);
  const dim3 chunks(s.max_chunks(), s.heads_kv, s.batch);
  Prepare<<<heads, s.head_dim, 0, stream>>>(a);
  if (LogitsVariant() == 0) {
    switch (s.group()) {
      case 1: Logits<1><<<chunks, kPageTokens, 0, stream>>>(a); break;
      case 2: Logits<2><<<chunks, kPageTokens, 0, stream>>>(a); break;
      case 4: Logits<4><<<chunks, kPageTokens, 0, stream>>>(a); break;
      default: Logits<8><<<chunks, kPageTokens, 0, stream>>>(a); break;
    }
  } else {
    switch (s.group()) {
      case 1: LogitsTransposed<1><<<chunks, kPageTokens, 0, stream>>>(a); break;
      case 2: LogitsTransposed<2><<<chunks, kPageTokens, 0, stream>>>(a); break;
      case 4: LogitsTransposed<4><<<chunks, kPageTokens, 0, stream>>>(a); break;
      default: LogitsTransposed<8><<<chunks, kPageTokens, 0, stream>>>(a); break;
    }
  }
  switch (s.group()) {
    case 1: Select<1><<<heads, kSelectThreads, 0, stream>>>(a); break;
    case 2: Select<2><<<heads, kSelectThreads, 0, stream>>>(a); break;
    case 4: Select<4><<<heads, kSelectThreads, 0, stream>>>(a); break;
    default: Select<8><<<heads, kSelectThreads, 0, stream>>>(a); break;
  }
#define KVGATE_VALUES_CASE(D, G)                                          if (s.head_dim == D && s.group() == G) {                                  Values<D, G><<<chunks, kValueWarps * kWarp, 0, stream>>>(a);          } else
  KVGATE_VALUES_CASE(128, 1) KVGATE_VALUES_CASE(128, 2) KVGATE_VALUES_CASE(128, 4)
  KVGATE_VALUES_CASE(128, 8) KVGATE_VALUES_CASE(64, 1) KVGATE_VALUES_CASE(64, 2)
  KVGATE_VALUES_CASE(64, 4) KVGATE_VALUES_CASE(64, 8) {}
#undef KVGATE_VALUES_CASE
  Finish<<<dim3(s.heads_q, s.batch), s.head_dim, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace readkv::cuda
