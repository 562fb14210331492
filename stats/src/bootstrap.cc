#include "kvgate/stats/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvgate/stats/moments.h"
#include "kvgate/stats/random.h"

namespace kvgate::stats {
namespace {

void ValidateOptions(const BootstrapOptions& options) {
  if (options.replicas < 1) {
    throw std::invalid_argument("bootstrap: replicas must be >= 1, got " +
                                std::to_string(options.replicas));
  }
  if (!(options.confidence > 0.0 && options.confidence < 1.0)) {
    throw std::invalid_argument("bootstrap: confidence must be in (0, 1), got " +
                                std::to_string(options.confidence));
  }
}

double Checked(double value, const char* what) {
  if (!std::isfinite(value)) {
    throw std::invalid_argument(
        std::string("bootstrap: statistic returned a non-finite value on ") + what);
  }
  return value;
}

// Symmetric order statistics of the sorted replica values.
Interval FromReplicas(double estimate, std::vector<double>& replicas, double confidence) {
  std::sort(replicas.begin(), replicas.end());
  const size_t b = replicas.size();
  auto k = static_cast<size_t>(
      std::floor(static_cast<long double>(b) * (1.0L - confidence) / 2.0L + 1e-12L));
  k = std::min(k, (b - 1) / 2);
  return Interval{estimate, replicas[k], replicas[b - 1 - k], confidence};
}

double MeanAt(std::span<const double> values, std::span<const size_t> indices) {
  // Plain summation: values are validated finite, n is modest, and Welford would cost a division
  // per element inside the hottest loop of the suite.
  double sum = 0.0;
  for (size_t i : indices) sum += values[i];
  return sum / static_cast<double>(indices.size());
}

void RequireFinite(std::span<const double> values, const char* name) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw std::invalid_argument(std::string("bootstrap: ") + name + "[" + std::to_string(i) +
                                  "] is not finite");
    }
  }
}

}  // namespace

Interval BootstrapOverIndices(size_t n, const IndexStatistic& statistic,
                              const BootstrapOptions& options) {
  ValidateOptions(options);
  if (n == 0) throw std::invalid_argument("bootstrap: needs at least one item");
  std::vector<size_t> indices(n);
  std::iota(indices.begin(), indices.end(), size_t{0});
  const double estimate = Checked(statistic(indices), "the full sample");
  SeededRng rng(options.seed);
  std::vector<double> replicas(static_cast<size_t>(options.replicas));
  for (double& replica : replicas) {
    for (size_t& index : indices) index = static_cast<size_t>(rng.UniformIndex(n));
    replica = Checked(statistic(indices), "a resample");
  }
  return FromReplicas(estimate, replicas, options.confidence);
}

Interval BootstrapMeanInterval(std::span<const double> values, const BootstrapOptions& options) {
  RequireFinite(values, "values");
  return BootstrapOverIndices(
      values.size(), [values](std::span<const size_t> idx) { return MeanAt(values, idx); },
      options);
}

Interval PairedBootstrapMeanDifference(std::span<const double> baseline,
                                       std::span<const double> candidate,
                                       const BootstrapOptions& options) {
  if (baseline.size() != candidate.size()) {
    throw std::invalid_argument("paired bootstrap: baseline has " +
                                std::to_string(baseline.size()) + " items, candidate " +
                                std::to_string(candidate.size()));
  }
  RequireFinite(baseline, "baseline");
  RequireFinite(candidate, "candidate");
  return BootstrapOverIndices(
      baseline.size(),
      [baseline, candidate](std::span<const size_t> idx) {
        double sum = 0.0;
        for (size_t i : idx) sum += candidate[i] - baseline[i];
        return sum / static_cast<double>(idx.size());
      },
      options);
}

Interval IndependentBootstrapMeanDifference(std::span<const double> baseline,
                                            std::span<const double> candidate,
                                            const BootstrapOptions& options) {
  ValidateOptions(options);
  if (baseline.empty() || candidate.empty()) {
    throw std::invalid_argument("independent bootstrap: both samples need at least one item");
  }
  RequireFinite(baseline, "baseline");
  RequireFinite(candidate, "candidate");
  const double estimate = Mean(candidate) - Mean(baseline);
  SeededRng rng(options.seed);
  std::vector<size_t> b_idx(baseline.size());
  std::vector<size_t> c_idx(candidate.size());
  std::vector<double> replicas(static_cast<size_t>(options.replicas));
  for (double& replica : replicas) {
    for (size_t& i : b_idx) i = static_cast<size_t>(rng.UniformIndex(baseline.size()));
    for (size_t& i : c_idx) i = static_cast<size_t>(rng.UniformIndex(candidate.size()));
    replica = MeanAt(candidate, c_idx) - MeanAt(baseline, b_idx);
  }
  return FromReplicas(estimate, replicas, options.confidence);
}

}  // namespace kvgate::stats
