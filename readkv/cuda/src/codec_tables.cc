#include "readkv/cuda/codec_tables.h"

#include <algorithm>

#include "readkv/codec/allocator.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/transform.h"

namespace readkv::cuda {

ReadKvHostTables MakeReadKvHostTables(const codec::TransformSeeds& seeds, int layers, int heads_kv,
                                      int head_dim, int store_bits) {
  ReadKvHostTables t;
  for (int l = 0; l < layers; ++l) {
    for (int h = 0; h < heads_kv; ++h) {
      const codec::HadamardTransform kt(head_dim, seeds.KeySeed(l, h));
      const codec::HadamardTransform vt(head_dim, seeds.ValueSeed(l, h));
      t.key_signs.insert(t.key_signs.end(), kt.signs().begin(), kt.signs().end());
      t.value_signs.insert(t.value_signs.end(), vt.signs().begin(), vt.signs().end());
    }
  }
  const codec::LloydTree tree(store_bits);
  // The leaf boundaries: the thresholds of every depth merged.
  for (int depth = 1; depth <= store_bits; ++depth) {
    const auto th = tree.thresholds(depth);
    t.boundaries.insert(t.boundaries.end(), th.begin(), th.end());
  }
  std::sort(t.boundaries.begin(), t.boundaries.end());
  const codec::DepthAllocator key_alloc(tree.distortions(), 1, 1);
  t.key_steps = key_alloc.steps_per_object();
  for (int k = 0; k < t.key_steps; ++k) t.key_increments.push_back(key_alloc.increment(k));
  t.key_increments.resize(std::max<size_t>(t.key_increments.size(), 1));
  return t;
}

}  // namespace readkv::cuda
