#include "kvgate/stats/paired_runs.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvgate/stats/student_t.h"

namespace kvgate::stats {
namespace {

void RequirePairs(std::span<const MetricPair> pairs, const char* what) {
  if (pairs.size() < 2) {
    throw std::invalid_argument(std::string(what) + ": needs at least 2 pairs, got " +
                                std::to_string(pairs.size()));
  }
}

void RequireMember(double value, size_t pair, const char* member, bool positive, const char* what) {
  if (!std::isfinite(value) || (positive && !(value > 0.0))) {
    throw std::invalid_argument(std::string(what) + ": pair " + std::to_string(pair) + " " +
                                member + " must be " + (positive ? "> 0 and " : "") +
                                "finite, got " + std::to_string(value));
  }
}

}  // namespace

LogRatioAnalysis PairedLogRatio(std::span<const MetricPair> pairs, double confidence) {
  constexpr const char* kWhat = "paired log-ratio";
  RequirePairs(pairs, kWhat);
  std::vector<double> logs;
  logs.reserve(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    RequireMember(pairs[i].baseline, i, "baseline", true, kWhat);
    RequireMember(pairs[i].candidate, i, "candidate", true, kWhat);
    logs.push_back(std::log(pairs[i].candidate / pairs[i].baseline));
  }
  LogRatioAnalysis out;
  out.log_ratio = MeanTInterval(logs, confidence);
  // exp is monotone, so the interval of the log maps to an interval of the ratio.
  out.ratio = Interval{std::exp(out.log_ratio.estimate), std::exp(out.log_ratio.lo),
                       std::exp(out.log_ratio.hi), confidence};
  return out;
}

TInterval PairedDifference(std::span<const MetricPair> pairs, double confidence) {
  constexpr const char* kWhat = "paired difference";
  RequirePairs(pairs, kWhat);
  std::vector<double> diffs;
  diffs.reserve(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    RequireMember(pairs[i].baseline, i, "baseline", false, kWhat);
    RequireMember(pairs[i].candidate, i, "candidate", false, kWhat);
    diffs.push_back(pairs[i].candidate - pairs[i].baseline);
  }
  return MeanTInterval(diffs, confidence);
}

}  // namespace kvgate::stats
