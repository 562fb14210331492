// How the ReadKV Select launch (readkv_select.cuh) is shaped (blocks per row, threads per block),
// how it shares a row among the thread blocks of its cluster, and whether the shares'
// importances fit in shared memory. Host and device code; no CUDA headers, so the traffic model
// (traffic.cc) uses it too.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "split_work.h"  // KVGATE_HOST_DEVICE

namespace readkv::cuda::internal {

inline constexpr int kSelectCluster = 8;  // blocks per row: the portable cluster size
inline constexpr int kSelectNarrowCluster = 4;  // ... when the grid has blocks to spare
inline constexpr int kSelectNarrowestCluster = 2;  // ... and the shares are still short
inline constexpr size_t kSelectMaxSharedBytes = 160 * 1024;  // a block's importances, at most
// With KVGATE_READKV_SELECT=list (readkv_attention.cu): once a radix pass's bin holds at most
// kSelectListEntries of a block's remaining gains, the block lists them (8 + 4 bytes each, and
// their count) in dynamic shared memory after its importances, and the later passes go over the
// list.
inline constexpr int kSelectListEntries = 512;
inline constexpr size_t kSelectListBytes = kSelectListEntries * (8 + 4) + 16;

// Threads per Select block: kSelectThreads, or kSelectWideThreads when the grid leaves SMs idle.
inline constexpr int kSelectThreads = 256;
inline constexpr int kSelectWideThreads = 512;

// A Select launch's shape: blocks per row (its cluster) and threads per block.
struct SelectGrid {
  int cluster;
  int threads;
};

// The shapes Select has kernel instances of (readkv_attention.cu), by index.
inline constexpr SelectGrid kSelectShapes[] = {
    {kSelectCluster, kSelectThreads},        // 0: the usual
    {kSelectCluster, kSelectWideThreads},    // 1: the grid leaves SMs idle
    {kSelectNarrowCluster, kSelectThreads},  // 2: many short rows
    {kSelectNarrowestCluster, kSelectThreads},  // 3: more, shorter rows
};
inline constexpr int kSelectShapeCount = sizeof(kSelectShapes) / sizeof(kSelectShapes[0]);

// The Select launch shape (its index in kSelectShapes) of a call with `rows` rows (sequences x
// KV heads) of at most max_tokens tokens, from the 132 SMs of an H100/H200 (kAssumedSms):
// - rows x kSelectCluster blocks fit on the SMs one to an SM: twice the warps per block;
// - else, while half the blocks per row still more than fill the SMs and a share at
//   kSelectCluster is under 2048 tokens: kSelectNarrowCluster blocks per row, each with a share
//   twice as long (the grid queues blocks anyway; what fewer blocks save is the passes' fixed
//   work per block, its cluster barriers and histogram sums), and the same step once more to
//   kSelectNarrowestCluster while it holds at kSelectNarrowCluster (each narrow shape halves the
//   one before it: static_assert below);
// - else kSelectCluster blocks of kSelectThreads.
// On the H200 (2026-12-01; docs/performance-notes.md, "Select's launch shape"), each shape against
// 8 x 256: 8 x 512 -0.5 to -4.8% for the whole ReadKV call at 8 rows, +8.7 to +11.5% at 32 and
// 128; 4 x 256 -3.1 to -4.2% at 8K x 16 (128 rows, shares of 1024), +1.0 to +2.0% at 32K x 16
// (shares of 4096), +4.3 to +5.0% at the go/no-go model's 16K x 16 (32 rows; 4-block clusters
// leave SMs idle) and +3.8 to +13.4% at 8 rows. These rules against 8 x 256, one run each:
// 32K x 1 -4.0 to -4.3%, 8K x 1 +0.1 to +0.4%, 16 rows (x 2) 32K -0.9 to -1.2%, 8K +0.9 to
// +1.0% (the first); 64-128 rows at 4K and 8K tokens -3.8 to -9.7% (32/8/128), 64 rows at 8K
// -5.8 to -6.0% (8/2/64) (the second). The 2-block step (d664b83, 2026-12-01, against the rule
// without it): 4K x 16 (128 rows, shares of 1024 at 4 blocks) -4.2 / -4.7%, every other point
// measured within noise.
constexpr int SelectShapeFor(long long rows, int max_tokens) {
  if (rows * kSelectCluster <= kAssumedSms) return 1;
  // From 8 blocks of 256, one step at a time to the next narrower shape (2, then 3): half the
  // blocks per row, while those still more than fill the SMs and a share is under 2048 tokens.
  int shape = 0;
  for (const int next : {2, 3}) {
    const int cluster = kSelectShapes[shape].cluster;
    if (rows * kSelectShapes[next].cluster <= kAssumedSms ||
        (max_tokens + cluster - 1) / cluster >= 2048) {
      break;
    }
    shape = next;
  }
  return shape;
}
static_assert(kSelectShapes[2].cluster * 2 == kSelectShapes[0].cluster &&
                  kSelectShapes[3].cluster * 2 == kSelectShapes[2].cluster &&
                  kSelectShapes[2].threads == kSelectThreads &&
                  kSelectShapes[3].threads == kSelectThreads,
              "SelectShapeFor's steps: shapes 2 and 3 halve the blocks per row, 256 threads each");
constexpr SelectGrid SelectGridFor(long long rows, int max_tokens) {
  return kSelectShapes[SelectShapeFor(rows, max_tokens)];
}

// A block's share of a row of `tokens` tokens among `cluster` blocks: a whole number of warps'
// worth.
KVGATE_HOST_DEVICE constexpr int SelectShare(int tokens, int cluster) {
  const int per = (tokens + cluster - 1) / cluster;
  return (per + 31) / 32 * 32;
}

// Whether the shares' importances (doubles) of rows up to max_tokens fit in shared memory (else
// they are kept in the workspace and re-read from L2 on every pass).
KVGATE_HOST_DEVICE constexpr bool SelectInShared(int max_tokens, int cluster) {
  return static_cast<size_t>(SelectShare(max_tokens, cluster)) * sizeof(double) <=
         kSelectMaxSharedBytes;
}

}  // namespace readkv::cuda::internal
