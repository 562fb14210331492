// How the ReadKV Select launch (readkv_select.cuh) shares a row among the thread blocks of its
// cluster, and whether the shares' importances fit in shared memory. Host and device code; no
// CUDA headers, so the traffic model (traffic.cc) uses it too.
#pragma once

#include <cstddef>

#include "split_work.h"  // KVGATE_HOST_DEVICE

namespace readkv::cuda::internal {

inline constexpr int kSelectCluster = 8;  // blocks per row: the portable cluster size
inline constexpr size_t kSelectMaxSharedBytes = 160 * 1024;  // a block's importances, at most

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
