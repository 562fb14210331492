// Percentiles, the one way kvgate computes them (docs/definitions.md, "Percentiles").
//
// Percentile p of n samples is the sorted sample at 0-based index floor(n * p), clamped to
// n - 1 — the rule MLPerf LoadGen uses. No interpolation: the value is always an observed sample.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "kvgate/stats/random.h"

namespace kvgate::stats {

// Index of percentile p (in [0, 1]) among n sorted samples. Requires n > 0.
size_t PercentileIndex(size_t n, double p);

// Percentile of already-sorted samples; nullopt when empty. Throws std::invalid_argument when
// p is outside [0, 1].
std::optional<double> PercentileOfSorted(std::span<const double> sorted, double p);

// Sorts a copy and returns the percentile; nullopt when empty.
std::optional<double> Percentile(std::vector<double> samples, double p);

// How much the p-percentile of a run of n samples varies from sampling alone: its coefficient of
// variation (standard deviation / mean) over `resamples` runs of n draws with replacement from
// `pool` (values >= 0, e.g. latencies), drawn from `rng`. It sees only the pool's own spread,
// nothing that differs between runs, so it is a lower bound on run-to-run noise. 0 when the pool
// is empty, n == 0, resamples < 2 or the mean is 0. Throws std::invalid_argument for p outside
// [0, 1].
double PercentileSpread(std::span<const double> pool, size_t n, double p, int resamples,
                        SeededRng& rng);

}  // namespace kvgate::stats
