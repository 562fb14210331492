// The GPU tile reader: TilePrepare, TileSelect, TileCombine and the launcher (tile_attention.h);
// TileLogits is in tile_kernels.cuh, TileValues in tile_values.cuh, TileWindowValues in
// tile_window.cuh.
//
// Depth choices are codec::DepthAllocator::Threshold's for the same weights: the same doubles
// (__dmul_rn / __dadd_rn, no contraction), the same cut (the steps-th largest gain), the same
// tie order (object index, then step). The Key group weights are bit-identical to the CPU's (the
// transform is codec::Fwht's butterflies, readkv_device.cuh); the Value block weights come from
// this call's probabilities (f16 MMA logits, __expf), so tests compare Value depths with the CPU
// allocator run on TileDecodeDebug::block_weights.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "readkv/cuda/tile_attention.h"
#include "readkv_device.cuh"
#include "tile_kernels.cuh"
#include "tile_plan.h"
#include "tile_queries.cuh"
#include "tile_read_sums.h"
#include "tile_threshold.h"
#include "tile_values.cuh"
#include "tile_window.cuh"
#include "tile_window_pass.cuh"

namespace readkv::cuda::tile_kernels {

// ---- 1. TilePrepare ----------------------------------------------------------------------------

// Grid (H_kv, B) x D, for tree keys (byte keys fold their queries in TileLogits): thread c
// owns channel c. The folded queries (FoldRowQueries, tile_queries.cuh), the channel importance
// (codec::KeyChannelImportance) bit for bit, then the group weights (SumPerTile's order), the
// group depths, the B fragments and the residual window's exact logits (ResidualLogits).
template <int D, int G>
__global__ void __launch_bounds__(128) TilePrepare(TileArgs a) {
  constexpr int kGroups = D / 16;
  __shared__ RowQueryKeep<D, G> queries;
  __shared__ float fold_rows[kMaxGroup][128];
  __shared__ uint16_t folded[kMaxGroup][D];
  __shared__ uint2 frags[kGroups * kWarp];
  const RowQueryScratch<D> scratch{fold_rows, folded, frags};
  __shared__ double weight[D];
  __shared__ double group_weight[kGroups];
  __shared__ uint8_t depth[kGroups];
  __shared__ double inc[kMaxSteps];
  __shared__ double gains[kGroups * kMaxSteps];
  __shared__ tile::SmallCount count;
  __shared__ double cut;
  const int h = blockIdx.x, b = blockIdx.y, c = threadIdx.x;
  const size_t row = RowOf(a, b, h);
  const size_t channel = static_cast<size_t>(h) * D + c;
  float v[kMaxGroup];
  FoldRowQueries<D, G>(a, b, h, scratch, queries, v);
  {  // codec::KeyChannelImportance, heads in order
    const double sd = a.codec.key_std[channel];
    double w = 0.0;
#pragma unroll
    for (int q = 0; q < G; ++q) {
      const double s = __dmul_rn(static_cast<double>(v[q]), sd);
      w = __dadd_rn(w, __dmul_rn(s, s));
    }
    weight[c] = w;
  }
  if (a.in.key_outlier_pages != nullptr) {  // the Key lists' f32 queries, [D][G]
#pragma unroll
    for (int q = 0; q < G; ++q) a.scaled_queries[(row * D + c) * G + q] = queries.scaled[c * G + q];
  }
  __syncthreads();
  if (c < kGroups) {  // codec::SumPerTile: members in order from 0
    double sum = 0.0;
    for (int m = 0; m < 16; ++m) sum = __dadd_rn(sum, weight[16 * c + m]);
    group_weight[c] = sum;
  }
  __syncthreads();
  // The group depths: counts by one thread, the cut by a thread per candidate gain (a sort by
  // one thread took ~50 us), the depths by one thread (tile_threshold.h).
  const int spo = a.policy.key_steps;
  if (c < kMaxSteps) inc[c] = c < spo ? a.policy.key_increments[c] : 0.0;
  __syncthreads();
  if (c == 0) {
    const long long budget = internal::FloorBudget(a.policy.key_bits, static_cast<double>(kGroups));
    count = tile::CountSmallSteps(group_weight, kGroups, budget, inc, spo);
    cut = 0.0;  // unused unless a cut is needed
  }
  __syncthreads();
  const int candidates = kGroups * spo;
  if (count.NeedsCut()) {
    if (c < candidates) gains[c] = tile::SmallGain(group_weight, count, inc, spo, c);
    __syncthreads();
    if (c < candidates && gains[c] >= 0.0 &&
        tile::IsStepsThLargest(gains[c], gains, candidates, count.steps)) {
      cut = gains[c];  // every thread that writes writes the same value
    }
    __syncthreads();
  }
  if (c == 0) tile::ApplySmallCut(group_weight, kGroups, inc, spo, count, cut, depth);
  __syncthreads();
  if (c == 0 && a.debug.totals != nullptr) {  // the Key planes' share of the call's ledgers
    long long steps = 0;
    for (int g = 0; g < kGroups; ++g) steps += depth[g];
    const tile::ReadSums reads = tile::KeyRowReads(a.in.encoded_lens[b], steps);
    atomicAdd(a.debug.totals, static_cast<unsigned long long>(reads.bits));
    atomicAdd(a.debug.totals + 1, static_cast<unsigned long long>(reads.bytes));
  }
  if (c == 0) a.arrivals[row] = 0;  // TileWindowValues counts its blocks from here
  if (c < kGroups) {
    a.key_depths[row * kGroups + c] = depth[c];
    if (a.debug.key_depths != nullptr) a.debug.key_depths[row * kGroups + c] = depth[c];
  }
  for (int idx = c; idx < kGroups * kWarp; idx += D) {
    reinterpret_cast<uint2*>(a.fragments)[row * kGroups * kWarp + idx] = frags[idx];
  }
  ResidualLogits<D, G>(a, b, h, queries.scaled, queries.mean, 0, D / kWarp);
}

// ---- 3. TileSelect -----------------------------------------------------------------------------

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

__device__ __forceinline__ double BlockSumD(double v, double* scratch) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w) s += scratch[w];
  return s;
}

