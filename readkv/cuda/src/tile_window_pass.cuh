// The GPU tile reader in one launch (TilePlan::one_pass; tile_attention.h): TileWindowPass, the
// work of TileLogits and TileWindowValues for one Value window in one block, a row's windows in
// one thread-block cluster. Included only through tile_attention.cu. Internal.
//
// Why: with byte keys and windows of 1024 the served call (16K x 16, 8/2/64, an H100) spent two
// thirds of its time in TileWindowValues, whose blocks first read back what TileLogits' blocks
// had just written (every tile's e values and maxima, every chunk's statistics) and then ran the
// window's cut, all after a launch boundary (docs/performance-notes.md). Here the e values stay
// in the block's shared memory, the chunks' statistics cross the cluster through distributed
// shared memory, and so do the chunks' partial sums for the row's finish: nothing but the
// output goes to memory.
//
// The arithmetic is LogitsOfChunk's and WindowValuesOfChunk's, in the same order, so a
// one-pass call gives the same bits as the two launches.
//
// Measured (H100, 2026-12-06, alternating in one run against 84d0594): the served call (32
// clusters of 16) takes 55.0-55.2 us in one pass against 58.6-58.9 in two launches (FP8 43.0);
// at four blocks an SM only 28 of its clusters were resident at once and it took 85.7. 8K x 1:
// 27.0 against 27.9. A call whose rows outnumber the resident clusters runs in waves, so one
// pass is chosen per call on the device (ChooseTileOnePass, tile_attention.h;
// docs/performance-notes.md, "One pass per row").
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "tile_kernels.cuh"
#include "tile_window.cuh"

