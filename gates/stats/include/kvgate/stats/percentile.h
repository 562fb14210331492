// Percentiles, the one way kvgate computes them (spec/product.md, "Definitions to use").
//
// Percentile p of n samples is the sorted sample at 0-based index floor(n * p), clamped to
// n - 1 — the rule MLPerf LoadGen uses. No interpolation: the value is always an observed sample.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace kvgate::stats {

// Index of percentile p (in [0, 1]) among n sorted samples. Requires n > 0.
size_t PercentileIndex(size_t n, double p);

// Percentile of already-sorted samples; nullopt when empty. Throws std::invalid_argument when
// p is outside [0, 1].
std::optional<double> PercentileOfSorted(std::span<const double> sorted, double p);

// Sorts a copy and returns the percentile; nullopt when empty.
std::optional<double> Percentile(std::vector<double> samples, double p);

}  // namespace kvgate::stats
