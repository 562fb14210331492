#include "split_decode.cuh"

namespace readkv::cuda::internal {
namespace {

// The blocks holding real tiles of `head`: k in [first, last) with first = BlockOf(start).
__device__ bool BlockHoldsTiles(const SplitWork& w, int k, int64_t start, int real_tiles) {
  const int64_t lo = max(w.Begin(k), start) - start;
  const int64_t hi = min(min(w.Begin(k + 1), start + w.per_head) - start,
                         static_cast<int64_t>(real_tiles));
  return lo < hi;
}

// One block of kCombineThreads per (query head, sequence). A head's partials can number in the
// hundreds at batch 1 (every block of the grid may hold a few of its tiles), so the weights
// e^{m_k - M} are computed once into shared memory by all threads, and each thread then sums its
// channel over a share of the partials with independent loads: no chain of dependent global
// reads per partial.
constexpr int kCombineThreads = 256;

__global__ void __launch_bounds__(kCombineThreads)
    CombineSplits(int heads_q, int heads_kv, int head_dim, SplitWork work,
                  const int32_t* __restrict__ seq_lens, const float* __restrict__ partial_out,
                  const float* __restrict__ partial_ml, const float* __restrict__ out_scales,
                  float* __restrict__ out) {
  extern __shared__ float weights[];  // [slots * warps], then [kCombineThreads] for sums
  float* sums = weights + work.slots * kSplitWarpsPerBlock;
  // Launched early (programmatic dependent launch): wait here until the split kernel's partials
  // are complete and visible.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int hq = blockIdx.x;
  const int b = blockIdx.y;
  const int group = heads_q / heads_kv;
  const int head = b * heads_kv + hq / group;
  const int64_t start = static_cast<int64_t>(head) * work.per_head;
  const int real = (seq_lens[b] + kSplitTileTokens - 1) / kSplitTileTokens;
  const int first = work.BlockOf(start);
  const int blocks = work.BlockOf(start + work.per_head - 1) - first + 1;  // ranges meeting it
  const int count = blocks * kSplitWarpsPerBlock;
  const size_t row = static_cast<size_t>(b) * heads_q + hq;
  const float* ml = partial_ml + row * work.slots * kSplitWarpsPerBlock * 2;
  const float* po = partial_out + row * work.slots * kSplitWarpsPerBlock * head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;

  // m of each partial (-inf for blocks without real tiles: their slots were never written).
  float m = -INFINITY;
  for (int s = threadIdx.x; s < count; s += kCombineThreads) {
    const bool held = BlockHoldsTiles(work, first + s / kSplitWarpsPerBlock, start, real);
    const float ms = held ? ml[s * 2] : -INFINITY;
    weights[s] = ms;
    m = fmaxf(m, ms);
  }
  m = WarpMax(m);
  if (lane == 0) sums[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < kCombineThreads / kWarp; ++w) m = fmaxf(m, sums[w]);
  __syncthreads();
  float l = 0.0f;
  for (int s = threadIdx.x; s < count; s += kCombineThreads) {
    const float ms = weights[s];
    const float f = ms == -INFINITY ? 0.0f : expf(ms - m);
    weights[s] = f;
    if (f != 0.0f) l += f * ml[s * 2 + 1];
  }
  l = WarpSum(l);
  if (lane == 0) sums[warp] = l;
  __syncthreads();
  l = 0.0f;
  for (int w = 0; w < kCombineThreads / kWarp; ++w) l += sums[w];
  __syncthreads();

  // Channel c of the output from `parts` interleaved shares of the partials.
  const int parts = kCombineThreads / head_dim;
  const int c = threadIdx.x % head_dim, part = threadIdx.x / head_dim;
  float acc = 0.0f;
#pragma unroll 4
  for (int s = part; s < count; s += parts) {
    const float f = weights[s];
    if (f != 0.0f) acc += f * po[static_cast<size_t>(s) * head_dim + c];
  }
  sums[threadIdx.x] = acc;
  __syncthreads();
  if (part == 0) {
    for (int p = 1; p < parts; ++p) acc += sums[p * head_dim + c];
    const float scale = out_scales != nullptr ? out_scales[hq / group] : 1.0f;
    out[row * head_dim + c] = scale * acc / l;
  }
}

}  // namespace

cudaError_t LaunchCombineSplits(const DecodeShape& shape, const SplitWork& work,
                                const int32_t* seq_lens, const float* partial_out,
                                const float* partial_ml, const float* out_scales, float* out,
                                cudaStream_t stream) {
  const size_t shared =
      (static_cast<size_t>(work.slots) * kSplitWarpsPerBlock + kCombineThreads) * 4;
  if (shared > 48 * 1024) {
    const cudaError_t status = cudaFuncSetAttribute(
        CombineSplits, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (status != cudaSuccess) return status;
  }
  // Programmatic dependent launch: the combine is scheduled while the split kernel's last blocks
  // finish, instead of after a full launch gap (griddepcontrol.wait inside keeps it correct).
  const cudaError_t status = Launch(CombineSplits, dim3(shape.heads_q, shape.batch),
                                    dim3(kCombineThreads), shared, stream, true, shape.heads_q,
                                    shape.heads_kv, shape.head_dim, work, seq_lens, partial_out,
                                    partial_ml, out_scales, out);
  if (status != cudaSuccess) return status;
  return cudaGetLastError();
}

}  // namespace readkv::cuda::internal
