#include "readkv/codec/dense_cache.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "attention_kernels.h"

namespace readkv::codec {

DenseLayerCache::DenseLayerCache(const LayerGeometry& geometry, DenseStorage storage)
    : LayerKvCache(geometry), storage_(storage) {
  const auto heads = static_cast<size_t>(geometry.heads_kv);
  if (storage_ == DenseStorage::kFp32) {
    keys_f32_.resize(heads);
    values_f32_.resize(heads);
  } else {
    keys_bf16_.resize(heads);
    values_bf16_.resize(heads);
  }
}

void DenseLayerCache::Append(std::span<const float> keys, std::span<const float> values) {
  CheckAppendShapes(keys, values);
  const auto start = std::chrono::steady_clock::now();
  const int d = geometry().head_dim;
  for (int h = 0; h < geometry().heads_kv; ++h) {
    const float* k = keys.data() + static_cast<size_t>(h) * d;
    const float* v = values.data() + static_cast<size_t>(h) * d;
    if (storage_ == DenseStorage::kFp32) {
      keys_f32_[static_cast<size_t>(h)].insert(keys_f32_[static_cast<size_t>(h)].end(), k, k + d);
      values_f32_[static_cast<size_t>(h)].insert(values_f32_[static_cast<size_t>(h)].end(), v,
                                                 v + d);
    } else {
      for (int c = 0; c < d; ++c) {
        keys_bf16_[static_cast<size_t>(h)].push_back(internal::FloatToBf16(k[c]));
        values_bf16_[static_cast<size_t>(h)].push_back(internal::FloatToBf16(v[c]));
      }
    }
  }
  ++tokens_;
  encode_.tokens_appended += 1;
  encode_.bytes_written += 2LL * geometry().heads_kv * d * BytesPerScalar();
  encode_.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

CapacityLedger DenseLayerCache::Capacity() const {
  CapacityLedger c;
  c.payload_bytes = 2 * tokens_ * geometry().heads_kv * static_cast<int64_t>(geometry().head_dim) *
                    BytesPerScalar();
  return c;
}

AttentionLedgers DenseLayerCache::DoAttend(std::span<const float> queries, std::span<float> out,
                                           const AttendOptions& /*options*/) const {
  CheckAttendShapes(queries, out);
  const LayerGeometry& geo = geometry();
  const int d = geo.head_dim;
  const int g = geo.group();
  const int64_t t = tokens_;
  std::vector<float> scaled(static_cast<size_t>(g) * d);
  std::vector<float> logits(static_cast<size_t>(g) * static_cast<size_t>(t));
  std::vector<float> key_row, value_row;
  if (storage_ == DenseStorage::kBf16) {
    key_row.resize(static_cast<size_t>(d));
    value_row.resize(static_cast<size_t>(d));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int kv = 0; kv < geo.heads_kv; ++kv) {
    const auto head = static_cast<size_t>(kv);
    const float* q = queries.data() + static_cast<size_t>(kv) * g * d;
    for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = q[i] * scale;
    float* o = out.data() + static_cast<size_t>(kv) * g * d;
    if (storage_ == DenseStorage::kFp32) {
      const float* keys = keys_f32_[head].data();
      const float* values = values_f32_[head].data();
      internal::AttendExactGroup(
          scaled.data(), g, d, t, [&](int64_t i) { return keys + i * d; },
          [&](int64_t i) { return values + i * d; }, logits.data(), o);
    } else {
      const uint16_t* keys = keys_bf16_[head].data();
      const uint16_t* values = values_bf16_[head].data();
      const auto widen = [d](const uint16_t* src, std::vector<float>& row) {
        for (int c = 0; c < d; ++c) row[static_cast<size_t>(c)] = internal::Bf16ToFloat(src[c]);
        return static_cast<const float*>(row.data());
      };
      internal::AttendExactGroup(
          scaled.data(), g, d, t, [&](int64_t i) { return widen(keys + i * d, key_row); },
          [&](int64_t i) { return widen(values + i * d, value_row); }, logits.data(), o);
    }
  }

  AttentionLedgers ledgers;
  ledgers.capacity = Capacity();
  const int64_t scalars = t * geo.heads_kv * d;
  ledgers.logical.key_bits = scalars * BytesPerScalar() * 8;
  ledgers.logical.value_bits = scalars * BytesPerScalar() * 8;
  ledgers.physical.key_payload_bytes = scalars * BytesPerScalar();
  ledgers.physical.value_payload_bytes = scalars * BytesPerScalar();
  ledgers.physical.query_bytes = static_cast<int64_t>(geo.heads_q) * d * 4;
  // Logits written, read by the softmax; probabilities written, read by the output pass.
  ledgers.physical.score_bytes = 4 * static_cast<int64_t>(geo.heads_q) * t * 4;
  ledgers.physical.output_bytes = static_cast<int64_t>(geo.heads_q) * d * 4;
  ledgers.workspace_peak_bytes = static_cast<int64_t>(
      (scaled.capacity() + logits.capacity() + key_row.capacity() + value_row.capacity()) *
      sizeof(float));
  ledgers.encode = encode_;
  ledgers.depths.encoded_tokens = t;
  return ledgers;
}

}  // namespace readkv::codec