// Grid (H_kv, B) x 256: per head the softmax statistics (stats: max, 1 / sum, the encoded
// tokens' mass) from the tiles' statistics that TileLogits wrote (per tile and head M, sum e,
// sum e^2 with e = exp(l - M)) and the residual window's logits, then per 16-token block (thread
// j owns blocks j, j + 256, ...) the weight sum_h sum_i p_hi^2 = sum_h (sum e^2) exp(2 (M - m_h))
// / S_h^2, and the Value depths: steps above the cut found by BlockSelect, ties by block. The
// encoded logits are not read again (they were, three times over, when this launch took ~450 us
// of a 32K x 16 call).
template <int D, int G>
__global__ void __launch_bounds__(kSelectThreads) TileSelect(TileArgs a) {
  __shared__ float fscratch[kSelectThreads / kWarp];
  __shared__ double dscratch[kSelectThreads / kWarp];
  __shared__ long long lscratch[32];
  __shared__ float head_max[G];
  __shared__ double head_inv[G];
  __shared__ double inc[kMaxSteps];
  __shared__ internal::SelectShared selection;
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const size_t row = RowOf(a, b, h);
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  const int encoded = a.in.encoded_lens[b];
  const int residual = a.in.residual_lens[b];
  const int tiles = (encoded + 15) / 16;
  const float* tile_stats = a.tile_stats + row * a.max_tiles * 3 * G;
  if (tid < kMaxSteps) inc[tid] = tid < a.policy.value_steps ? a.policy.value_increments[tid] : 0.0;
  for (int q = 0; q < G; ++q) {
    const float* window = a.logits + (first_q + q) * a.max_residual;
    float m = -INFINITY;
    for (int j = tid; j < tiles; j += blockDim.x) m = fmaxf(m, tile_stats[j * 3 * G + q]);
    for (int i = tid; i < residual; i += blockDim.x) m = fmaxf(m, window[i]);
    m = BlockMax(m, fscratch);
    double enc = 0.0, in_window = 0.0;
    for (int j = tid; j < tiles; j += blockDim.x) {
      const float* st = tile_stats + j * 3 * G;
      enc += static_cast<double>(st[G + q]) * expf(st[q] - m);
    }
    for (int i = tid; i < residual; i += blockDim.x) in_window += expf(window[i] - m);
    enc = BlockSumD(enc, dscratch);
    in_window = BlockSumD(in_window, dscratch);
    const double all = enc + in_window;
    if (tid == 0) {
      head_max[q] = m;
      head_inv[q] = 1.0 / all;
      float* s = a.stats + (first_q + q) * 4;
      s[0] = m;
      s[1] = static_cast<float>(1.0 / all);
      s[2] = static_cast<float>(enc / all);
      s[3] = 0.0f;
    }
    if (a.debug.logits != nullptr) {  // the window's (TileLogits wrote the encoded ones)
      float* out = a.debug.logits + (first_q + q) * a.logit_stride + encoded;
      for (int i = tid; i < residual; i += blockDim.x) out[i] = window[i];
    }
  }
  __syncthreads();
  double* weights = a.block_weights + row * a.max_tiles;
  int positive_steps = 0;  // this thread's objects' leading positive steps
  const int spo = a.policy.value_steps;
  for (int j = tid; j < tiles; j += blockDim.x) {
    const double w = ValueBlockWeight<G>(tile_stats + j * 3 * G, head_max, head_inv);
    weights[j] = w;
    if (a.debug.block_weights != nullptr) a.debug.block_weights[row * a.max_tiles + j] = w;
    positive_steps += internal::CountAbove(w, 0.0, inc, spo, 0);
  }
  const long long positive = internal::BlockSumLL(positive_steps, lscratch);
  const ValueCut cut =
      CutValueBlocks(weights, tiles, positive, a.policy.value_bits, inc, spo, selection);
  long long read_bits = 0, read_bytes = 0;  // this thread's tiles' share of debug.totals
  for (int j = tid; j < tiles; j += blockDim.x) {
    const uint8_t depth = ValueBlockDepth(cut, weights[j], j, inc, spo);
    a.value_depths[row * a.max_tiles + j] = depth;
    if (a.debug.value_depths != nullptr) a.debug.value_depths[row * a.max_tiles + j] = depth;
    const tile::ReadSums reads = tile::ValueTileReads(encoded, j, depth, D);
    read_bits += reads.bits;
    read_bytes += reads.bytes;
  }
  if (a.debug.totals != nullptr) {  // uniform over the block
    read_bits = internal::BlockSumLL(read_bits, lscratch);
    read_bytes = internal::BlockSumLL(read_bytes, lscratch);
    if (tid == 0) {
      atomicAdd(a.debug.totals,
                static_cast<unsigned long long>(read_bits));
      atomicAdd(a.debug.totals + 1,
                static_cast<unsigned long long>(read_bytes));
    }
  }
  // The row's lists' entries, summed here so that they need no pass of their own.
  CountListEntries(a, b, h, 0, (encoded + kPageTokens - 1) / kPageTokens, lscratch);
}

