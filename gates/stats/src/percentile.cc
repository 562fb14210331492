#include "kvgate/stats/percentile.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kvgate::stats {

size_t PercentileIndex(size_t n, double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument("percentile: p must be in [0, 1], got " + std::to_string(p));
  }
  // floor(n * p) computed in long double so that e.g. n = 100, p = 0.99 gives exactly 99.
  auto index = static_cast<size_t>(std::floor(static_cast<long double>(n) * p + 1e-12L));
  return std::min(index, n - 1);
}

std::optional<double> PercentileOfSorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) {
    PercentileIndex(1, p);  // still validate p
    return std::nullopt;
  }
  return sorted[PercentileIndex(sorted.size(), p)];
}

std::optional<double> Percentile(std::vector<double> samples, double p) {
  std::sort(samples.begin(), samples.end());
  return PercentileOfSorted(samples, p);
}

}  // namespace kvgate::stats
