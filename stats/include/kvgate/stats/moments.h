// Mean and variance of a sample, computed the one way kvgate computes them (Welford's online
// update, so that large offsets such as nanosecond timestamps do not cancel catastrophically).
#pragma once

#include <cstddef>
#include <span>

namespace kvgate::stats {

struct Moments {
  size_t n = 0;
  double mean = 0.0;
  double variance = 0.0;  // unbiased sample variance (divides by n - 1); 0 when n < 2
};

// All values must be finite; throws std::invalid_argument naming the first bad index otherwise,
// or when `values` is empty.
Moments ComputeMoments(std::span<const double> values);

// Arithmetic mean. Throws std::invalid_argument when empty or a value is not finite.
double Mean(std::span<const double> values);

// Unbiased sample variance (n - 1 in the denominator). Throws std::invalid_argument when fewer
// than two values or a value is not finite.
double SampleVariance(std::span<const double> values);

}  // namespace kvgate::stats
