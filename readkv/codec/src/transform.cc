#include "readkv/codec/transform.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

template <typename T>
void FwhtImpl(std::span<T> x) {
  const size_t n = x.size();
  if (!std::has_single_bit(n)) {
    throw InvalidArgument("head_dim",
                          "Hadamard size " + std::to_string(n) + " is not a power of two");
  }
  for (size_t half = 1; half < n; half *= 2) {
    for (size_t base = 0; base < n; base += 2 * half) {
      for (size_t i = base; i < base + half; ++i) {
        const T a = x[i];
        const T b = x[i + half];
        x[i] = a + b;
        x[i + half] = a - b;
      }
    }
  }
}

void CheckSize(std::span<const float> in, std::span<float> out, size_t d) {
  if (in.size() != d || out.size() != d) {
    throw InvalidArgument("vector_size", "expected " + std::to_string(d) +
                                             " elements, got in=" + std::to_string(in.size()) +
                                             " out=" + std::to_string(out.size()));
  }
}

// True when the two ranges share memory without being the same range; the elementwise sign
// pass below is only safe for disjoint or identical ranges.
bool PartialOverlap(std::span<const float> in, std::span<float> out) {
  const auto a = reinterpret_cast<uintptr_t>(in.data());
  const auto b = reinterpret_cast<uintptr_t>(out.data());
  return a != b && a < b + out.size_bytes() && b < a + in.size_bytes();
}

}  // namespace

void Fwht(std::span<float> x) { FwhtImpl(x); }
void Fwht(std::span<double> x) { FwhtImpl(x); }

HadamardTransform::HadamardTransform(int head_dim, uint64_t seed) : seed_(seed) {
  if (head_dim < 8 || !std::has_single_bit(static_cast<unsigned>(head_dim))) {
    throw InvalidArgument("head_dim",
                          "must be a power of two >= 8, got " + std::to_string(head_dim));
  }
  // One generator bit per sign, least significant bit first: bit 1 means -1. Fixed here because
  // the CUDA kernels and stored caches depend on exactly these signs.
  signs_.resize(static_cast<size_t>(head_dim));
  SplitMixRng rng(seed);
  uint64_t word = 0;
  for (int i = 0; i < head_dim; ++i) {
    if (i % 64 == 0) word = rng.Next();
    signs_[static_cast<size_t>(i)] = ((word >> (i % 64)) & 1u) != 0 ? -1 : 1;
  }
}

void HadamardTransform::Forward(std::span<const float> in, std::span<float> out) const {
  const size_t d = signs_.size();
  CheckSize(in, out, d);
  if (PartialOverlap(in, out)) {
    std::vector<float> copy(in.begin(), in.end());
    Forward(copy, out);
    return;
  }
  for (size_t i = 0; i < d; ++i) out[i] = signs_[i] < 0 ? -in[i] : in[i];
  Fwht(out);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (size_t i = 0; i < d; ++i) out[i] *= scale;
}

void HadamardTransform::Inverse(std::span<const float> in, std::span<float> out) const {
  const size_t d = signs_.size();
  CheckSize(in, out, d);
  if (PartialOverlap(in, out)) {
    std::vector<float> copy(in.begin(), in.end());
    Inverse(copy, out);
    return;
  }
  // H is symmetric and H H = d I, so the inverse is diag(s) H / sqrt(d).
  if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
  Fwht(out);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (size_t i = 0; i < d; ++i) {
    const float v = out[i] * scale;
    out[i] = signs_[i] < 0 ? -v : v;
  }
}

}  // namespace readkv::codec
