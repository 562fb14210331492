// Internal CPU kernels shared by the attention backends: fixed 8-lane loops that GCC's SLP
// vectoriser turns into SIMD at -O2 without -ffast-math, and the exact softmax attention of the
// query heads of one KV head. Not installed; not part of the codec's API.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace readkv::codec::internal {

inline constexpr int kLanes = 8;

// d is a multiple of 8 (head dims are powers of two >= 8).
inline float Dot(const float* __restrict a, const float* __restrict b, int d) {
  float acc[kLanes] = {};
  for (int c = 0; c < d; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[c + l] * b[c + l];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// y += alpha * x over n elements, n a multiple of 8.
inline void Axpy(float alpha, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t c = 0; c < n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) y[c + l] += alpha * x[c + l];
  }
}

// Exact softmax in place; returns nothing, the row sums to 1 (in double).
inline void SoftmaxInPlace(float* x, int64_t n) {
  float max_logit = x[0];
  for (int64_t i = 1; i < n; ++i) max_logit = std::max(max_logit, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_logit);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// BF16 round to nearest even (NaN stays NaN), as stored bits and back.
inline uint16_t FloatToBf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Exact attention for the g query heads of one KV head. key_row(i) / value_row(i) return a
// pointer to token i's d floats (valid until the next call of the same callable).
// queries: [g][d], already multiplied by 1/sqrt(d). logits: [g][tokens] scratch. out: [g][d].
template <typename KeyRow, typename ValueRow>
void AttendExactGroup(const float* queries, int g, int d, int64_t tokens, KeyRow&& key_row,
                      ValueRow&& value_row, float* logits, float* out) {
  for (int64_t i = 0; i < tokens; ++i) {
    const float* k = key_row(i);
    for (int h = 0; h < g; ++h) logits[h * tokens + i] = Dot(queries + h * d, k, d);
  }
  for (int h = 0; h < g; ++h) SoftmaxInPlace(logits + h * tokens, tokens);
  std::fill(out, out + static_cast<int64_t>(g) * d, 0.0f);
  for (int64_t i = 0; i < tokens; ++i) {
    const float* v = value_row(i);
    for (int h = 0; h < g; ++h) Axpy(logits[h * tokens + i], v, out + h * d, d);
  }
}

}  // namespace readkv::codec::internal