// ---- 5. TileCombine ----------------------------------------------------------------------------

// Grid (H_kv, B) x D: FinishTileRow (tile_window.cuh) with TileSelect's statistics.
template <int D, int G>
__global__ void __launch_bounds__(128) TileCombine(TileArgs a) {
  __shared__ float x[kMaxGroup][128];
  __shared__ float head_max[kMaxGroup], head_inv[kMaxGroup], head_mass[kMaxGroup];
  const int h = blockIdx.x, b = blockIdx.y;
  const size_t first_q = static_cast<size_t>(b) * a.heads_q + static_cast<size_t>(h) * G;
  if (threadIdx.x < G) {
    const float* s = a.stats + (first_q + threadIdx.x) * 4;
    head_max[threadIdx.x] = s[0];
    head_inv[threadIdx.x] = s[1];
    head_mass[threadIdx.x] = s[2];
  }
  __syncthreads();
  const int chunks = (a.in.encoded_lens[b] + a.chunk_tokens - 1) / a.chunk_tokens;
  FinishTileRow<D, G, D, G>(a, b, h, chunks, 0, G, WorkspacePartials<D>(a, b, h), head_max,
                            head_inv, head_mass, x);
}

template <int D, int G>
cudaError_t LaunchAll(const TileArgs& a, const tile::TileCentroids& centroids, int batch,
                      bool windowed, bool byte_keys, bool one_pass, cudaStream_t stream) {
  if (one_pass) return LaunchWindowPass<D, G>(a, centroids, batch, stream);
  const dim3 rows(static_cast<unsigned>(a.heads_kv), static_cast<unsigned>(batch));
  const dim3 chunks(static_cast<unsigned>(a.chunks), static_cast<unsigned>(a.heads_kv),
                    static_cast<unsigned>(batch));
  if (byte_keys) {  // its blocks fold their own queries: no TilePrepare
    TileLogits<D, G, true><<<chunks, kMmaThreads, 0, stream>>>(a, centroids);
  } else {
    TilePrepare<D, G><<<rows, D, 0, stream>>>(a);
    TileLogits<D, G, false><<<chunks, kMmaThreads, 0, stream>>>(a, centroids);
  }
  if (windowed) {
    TileWindowValues<D, G><<<chunks, kMmaThreads, 0, stream>>>(a, centroids);
    return cudaGetLastError();
  }
  TileSelect<D, G><<<rows, kSelectThreads, 0, stream>>>(a);
  TileValues<D, G><<<chunks, kMmaThreads, 0, stream>>>(a, centroids);
  TileCombine<D, G><<<rows, D, 0, stream>>>(a);
  return cudaGetLastError();
}

