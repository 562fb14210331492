// What the GPU-vs-CPU kernel tests share (decode_attention_test.cc: dense, FP8 and the launchers;
// tile_append_test.cc: the tile reader's append): device buffers (test_buffers.h), the grid's
// cases and their seeded workloads of ragged paged sequences (synthetic K/V, shuffled page
// order), and the output comparisons.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/synthetic.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"
#include "test_buffers.h"

// Fails (fatally) the test whose CUDA call did not succeed; in a helper, the helper returns and
// its caller checks with ASSERT_NO_FATAL_FAILURE.
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

namespace readkv::cuda::kernel_test {

using cuda::DeviceBuffer;  // test_buffers.h, shared with the tile reader's tests
using cuda::MaxHeadError;

inline bool HaveGpu() { return QueryDevices().device_count > 0; }

// Layer 0's calibration rows of every KV head ([H_kv][d] of the [layers][H_kv][d] array): the
// codec tables a one-layer kernel test uploads.
inline std::vector<float> LayerZero(const std::vector<float>& all, int hkv, int d) {
  return std::vector<float>(all.begin(), all.begin() + static_cast<size_t>(hkv) * d);
}

struct Case {
  int heads_q, heads_kv, head_dim;
  std::vector<int> lens;
  std::string Name() const {
    std::string name = "hq" + std::to_string(heads_q) + "_hkv" + std::to_string(heads_kv) + "_d" +
                       std::to_string(head_dim) + "_T";
    for (size_t i = 0; i < lens.size(); ++i) name += (i > 0 ? "_" : "") + std::to_string(lens[i]);
    return name;
  }
};

// Sequences of synthetic K/V (one SyntheticLayer per sequence) in a paged layout with a shuffled
// page order, plus the flat per-token arrays the append kernel takes.
struct Workload {
  codec::LayerGeometry geometry;
  DecodeShape shape;
  std::vector<codec::SyntheticLayer> layers;
  std::vector<float> queries;  // [B][H_q][d]
  std::vector<int32_t> page_table, seq_lens;
  int num_pages = 0;
  std::vector<float> keys, values;  // [n][H_kv][d]
  std::vector<int32_t> seq_ids, positions;
  std::shared_ptr<const codec::Calibration> calibration;
};

inline Workload MakeWorkload(const Case& c, uint64_t seed) {
  Workload w;
  w.geometry = {c.heads_q, c.heads_kv, c.head_dim};
  const int batch = static_cast<int>(c.lens.size());
  const int max_tokens = *std::max_element(c.lens.begin(), c.lens.end());
  w.shape = DecodeShape{batch, c.heads_q, c.heads_kv, c.head_dim,
                        (max_tokens + kPageTokens - 1) / kPageTokens, max_tokens,
                        *std::min_element(c.lens.begin(), c.lens.end())};
  codec::SyntheticConfig config;
  config.geometry = w.geometry;
  config.seed = seed;
  w.calibration = std::make_shared<codec::Calibration>(codec::MakeSyntheticCalibration(config));
  for (int b = 0; b < batch; ++b) {
    config.tokens = c.lens[static_cast<size_t>(b)];
    config.seed = seed * 1000 + static_cast<uint64_t>(b) + 1;
    w.layers.push_back(codec::MakeSyntheticLayer(config));
    const auto& q = w.layers.back().queries;
    w.queries.insert(w.queries.end(), q.begin(), q.end());
    w.seq_lens.push_back(c.lens[static_cast<size_t>(b)]);
  }
  for (int len : c.lens) w.num_pages += (len + kPageTokens - 1) / kPageTokens;
  std::vector<int32_t> order(static_cast<size_t>(w.num_pages));
  std::iota(order.begin(), order.end(), 0);
  // Pages in a seeded order (Fisher-Yates on kvgate::stats' integer draws, the same everywhere).
  kvgate::stats::SplitMixRng rng(seed);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.UniformIndex(i)]);
  w.page_table.assign(static_cast<size_t>(batch) * w.shape.max_pages, -1);
  int next = 0;
  for (int b = 0; b < batch; ++b) {
    for (int p = 0; p < (c.lens[static_cast<size_t>(b)] + kPageTokens - 1) / kPageTokens; ++p) {
      w.page_table[static_cast<size_t>(b) * w.shape.max_pages + p] = order[static_cast<size_t>(next++)];
    }
    const auto& layer = w.layers[static_cast<size_t>(b)];
    w.keys.insert(w.keys.end(), layer.keys.begin(), layer.keys.end());
    w.values.insert(w.values.end(), layer.values.begin(), layer.values.end());
    for (int i = 0; i < c.lens[static_cast<size_t>(b)]; ++i) {
      w.seq_ids.push_back(b);
      w.positions.push_back(i);
    }
  }
  return w;
}

inline bool AllFinite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

inline const std::vector<float> kNaNs(1, std::nanf(""));

}  // namespace readkv::cuda::kernel_test
