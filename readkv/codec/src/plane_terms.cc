#include "readkv/codec/plane_terms.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

void CheckDepth(const LloydTree& tree, int depth) {
  if (depth < 1 || depth > tree.store_bits()) {
    throw InvalidArgument("depth", "must be in [1, " + std::to_string(tree.store_bits()) +
                                       "], got " + std::to_string(depth));
  }
}

// chi_S of a depth-t prefix: plane p is bit t - 1 - p of the prefix (plane 0 the most
// significant); bit p of the mask is plane p.
int Chi(unsigned prefix, int depth, unsigned mask) {
  int chi = 1;
  for (int p = 0; p < depth; ++p) {
    if ((mask >> p) & 1u) chi *= ((prefix >> (depth - 1 - p)) & 1u) ? 1 : -1;
  }
  return chi;
}

}  // namespace

std::vector<double> PlaneTermCoefficients(const LloydTree& tree, int depth) {
  CheckDepth(tree, depth);
  const std::span<const float> centroids = tree.centroids(depth);
  const unsigned n = 1u << depth;
  std::vector<double> a(n, 0.0);
  for (unsigned mask = 0; mask < n; ++mask) {
    if (std::popcount(mask) % 2 == 0) continue;  // antisymmetric: exactly 0 (tested)
    double sum = 0.0;
    for (unsigned prefix = 0; prefix < n; ++prefix) {
      sum += static_cast<double>(centroids[prefix]) * Chi(prefix, depth, mask);
    }
    a[mask] = sum / n;
  }
  return a;
}

double EvaluatePlaneTerms(std::span<const double> coefficients, int store_bits, int depth,
                          uint8_t code) {
  const unsigned prefix = static_cast<unsigned>(code) >> (store_bits - depth);
  double x = 0.0;
  for (unsigned mask = 0; mask < coefficients.size(); ++mask) {
    if (coefficients[mask] != 0.0) x += coefficients[mask] * Chi(prefix, depth, mask);
  }
  return x;
}

QuantizedQuery QuantizeQuery(std::span<const float> q) {
  QuantizedQuery out;
  float max_abs = 0.0f;
  for (float x : q) max_abs = std::max(max_abs, std::fabs(x));
  out.scale = max_abs > 0.0f ? static_cast<double>(max_abs) / 127.0 : 1.0;
  out.u.resize(q.size());
  for (size_t c = 0; c < q.size(); ++c) {
    const long r = std::lround(static_cast<double>(q[c]) / out.scale);
    out.u[c] = static_cast<uint8_t>(128 + std::clamp(r, -127L, 127L));
  }
  return out;
}

double PlaneTermLogit(std::span<const double> a, int store_bits, const QuantizedQuery& q,
                      std::span<const uint8_t> codes) {
  const int depth = std::countr_zero(a.size());
  if (a.size() < 2 || !std::has_single_bit(a.size()) || depth > store_bits) {
    throw InvalidArgument("depth", "the coefficients must number 2^t, t in [1, " +
                                       std::to_string(store_bits) + "], got " +
                                       std::to_string(a.size()));
  }
  if (codes.size() != q.u.size()) {
    throw InvalidArgument("channels", "the codes and the query differ in size (" +
                                          std::to_string(codes.size()) + " and " +
                                          std::to_string(q.u.size()) + ")");
  }
  const int w = store_bits;
  const size_t words = (codes.size() + 63) / 64;
  // The planes read and the query's bit planes, as 64-channel words (what a b1 MMA's rows and
  // columns hold); `valid` masks the channels past d in the last word.
  std::vector<uint64_t> planes(static_cast<size_t>(depth) * words, 0), query(8 * words, 0);
  std::vector<uint64_t> valid(words, 0);
  for (size_t c = 0; c < codes.size(); ++c) {
    const uint64_t bit = uint64_t{1} << (c % 64);
    valid[c / 64] |= bit;
    for (int p = 0; p < depth; ++p) {
      if ((codes[c] >> (w - 1 - p)) & 1u) planes[static_cast<size_t>(p) * words + c / 64] |= bit;
    }
    for (int j = 0; j < 8; ++j) {
      if ((q.u[c] >> j) & 1u) query[static_cast<size_t>(j) * words + c / 64] |= bit;
    }
  }
  int64_t u_sum = 0;
  for (uint8_t u : q.u) u_sum += u;
  const double q_sum = q.scale * static_cast<double>(u_sum - 128 * static_cast<int64_t>(q.u.size()));
  double logit = 0.0;
  for (unsigned mask = 0; mask < a.size(); ++mask) {
    if (a[mask] == 0.0) continue;
    // popc(u^(j) AND b_S) for each query bit, and popc(b_S), b_S = XNOR of the planes in S.
    int64_t weighted = 0, ones = 0;
    for (size_t k = 0; k < words; ++k) {
      uint64_t chi = ~uint64_t{0};  // the empty product is +1 everywhere
      for (int p = 0; p < depth; ++p) {
        // Signs multiply as bits XNOR (1 is +1): +1 * +1 and -1 * -1 give +1.
        if ((mask >> p) & 1u) chi = ~(chi ^ planes[static_cast<size_t>(p) * words + k]);
      }
      const uint64_t b = chi & valid[k];
      ones += std::popcount(b);
      for (int j = 0; j < 8; ++j) {
        weighted += (int64_t{1} << j) * std::popcount(query[static_cast<size_t>(j) * words + k] & b);
      }
    }
    const double q_dot_b = q.scale * static_cast<double>(weighted - 128 * ones);
    logit += a[mask] * (2.0 * q_dot_b - q_sum);
  }
  return logit;
}

}  // namespace readkv::codec
