// The host-side tables of ReadKvCodec and ReadKvReadPolicy (decode_attention.h), built once from
// the CPU reference (readkv::codec) so every user of the kernels (the bench, the runtime's CUDA KV
// backend) hands the GPU exactly the codec's numbers: the sign vectors of every (layer, KV head),
// the Lloyd tree's sorted leaf boundaries, and the tile reader's step increments (its centroids
// are tile_centroids.h's).
// Host code; compiled with and without CUDA.
#pragma once

#include <vector>

#include "readkv/codec/calibration.h"

namespace readkv::cuda {

struct ReadKvHostTables {
  std::vector<float> key_signs;    // [layers][H_kv][d], +1 or -1 (keys and queries)
  std::vector<float> value_signs;  // [layers][H_kv][d]
  std::vector<float> boundaries;   // [2^W - 1] sorted leaf boundaries
  // DepthAllocator::increment(k) of the step-1 allocator (t_min 1, step 1), the tile reader's
  // Key and Value table: key_steps = W - 1 entries (one unused entry for W = 1).
  std::vector<double> key_increments;
  int key_steps = 0;
};

// Throws readkv::codec::InvalidArgument for a store_bits or head_dim the codec refuses.
ReadKvHostTables MakeReadKvHostTables(const codec::TransformSeeds& seeds, int layers, int heads_kv,
                                      int head_dim, int store_bits);

}  // namespace readkv::cuda
