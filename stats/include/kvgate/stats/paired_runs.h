// Analysis of R interleaved A/B run pairs (ABAB…, the same seeded schedule for both members of a
// pair): one value per pair, so drift over time hits both members alike and the pairs are
// independent draws. Used by the P99 gate (ratio of candidate to baseline P99) and the goodput
// gate (ratio and difference of goodput); docs/gates.md, "The four gates".
#pragma once

#include <span>

#include "kvgate/stats/interval.h"

namespace kvgate::stats {

// One metric (e.g. P99 TTFT in seconds, or goodput in requests/s) of both members of a pair.
struct MetricPair {
  double baseline = 0.0;
  double candidate = 0.0;
};

struct LogRatioAnalysis {
  // Mean over pairs of ln(candidate / baseline), with its t-interval (R - 1 dof).
  TInterval log_ratio;
  // exp of the above: the geometric-mean ratio candidate / baseline and its interval. A ratio
  // interval entirely below 1.05 passes "candidate P99 ≤ 1.05 × baseline".
  Interval ratio;
};

// Needs at least 2 pairs, every metric finite and > 0; throws std::invalid_argument naming the
// pair and member otherwise (e.g. a run with zero goodput has no log-ratio).
LogRatioAnalysis PairedLogRatio(std::span<const MetricPair> pairs, double confidence = 0.95);

// t-interval of the mean per-pair difference candidate − baseline (units of the metric). Needs at
// least 2 pairs and finite metrics; throws std::invalid_argument otherwise.
TInterval PairedDifference(std::span<const MetricPair> pairs, double confidence = 0.95);

}  // namespace kvgate::stats