// Calls body(std::integral_constant<int, G>{}) for the runtime group (1, 2, 4 or 8) and
// returns its result; cudaErrorInvalidValue for any other group. The one dispatch of the
// kernels' G, for the launches and for the one-pass residency query.
template <typename Body>
cudaError_t WithGroup(int group, const Body& body) {
  switch (group) {
    case 1:
      return body(std::integral_constant<int, 1>{});
    case 2:
      return body(std::integral_constant<int, 2>{});
    case 4:
      return body(std::integral_constant<int, 4>{});
    case 8:
      return body(std::integral_constant<int, 8>{});
    default:
      return cudaErrorInvalidValue;
  }
}

template <int D>
cudaError_t LaunchForGroup(const TileArgs& a, const tile::TileCentroids& centroids, int batch,
                           int group, bool windowed, bool byte_keys, bool one_pass,
                           cudaStream_t stream) {
  return WithGroup(group, [&](auto g) {
    return LaunchAll<D, decltype(g)::value>(a, centroids, batch, windowed, byte_keys, one_pass,
                                            stream);
  });
}

template <int D>
cudaError_t ResidentClustersForGroup(const TilePlan& plan, const TileDecodeShape& shape,
                                     int* clusters) {
  return WithGroup(shape.group(), [&](auto g) {
    return WindowPassResidentClusters<D, decltype(g)::value>(
        plan.chunks, plan.chunk_tokens, shape.heads_kv, shape.batch, clusters);
  });
}

}  // namespace readkv::cuda::tile_kernels

namespace readkv::cuda {

cudaError_t TileOnePassResidentClusters(const TileDecodeShape& shape, const TilePlan& plan,
                                        int* clusters) {
  if (clusters == nullptr || !plan.one_pass) return cudaErrorInvalidValue;
  try {
    internal::MakeTileWorkspaceLayout(shape, plan);
  } catch (const std::exception&) {
    return cudaErrorInvalidValue;
  }
  return shape.head_dim == 64
             ? tile_kernels::ResidentClustersForGroup<64>(plan, shape, clusters)
             : tile_kernels::ResidentClustersForGroup<128>(plan, shape, clusters);
}

cudaError_t ChooseTileOnePass(const TileDecodeShape& shape, const TilePlan& plan,
                              bool* one_pass) {
  if (one_pass == nullptr) return cudaErrorInvalidValue;
  *one_pass = false;
  if (!TileOnePassAllowed(shape, plan)) return cudaSuccess;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  // The device's answer per (device, head_dim, group, chunks, chunk_tokens): the clusters it
  // holds at once, 0 on a device without cluster launch.
  using Key = std::tuple<int, int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, int> resident;
  const Key key{device, shape.head_dim, shape.group(), plan.chunks, plan.chunk_tokens};
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = resident.find(key);
  if (it == resident.end()) {
    int clusters = 0, cluster_launch = 0;
    e = cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device);
    if (e != cudaSuccess) return e;
    if (cluster_launch != 0) {
      TilePlan asked = plan;
      asked.one_pass = true;
      e = TileOnePassResidentClusters(shape, asked, &clusters);
      if (e != cudaSuccess) return e;
    }
    it = resident.emplace(key, clusters).first;
  }
  *one_pass = it->second >= shape.batch * shape.heads_kv;
  return cudaSuccess;
}

