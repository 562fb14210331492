// Seeded percentile bootstrap (Efron & Tibshirani, "An Introduction to the Bootstrap", ch. 13).
//
// Each replica draws n indices uniformly with replacement from [0, n) with SeededRng and
// evaluates the statistic on them; the interval is read from the sorted replica values at
// 0-based positions k and B - 1 - k with k = floor(B × (1 − confidence) / 2) (symmetric order
// statistics; no interpolation). The same seed gives the same interval on every platform.
//
// The paired form resamples *items*: one index selects both the baseline and the candidate score
// of that item, so their correlation (the same question is easy or hard for both) cancels out of
// the difference — the QA F1 drop gate uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "kvgate/stats/interval.h"

namespace kvgate::stats {

struct BootstrapOptions {
  int replicas = 2000;       // B, number of resamples; >= 1
  double confidence = 0.95;  // in (0, 1)
  uint64_t seed = 0;
};

// The statistic of one resample, given the resampled indices into the caller's data.
using IndexStatistic = std::function<double(std::span<const size_t> indices)>;

// The general form: `n` items (> 0), a statistic over resampled indices. The estimate is the
// statistic on the identity indices 0..n-1. Throws std::invalid_argument on bad options, n == 0,
// or a statistic that returns a non-finite value.
Interval BootstrapOverIndices(size_t n, const IndexStatistic& statistic,
                              const BootstrapOptions& options);

// Interval of the mean of `values`.
Interval BootstrapMeanInterval(std::span<const double> values, const BootstrapOptions& options);

// Paired bootstrap over items of mean(candidate) − mean(baseline); baseline[i] and candidate[i]
// belong to the same item. Sizes must match and be > 0.
Interval PairedBootstrapMeanDifference(std::span<const double> baseline,
                                       std::span<const double> candidate,
                                       const BootstrapOptions& options);

// Unpaired counterpart: baseline and candidate are resampled independently (sizes may differ).
// Use it only when the two samples share no items; it is here mostly to show what pairing buys.
Interval IndependentBootstrapMeanDifference(std::span<const double> baseline,
                                            std::span<const double> candidate,
                                            const BootstrapOptions& options);

}  // namespace kvgate::stats
