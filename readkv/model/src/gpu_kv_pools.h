// Internal to readkv/model (includes torch): what the CUDA KV backend's files share
// (gpu_kv_cache.cc, gpu_kv_tile.cc): GpuKvCache's page pools and frozen codec tables in device
// memory, and the small torch-to-pointer helpers its launches use.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_kv_cache.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_centroids.h"

namespace readkv::model::internal {

namespace rc = readkv::cuda;

// Throws std::runtime_error("cuda: WHAT: ...") for a launcher's non-zero status.
inline void Check(int status, const std::string& what) {
  if (status != 0) {
    throw std::runtime_error("cuda: " + what + ": " + rc::ErrorString(status));
  }
}

template <typename T>
inline T* Ptr(const torch::Tensor& t, int64_t offset = 0) {
  return reinterpret_cast<T*>(t.data_ptr()) + offset;
}

template <typename T>
inline torch::Tensor Upload(const std::vector<T>& host, torch::Device device) {
  return torch::from_blob(const_cast<T*>(host.data()), {static_cast<int64_t>(host.size())},
                          c10::CppTypeToScalarType<T>::value)
      .to(device);
}

// The page pools of every layer and the frozen codec tables, all in device memory.
struct GpuKvCache::Pools {
  // fp8: e4m3 codes [P][H_kv][256][d] of keys (k) and values (v).
  // readkv: the tile pools [P][H_kv][16][d / 16][W][32] (k and v).
  std::vector<torch::Tensor> k, v;
  // readkv with outlier lists: page outlier blocks [P][H_kv][kPageOutlierBlockWords] (int32
  // holding the u32 words) of keys and values.
  std::vector<torch::Tensor> k_lists, v_lists;
  torch::Tensor k_scales, v_scales;  // fp8: [layers][H_kv]
  // readkv: [layers][H_kv][d] each (the calibration's own index order).
  torch::Tensor key_mean, key_std, value_mean, value_std, key_signs, value_signs;
  torch::Tensor boundaries;  // float, the LloydTree's sorted leaf boundaries (TileAppend's encode)
  // double: the step-1 table (t_min 1, step 1), both of the tile reader's allocators'.
  torch::Tensor key_increments;
  int key_steps = 0;
  readkv::cuda::tile::TileCentroids tile_centroids;  // the tile reader's f16 tables

  rc::ReadKvCodec Codec(int layer, int heads_kv, int head_dim, int store_bits) const {
    const int64_t off = int64_t{layer} * heads_kv * head_dim;
    rc::ReadKvCodec c;
    c.store_bits = store_bits;
    c.key_mean = Ptr<const float>(key_mean, off);
    c.key_std = Ptr<const float>(key_std, off);
    c.value_mean = Ptr<const float>(value_mean, off);
    c.value_std = Ptr<const float>(value_std, off);
    c.key_signs = Ptr<const float>(key_signs, off);
    c.value_signs = Ptr<const float>(value_signs, off);
    c.boundaries = Ptr<const float>(boundaries);
    return c;
  }
};

}  // namespace readkv::model::internal