cudaError_t TileDecodeAttention(const TileDecodeShape& shape, const TileDecodeInputs& inputs,
                                const ReadKvCodec& codec, const tile::TileCentroids& centroids,
                                const ReadKvReadPolicy& policy, const TilePlan& plan,
                                void* workspace, cudaStream_t stream,
                                const TileDecodeDebug& debug) {
  internal::TileWorkspaceLayout layout;
  try {
    layout = internal::MakeTileWorkspaceLayout(shape, plan);
  } catch (const std::exception&) {
    return cudaErrorInvalidValue;
  }
  const bool residual_ok = shape.max_residual_tokens == 0 ||
                           (inputs.residual_keys != nullptr && inputs.residual_values != nullptr);
  const bool tiles_ok = shape.max_encoded_tokens == 0 ||
                        (inputs.key_tiles != nullptr && inputs.value_tiles != nullptr &&
                         inputs.page_table != nullptr);
  if (workspace == nullptr || inputs.queries == nullptr || inputs.out == nullptr ||
      inputs.encoded_lens == nullptr || inputs.residual_lens == nullptr || !residual_ok ||
      !tiles_ok || codec.store_bits != shape.store_bits || codec.key_mean == nullptr ||
      codec.key_std == nullptr || codec.value_mean == nullptr || codec.value_std == nullptr ||
      codec.key_signs == nullptr || codec.value_signs == nullptr ||
      policy.key_increments == nullptr || policy.value_increments == nullptr ||
      policy.key_steps != shape.store_bits - 1 || policy.value_steps != shape.store_bits - 1 ||
      (shape.byte_keys && policy.key_bits != shape.store_bits)) {  // byte keys: read whole
    return cudaErrorInvalidValue;
  }
  auto* base = static_cast<uint8_t*>(workspace);
  tile_kernels::TileArgs a{};
  a.heads_q = shape.heads_q;
  a.heads_kv = shape.heads_kv;
  a.store_bits = shape.store_bits;
  a.max_tiles = shape.max_token_tiles();
  a.chunk_tokens = plan.chunk_tokens;
  a.chunks = plan.chunks;
  a.max_residual = shape.max_residual_tokens;
  a.max_pages = shape.max_pages;
  a.logit_stride = layout.logit_stride;
  a.attention_scale = 1.0f / sqrtf(static_cast<float>(shape.head_dim));
  a.transform_scale = static_cast<float>(1.0 / sqrt(static_cast<double>(shape.head_dim)));
  a.in = inputs;
  a.codec = codec;
  a.policy = policy;
  a.debug = debug;
  a.fragments = reinterpret_cast<uint32_t*>(base + layout.fragments);
  a.key_depths = base + layout.key_depths;
  a.logits = reinterpret_cast<float*>(base + layout.logits);
  a.stats = reinterpret_cast<float*>(base + layout.stats);
  a.block_weights = reinterpret_cast<double*>(base + layout.block_weights);
  a.value_depths = base + layout.value_depths;
  // One pass keeps the partials on chip and counts no arrivals (tile_window_pass.cuh).
  a.partials = plan.one_pass ? nullptr : reinterpret_cast<float*>(base + layout.partials);
  a.tile_stats = reinterpret_cast<float*>(base + layout.tile_stats);
  a.probs = reinterpret_cast<__half*>(base + layout.probs);
  a.scaled_queries = reinterpret_cast<float*>(base + layout.scaled_queries);
  const bool windowed = plan.value_window_tokens > 0;
  // TileLogits writes per-chunk statistics only for TileWindowValues.
  a.chunk_stats = windowed ? reinterpret_cast<float*>(base + layout.chunk_stats) : nullptr;
  a.arrivals = plan.one_pass ? nullptr : reinterpret_cast<unsigned*>(base + layout.arrivals);
  const bool bytes = shape.byte_keys;
  return shape.head_dim == 64
             ? tile_kernels::LaunchForGroup<64>(a, centroids, shape.batch, shape.group(), windowed,
                                                bytes, plan.one_pass, stream)
             : tile_kernels::LaunchForGroup<128>(a, centroids, shape.batch, shape.group(),
                                                 windowed, bytes, plan.one_pass, stream);
}

}  // namespace readkv::cuda
