// How the dense and FP8 kernels share a call's work among a fixed grid of persistent thread
// blocks. Host and device code; no CUDA headers, so the traffic model (traffic.cc) uses it too.
//
// The work is a line of virtual 64-token tiles: head (b, h) = b * H_kv + h owns tiles
// [head * per_head, (head + 1) * per_head), per_head = ceil(max_tokens / 64); tiles past a
// sequence's own length are skipped. Block k of `grid` takes the contiguous range
// [Begin(k), Begin(k + 1)), so every block gets the same number of tiles to within one (for
// sequences of equal length) and streams them through one cp.async pipeline without a break at
// head boundaries. A block writes one partial per (head it touches, warp); a head's partials sit
// in `slots` consecutive slots, slot = block - FirstBlock(head).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVGATE_HOST_DEVICE __host__ __device__
#else
#define KVGATE_HOST_DEVICE
#endif

namespace readkv::cuda::internal {

inline constexpr int kSplitTileTokens = 64;
inline constexpr int kSplitWarpsPerBlock = 4;
inline constexpr int kMaxSplitBlocks = 1024;  // bounds the workspace for any device
// The SMs of an H100/H200: what the traffic model's count of the split kernels' partials assumes.
inline constexpr int kAssumedSms = 132;

struct SplitWork {
  int64_t tiles = 0;  // virtual tiles of the call
  int per_head = 0;   // virtual tiles per head
  int grid = 0;       // persistent blocks
  int slots = 0;      // partial slots per head (the workspace stride)

  KVGATE_HOST_DEVICE int64_t Begin(int k) const { return k * tiles / grid; }
  // The block whose range holds virtual tile v.
  KVGATE_HOST_DEVICE int BlockOf(int64_t v) const {
    return static_cast<int>(((v + 1) * grid - 1) / tiles);
  }
};

// Slots a head needs when blocks take ranges of at least floor(tiles / grid) tiles.
inline int SplitSlots(int64_t tiles, int per_head, int grid) {
  const int64_t shortest = tiles / grid;
  return static_cast<int>((per_head + shortest - 1) / shortest + 1);
}

// The partition of a call with `blocks` resident blocks on the device (capped at the tiles and
// at kMaxSplitBlocks); `slots` is sized for the largest grid any device may use, so the workspace
// does not depend on the device.
inline SplitWork MakeSplitWork(int batch, int heads_kv, int64_t max_tokens, int blocks) {
  SplitWork w;
  w.per_head = static_cast<int>((max_tokens + kSplitTileTokens - 1) / kSplitTileTokens);
  w.tiles = static_cast<int64_t>(batch) * heads_kv * w.per_head;
  const int64_t most = w.tiles < kMaxSplitBlocks ? w.tiles : kMaxSplitBlocks;
  w.grid = static_cast<int>(blocks < most ? blocks : most);
  if (w.grid < 1) w.grid = 1;
  w.slots = SplitSlots(w.tiles, w.per_head, static_cast<int>(most));
  return w;
}

// The cluster schedule (split_decode_kernel.cuh): head (b, h) = b * H_kv + h gets blocks
// [head * cluster, (head + 1) * cluster), one thread block cluster, and block r of it the tiles
// [r * per_head / cluster, (r + 1) * per_head / cluster) of the head: the partition above with
// grid = heads * cluster, whose ranges then never cross a head (some are empty when per_head <
// cluster). `slots` is unused: the partials stay in the cluster's shared memory.
inline constexpr int kMaxSplitCluster = 8;  // the portable cluster size

inline SplitWork MakeClusterWork(int batch, int heads_kv, int64_t max_tokens, int cluster) {
  SplitWork w;
  w.per_head = static_cast<int>((max_tokens + kSplitTileTokens - 1) / kSplitTileTokens);
  w.tiles = static_cast<int64_t>(batch) * heads_kv * w.per_head;
  w.grid = batch * heads_kv * cluster;
  return w;
}

// The cluster size the cluster schedule takes for `heads` = B * H_kv heads on a device that
// holds `resident` blocks at once, or 0 for the persistent schedule. The cluster schedule has no
// merge launch and no partials in memory, but a head's blocks all start together and none takes
// other work when it ends, so it pays only when the heads' work is even and one wave fills the
// device: the sequences' lengths within 10% of each other (min_tokens, a caller's hint; 0 =
// unknown), and the largest cluster of 1, 2, 4 or 8 blocks per head whose blocks fit in one wave
// filling at least 90% of it. Dense at 32K x 16 (32/8/128) on an H200: 128 heads x 2 = 256 of
// 264 blocks.
inline int SplitClusterSize(int64_t heads, int resident, int64_t min_tokens, int64_t max_tokens) {
  if (min_tokens <= 0 || 10 * min_tokens < 9 * max_tokens) return 0;
  for (int c = kMaxSplitCluster; c >= 1; c /= 2) {
    if (heads * c <= resident) return 10 * heads * c >= 9 * static_cast<int64_t>(resident) ? c : 0;
  }
  return 0;
}

// The cluster size a call takes under a plan's `planned` size (decode_attention.h, SplitPlan:
// -1 automatic, 0 persistent, else the size) before the launcher checks that automatic clusters
// fit the device: the plan's own, or SplitClusterSize's.
inline int PlannedClusterSize(int planned, int64_t heads, int resident, int64_t min_tokens,
                              int64_t max_tokens) {
  return planned >= 0 ? planned : SplitClusterSize(heads, resident, min_tokens, max_tokens);
}

}  // namespace readkv::cuda::internal