namespace readkv::cuda::tile_kernels {

// The cluster barrier in its two halves: arrive (release: this thread's writes, shared, global
// or distributed, before it are seen by every thread of the cluster after its wait) and wait
// (acquire). Every thread of every block calls both, in the same order.
__device__ __forceinline__ void ClusterArrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void ClusterWait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The shared memory a one-pass block asks for at launch: its window's tile heads (e values and
// maxima, ValueHeadBytes(G) a tile).
template <int G>
constexpr size_t WindowPassDynamicBytes(int chunk_tokens) {
  return static_cast<size_t>(chunk_tokens / 16) * tile::ValueHeadBytes(G);
}

// Blocks of TileWindowPass an SM holds: 96 registers, and at most 228 KB / 5 - 1 KB (the
// system's reserve a block) = 44.6 KB of shared memory, static and dynamic (at 64/4: 35.7 +
// 9.2). Why five: a cluster's blocks must all be resident in one GPC, and the served call's 32
// clusters of 16 blocks took 512 of the 528 slots that four blocks an SM give an H100 (132
// SMs), which its GPCs' uneven SM counts cannot all fill with whole clusters: 28 were resident
// and the rest ran in a second wave (docs/performance-notes.md, "One pass per row").
// TileAttentionTest.OnePassResidencyIsAQuery holds the served call to fitting.
inline constexpr int kWindowPassBlocksPerSm = 5;

// Where a one-pass block keeps, in its staging ring, its partial sums ([kMaxGroup][128]
// floats, read by the other blocks of its cluster) and the rows its finish transforms: past the
// Values warps' sums ([kMmaWarps][kMaxGroup][128] floats at its start), which are read as the
// partial is written.
inline constexpr int kPassPartialAt = kMmaWarps * kMaxGroup * 128 * 4;
inline constexpr int kPassRowsAt = kPassPartialAt + kMaxGroup * 128 * 4;
static_assert(kPassRowsAt + kMaxGroup * 128 * 4 <= kMmaWarps * kStages * kStageBytes,
              "the partial and the finish's rows fit the ring");

// Grid (chunks, H_kv, B) x 128, clusters of (chunks, 1, 1): cluster = row, block rank = chunk.
//   1. LogitsOfChunk (byte keys) with its tiles' e values and maxima and its chunk's statistics
//      into this block's shared memory; every block writes its share of the residual window's
//      logits, as TileLogits;
//   2. the cluster barrier: every chunk's statistics and the window's logits are visible to
//      every block of the row; the Values' page-table and list lookups (LookUpValueLanes),
//      which need no depth, are issued before it and land meanwhile;
//   3. WindowValuesOfChunk, the chunks' statistics read from their blocks' shared memory, its
//      tiles' heads from its own, its partial sums kept in its ring (kPassPartialAt);
//   4. the finish: the first barrier's second half (every block has read the statistics: each
//      arrives once it has, in 3), a whole cluster barrier (every partial is in place), block
//      k's share of the heads (one each while the chunks outnumber them) summed over every
//      block's partial through distributed shared memory and finished (FinishTileRow), and a
//      last barrier, so no block leaves while another may still read its partial.
// Why the finish is the cluster's: the row's last block to arrive read every partial back
// through L2 and finished all heads alone, after its own Values, so the call waited on it
// (the bench's `last to end` line: 3.8-4.5 us of finish against 0.7-0.8 for the other blocks,
// H100, a98a401).
template <int D, int G>
__global__ void __launch_bounds__(kMmaThreads, kWindowPassBlocksPerSm)
    TileWindowPass(TileArgs a, const __grid_constant__ tile::TileCentroids centroids) {
  extern __shared__ __align__(16) uint8_t heads[];  // [chunk_tokens / 16][ValueHeadBytes(G)]
  __shared__ MmaBlockShared shared;
  __shared__ float chunk_stats[2 * kMaxGroup];  // M [G], sum e [G]
  constexpr int kHeadBytes = tile::ValueHeadBytes(G);
  static_assert(kHeadBytes % 16 == 0, "a tile's head keeps the next one 16-byte aligned");
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  StampPhase(a, kStampStart);
  LoadTable(centroids, shared.table);  // for the Values (byte keys decode without it)
  const LogitsOut<kHeadBytes / 2, kHeadBytes / 4> out{
      reinterpret_cast<__half*>(heads), reinterpret_cast<float*>(heads + G * 32), chunk_stats};
  LogitsOfChunk<D, G, true>(a, centroids, shared.table, &shared.ring[0][0][0], chunk, h, b, out);
  StampPhase(a, kStampLogits);
  const ValueLaneLookups lanes = WindowLanes<D>(a, chunk, h, b);  // in flight over the barrier
  const int encoded = a.in.encoded_lens[b], residual = a.in.residual_lens[b];  // likewise
  ClusterArrive();
  ClusterWait();
  StampPhase(a, kStampBarrier);
  const ::cooperative_groups::cluster_group cluster = ::cooperative_groups::this_cluster();
  const auto stats_of = [&cluster](int k) -> const float* {
    return cluster.map_shared_rank(&chunk_stats[0], k);
  };
  uint8_t* const ring = &shared.ring[0][0][0];
  float* const partial = reinterpret_cast<float*>(ring + kPassPartialAt);
  const auto finish = [&](int active, const float* head_max, const float* head_inv,
                          const float* head_mass) {
    ClusterWait();  // the first barrier's second half: every block has read the statistics
    ClusterArrive();
    ClusterWait();  // every block's partial is in its shared memory
    const int per_block = (G + a.chunks - 1) / a.chunks;  // heads a block finishes
    const int q_lo = min(G, chunk * per_block), q_hi = min(G, q_lo + per_block);
    const auto part = [&cluster, partial](int k, int i) {
      return cluster.map_shared_rank(partial, k)[i];
    };
    FinishTileRow<D, G, kMmaThreads, 1>(a, b, h, active, q_lo, q_hi, part, head_max, head_inv,
                                        head_mass,
                                        reinterpret_cast<float(*)[128]>(ring + kPassRowsAt));
    ClusterArrive();
    ClusterWait();  // no block leaves while another may still read its partial
  };
  WindowValuesOfChunk<D, G, true>(a, centroids, shared.table, ring, chunk, h, b,
                                  WindowSources<decltype(stats_of)>{stats_of, heads, lanes,
                                                                    encoded, residual, partial},
                                  [] { ClusterArrive(); }, finish);
  StampPhase(a, kStampEnd);
}

// TileWindowPass<D, G>'s attributes on the current device, set by its first launch or query
// there and kept (they belong to the kernel in that device's context): clusters above 8 are
// non-portable, the window's heads are dynamic shared memory (up to a chunk of kTileMaxChunk),
// and the largest carveout, so the driver does not trade the fifth block for L1. Devices past
// the 64th are configured on every call.
template <int D, int G>
cudaError_t ConfigureWindowPass() {
  static std::atomic<uint64_t> configured{0};  // a bit per device ordinal
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if ((configured.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const auto kernel = TileWindowPass<D, G>;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(WindowPassDynamicBytes<G>(kTileMaxChunk)));
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  configured.fetch_or(bit, std::memory_order_release);
  return cudaSuccess;
}

// TileWindowPass's launch for `chunks` chunks of `chunk_tokens` a row over (heads_kv, batch)
// rows: the kernel configured (ConfigureWindowPass) and `config` filled, its cluster attribute
// in `cluster`.
template <int D, int G>
cudaError_t WindowPassLaunch(int chunks, int chunk_tokens, int heads_kv, int batch,
                             cudaStream_t stream, cudaLaunchConfig_t& config,
                             cudaLaunchAttribute& cluster) {
  const cudaError_t e = ConfigureWindowPass<D, G>();
  if (e != cudaSuccess) return e;
  config = {};
  config.gridDim = dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(heads_kv),
                        static_cast<unsigned>(batch));
  config.blockDim = dim3(kMmaThreads);
  config.dynamicSmemBytes = WindowPassDynamicBytes<G>(chunk_tokens);
  config.stream = stream;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(chunks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return cudaSuccess;
}

// Launches TileWindowPass for plan-checked arguments.
template <int D, int G>
cudaError_t LaunchWindowPass(const TileArgs& a, const tile::TileCentroids& centroids, int batch,
                             cudaStream_t stream) {
  cudaLaunchConfig_t config;
  cudaLaunchAttribute cluster;
  const cudaError_t e =
      WindowPassLaunch<D, G>(a.chunks, a.chunk_tokens, a.heads_kv, batch, stream, config, cluster);
  return e != cudaSuccess ? e : cudaLaunchKernelEx(&config, TileWindowPass<D, G>, a, centroids);
}

// cudaOccupancyMaxActiveClusters for that launch: how many of its clusters (rows) the device
// holds at once.
template <int D, int G>
cudaError_t WindowPassResidentClusters(int chunks, int chunk_tokens, int heads_kv, int batch,
                                       int* clusters) {
  cudaLaunchConfig_t config;
  cudaLaunchAttribute cluster;
  const cudaError_t e =
      WindowPassLaunch<D, G>(chunks, chunk_tokens, heads_kv, batch, nullptr, config, cluster);
  return e != cudaSuccess ? e
                          : cudaOccupancyMaxActiveClusters(clusters, TileWindowPass<D, G>, &config);
}

}  // namespace readkv::cuda::tile_kernels
