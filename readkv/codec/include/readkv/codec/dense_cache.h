// The dense baseline: K/V kept uncompressed (FP32, or BF16 like a GPU dense cache) and exact
// softmax attention accumulated in FP32. See attention.h for shapes and thread-safety.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "readkv/codec/attention.h"

namespace readkv::codec {

class DenseLayerCache final : public LayerKvCache {
 public:
  // Throws InvalidArgument for a bad geometry.
  explicit DenseLayerCache(const LayerGeometry& geometry,
                           DenseStorage storage = DenseStorage::kFp32);

  void Append(std::span<const float> keys, std::span<const float> values) override;
  int64_t tokens() const override { return tokens_; }
  CapacityLedger Capacity() const override;
  EncodeCost encode_cost() const override { return encode_; }
  DenseStorage storage() const { return storage_; }

 private:
  AttentionLedgers DoAttend(std::span<const float> queries, std::span<float> out,
                            const AttendOptions& options) const override;
  int BytesPerScalar() const { return storage_ == DenseStorage::kFp32 ? 4 : 2; }

  DenseStorage storage_;
  int64_t tokens_ = 0;
  // Per KV head, token-major [T][d]; one of the two pairs is used, by storage_.
  std::vector<std::vector<float>> keys_f32_, values_f32_;
  std::vector<std::vector<uint16_t>> keys_bf16_, values_bf16_;
  EncodeCost encode_;
};

}  // namespace readkv::codec
