#include "readkv/codec/fp8_cache.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "attention_kernels.h"
#include "calibration_checks.h"

namespace readkv::codec {

Fp8LayerCache::Fp8LayerCache(const LayerGeometry& geometry, const Calibration& calibration,
                             int layer, Fp8ScaleGranularity granularity)
    : LayerKvCache(geometry), granularity_(granularity) {
  internal::RequireCalibrationFor(calibration, geometry, layer);
  const int hkv = geometry.heads_kv;
  float key_tensor_amax = 0.0f;
  float value_tensor_amax = 0.0f;
  for (int h = 0; h < hkv; ++h) {
    const size_t index = static_cast<size_t>(layer) * hkv + h;
    key_tensor_amax = std::max(key_tensor_amax, calibration.key_amax[index]);
    value_tensor_amax = std::max(value_tensor_amax, calibration.value_amax[index]);
  }
  for (int h = 0; h < hkv; ++h) {
    const size_t index = static_cast<size_t>(layer) * hkv + h;
    const bool per_head = granularity_ == Fp8ScaleGranularity::kHead;
    key_scales_.push_back(
        Fp8ScaleFromAmax(per_head ? calibration.key_amax[index] : key_tensor_amax));
    value_scales_.push_back(
        Fp8ScaleFromAmax(per_head ? calibration.value_amax[index] : value_tensor_amax));
  }
  keys_.resize(static_cast<size_t>(hkv));
  values_.resize(static_cast<size_t>(hkv));
}

void Fp8LayerCache::Append(std::span<const float> keys, std::span<const float> values) {
  CheckAppendShapes(keys, values);
  const auto start = std::chrono::steady_clock::now();
  const int d = geometry().head_dim;
  for (int h = 0; h < geometry().heads_kv; ++h) {
    const auto head = static_cast<size_t>(h);
    // Multiplying by the reciprocal would round differently from vLLM's division.
    const float ks = key_scales_[head];
    const float vs = value_scales_[head];
    for (int c = 0; c < d; ++c) {
      keys_[head].push_back(Fp8E4m3Encode(keys[head * d + static_cast<size_t>(c)] / ks));
      values_[head].push_back(Fp8E4m3Encode(values[head * d + static_cast<size_t>(c)] / vs));
    }
  }
  ++tokens_;
  encode_.tokens_appended += 1;
  encode_.bytes_written += 2LL * geometry().heads_kv * d;
  encode_.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

CapacityLedger Fp8LayerCache::Capacity() const {
  CapacityLedger c;
  c.payload_bytes = 2 * tokens_ * geometry().heads_kv * static_cast<int64_t>(geometry().head_dim);
  c.metadata_bytes = granularity_ == Fp8ScaleGranularity::kHead
                         ? 2 * static_cast<int64_t>(geometry().heads_kv) * 4
                         : 2 * 4;
  return c;
}

AttentionLedgers Fp8LayerCache::DoAttend(std::span<const float> queries, std::span<float> out,
                                         const AttendOptions& /*options*/) const {
  CheckAttendShapes(queries, out);
  const LayerGeometry& geo = geometry();
  const int d = geo.head_dim;
  const int g = geo.group();
  const int64_t t = tokens_;
  std::vector<float> scaled(static_cast<size_t>(g) * d);
  std::vector<float> logits(static_cast<size_t>(g) * static_cast<size_t>(t));
  std::vector<float> key_row(static_cast<size_t>(d)), value_row(static_cast<size_t>(d));
  std::array<float, 256> key_lut{}, value_lut{};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int kv = 0; kv < geo.heads_kv; ++kv) {
    const auto head = static_cast<size_t>(kv);
    // Dequantised value = decode(code) * scale, computed once per code.
    for (int code = 0; code < 256; ++code) {
      key_lut[static_cast<size_t>(code)] =
          Fp8E4m3Decode(static_cast<uint8_t>(code)) * key_scales_[head];
      value_lut[static_cast<size_t>(code)] =
          Fp8E4m3Decode(static_cast<uint8_t>(code)) * value_scales_[head];
    }
    const float* q = queries.data() + head * g * d;
    for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = q[i] * scale;
    const uint8_t* keys = keys_[head].data();
    const uint8_t* values = values_[head].data();
    const auto dequantise = [d](const uint8_t* codes, const std::array<float, 256>& lut,
                                std::vector<float>& row) {
      for (int c = 0; c < d; ++c) row[static_cast<size_t>(c)] = lut[codes[c]];
      return static_cast<const float*>(row.data());
    };
    internal::AttendExactGroup(
        scaled.data(), g, d, t,
        [&](int64_t i) { return dequantise(keys + i * d, key_lut, key_row); },
        [&](int64_t i) { return dequantise(values + i * d, value_lut, value_row); }, logits.data(),
        out.data() + head * g * d);
  }

  AttentionLedgers ledgers;
  ledgers.capacity = Capacity();
  const int64_t scalars = t * geo.heads_kv * d;
  ledgers.logical.key_bits = scalars * 8;
  ledgers.logical.value_bits = scalars * 8;
  ledgers.physical.key_payload_bytes = scalars;
  ledgers.physical.value_payload_bytes = scalars;
  ledgers.physical.metadata_bytes = ledgers.capacity.metadata_bytes;
  ledgers.physical.query_bytes = static_cast<int64_t>(geo.heads_q) * d * 4;
  ledgers.physical.score_bytes = 4 * static_cast<int64_t>(geo.heads_q) * t * 4;
  ledgers.physical.output_bytes = static_cast<int64_t>(geo.heads_q) * d * 4;
  ledgers.workspace_peak_bytes =
      static_cast<int64_t>((scaled.capacity() + logits.capacity() + key_row.capacity() +
                            value_row.capacity() + key_lut.size() + value_lut.size()) *
                           sizeof(float));
  ledgers.encode = encode_;
  ledgers.depths.encoded_tokens = t;
  return ledgers;
}

}  // namespace readkv::codec
