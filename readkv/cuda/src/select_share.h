// How the ReadKV Select launch (readkv_select.cuh) shares a row among the thread blocks of its
// cluster, and whether the shares' importances fit in shared memory. Host and device code; no
// CUDA headers, so the traffic model (traffic.cc) uses it too.
#pragma once

#include <cstddef>

#include "split_work.h"  // KVGATE_HOST_DEVICE

namespace readkv::cuda::internal {

inline constexpr int kSelectCluster = 8;  // blocks per row: the portable cluster size
inline constexpr size_t kSelectMaxSharedBytes = 160 * 1024;  // a block's importances, at most

// Threads per Select block: kSelectThreads, or kSelectWideThreads when the grid leaves SMs idle.
inline constexpr int kSelectThreads = 256;
inline constexpr int kSelectWideThreads = 512;

// The threads of a Select block for `rows` rows (sequences x KV heads): twice the warps per
// block when the grid's rows x kSelectCluster blocks fit on the 132 SMs of an H100/H200 one to
// an SM. On the H200 (BENCHMARKS.md, issue 8's twelfth round), 512 threads for every call were
// -0.5 to -4.8% for the whole ReadKV call at 8 rows (64 blocks), +8.7 to +9.7% at 32 rows and
// +2.6 to +11.5% at 128; with this rule, against 256 everywhere in one run: 32K x 1 -4.0 to
// -4.3%, 8K x 1 +0.1 to +0.4%, 16 rows (x 2) 32K -0.9 to -1.2%, 8K +0.9 to +1.0%.
KVGATE_HOST_DEVICE constexpr int SelectThreads(long long rows) {
  return rows * kSelectCluster <= 132 ? kSelectWideThreads : kSelectThreads;
}

// A block's share of a row of `tokens` tokens: a whole number of warps' worth.
KVGATE_HOST_DEVICE constexpr int SelectShare(int tokens) {
  const int per = (tokens + kSelectCluster - 1) / kSelectCluster;
  return (per + 31) / 32 * 32;
}

// Whether the shares' importances (doubles) of rows up to max_tokens fit in shared memory (else
// they are kept in the workspace and re-read from L2 on every pass).
KVGATE_HOST_DEVICE constexpr bool SelectInShared(int max_tokens) {
  return static_cast<size_t>(SelectShare(max_tokens)) * sizeof(double) <= kSelectMaxSharedBytes;
}

}  // namespace readkv::cuda::internal
