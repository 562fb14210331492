// The FP8 production baseline (vLLM kv_cache_dtype=fp8_e4m3): K/V stored as e4m3 codes with
// calibrated scales (amax / 448) per layer tensor or per KV head, dequantised and attended with
// FP32 accumulation. See attention.h for shapes and thread-safety.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/fp8.h"

namespace readkv::codec {

class Fp8LayerCache final : public LayerKvCache {
 public:
  // Scales come from calibration.key_amax / value_amax of `layer`: per KV head, or the maximum
  // over the layer's heads for kTensor. Throws InvalidArgument for a bad geometry or a
  // calibration whose geometry does not match ("calibration", "layer").
  Fp8LayerCache(const LayerGeometry& geometry, const Calibration& calibration, int layer,
                Fp8ScaleGranularity granularity);

  void Append(std::span<const float> keys, std::span<const float> values) override;
  int64_t tokens() const override { return tokens_; }
  CapacityLedger Capacity() const override;
  EncodeCost encode_cost() const override { return encode_; }
  float key_scale(int head) const { return key_scales_[static_cast<size_t>(head)]; }
  float value_scale(int head) const { return value_scales_[static_cast<size_t>(head)]; }

 private:
  AttentionLedgers DoAttend(std::span<const float> queries, std::span<float> out,
                            const AttendOptions& options) const override;

  Fp8ScaleGranularity granularity_;
  std::vector<float> key_scales_, value_scales_;  // [H_kv] (equal for kTensor)
  int64_t tokens_ = 0;
  std::vector<std::vector<uint8_t>> keys_, values_;  // per KV head, [T][d] e4m3 codes
  EncodeCost encode_;
};

}  // namespace readkv::codec
