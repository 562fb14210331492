#include "kvgate/stats/percentile.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kvgate/stats/moments.h"

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

double PercentileSpread(std::span<const double> pool, size_t n, double p, int resamples,
                        SeededRng& rng) {
  const size_t k = PercentileIndex(n == 0 ? 1 : n, p);
  if (pool.empty() || n == 0 || resamples < 2) return 0.0;
  std::vector<double> sorted(pool.begin(), pool.end());
  std::sort(sorted.begin(), sorted.end());
  // With the pool sorted, a run's percentile is the pool value at the k-th smallest drawn index.
  std::vector<size_t> drawn(n);
  std::vector<double> percentiles;
  percentiles.reserve(static_cast<size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    for (size_t& i : drawn) i = static_cast<size_t>(rng.UniformIndex(sorted.size()));
    std::nth_element(drawn.begin(), drawn.begin() + static_cast<std::ptrdiff_t>(k), drawn.end());
    percentiles.push_back(sorted[drawn[k]]);
  }
  const Moments m = ComputeMoments(percentiles);
  return m.mean > 0 ? std::sqrt(m.variance) / m.mean : 0.0;
}

}  // namespace kvgate::stats
