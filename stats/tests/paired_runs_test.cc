#include "kvgate/stats/paired_runs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvgate/stats/random.h"
#include "kvgate/stats/student_t.h"

namespace kvgate::stats {
namespace {

std::string MessageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no exception>";
}

TEST(PairedRunsTest, LogRatioMatchesHandComputation) {
  // ln-ratios 0.1, 0.2, 0.3, 0.4, 0.5 on varying baselines: mean 0.3, sd sqrt(0.025).
  std::vector<MetricPair> pairs;
  const double baselines[] = {1.0, 2.5, 0.4, 7.0, 3.3};
  for (int i = 0; i < 5; ++i) {
    pairs.push_back({baselines[i], baselines[i] * std::exp(0.1 * (i + 1))});
  }
  LogRatioAnalysis a = PairedLogRatio(pairs);
  const double se = std::sqrt(0.025 / 5);
  const double t = StudentTQuantile(0.975, 4);
  EXPECT_NEAR(a.log_ratio.estimate, 0.3, 1e-12);
  EXPECT_NEAR(a.log_ratio.lo, 0.3 - t * se, 1e-12);
  EXPECT_NEAR(a.log_ratio.hi, 0.3 + t * se, 1e-12);
  EXPECT_NEAR(a.ratio.estimate, std::exp(0.3), 1e-12);
  EXPECT_NEAR(a.ratio.lo, std::exp(0.3 - t * se), 1e-12);
  EXPECT_NEAR(a.ratio.hi, std::exp(0.3 + t * se), 1e-12);
  EXPECT_EQ(a.log_ratio.n, 5u);
}

TEST(PairedRunsTest, DifferenceMatchesHandComputation) {
  std::vector<MetricPair> pairs = {{10, 11}, {10, 12}, {10, 13}};  // differences 1, 2, 3
  TInterval d = PairedDifference(pairs);
  const double se = 1.0 / std::sqrt(3.0);
  EXPECT_DOUBLE_EQ(d.estimate, 2.0);
  EXPECT_NEAR(d.lo, 2.0 - StudentTQuantile(0.975, 2) * se, 1e-12);
  EXPECT_NEAR(d.hi, 2.0 + StudentTQuantile(0.975, 2) * se, 1e-12);
}

// R = 5 pairs whose baselines drift a lot between pairs while the per-pair log-ratio is
// N(ln 1.2, 0.08²): over 2000 seeded replicas the ratio interval covers 1.2 at close to 95%.
TEST(PairedRunsTest, RatioIntervalCoverageIsNominalDespiteBaselineDrift) {
  constexpr int kReplicas = 2000;
  SeededRng rng(31337);
  int covered = 0;
  for (int r = 0; r < kReplicas; ++r) {
    std::vector<MetricPair> pairs;
    for (int i = 0; i < 5; ++i) {
      double baseline = 0.2 * std::exp(0.5 * rng.Normal());
      pairs.push_back({baseline, baseline * std::exp(std::log(1.2) + 0.08 * rng.Normal())});
    }
    if (PairedLogRatio(pairs).ratio.Contains(1.2)) ++covered;
  }
  const double coverage = static_cast<double>(covered) / kReplicas;
  EXPECT_GT(coverage, 0.93);
  EXPECT_LT(coverage, 0.97);
}

TEST(PairedRunsTest, PlantedRegressionAndGainAreSeenAndAnAATestIsNot) {
  SeededRng rng(8);
  std::vector<MetricPair> p99_regressed, goodput_gain, same;
  for (int i = 0; i < 5; ++i) {
    double p99 = 0.5 * std::exp(0.3 * rng.Normal());
    p99_regressed.push_back({p99, p99 * 1.2 * std::exp(0.03 * rng.Normal())});
    double goodput = 20.0 * std::exp(0.2 * rng.Normal());
    goodput_gain.push_back({goodput, goodput * 1.15 * std::exp(0.02 * rng.Normal())});
    same.push_back({p99, p99 * std::exp(0.03 * rng.Normal())});
  }
  EXPECT_TRUE(PairedLogRatio(p99_regressed).ratio.EntirelyAbove(1.05));
  EXPECT_TRUE(PairedLogRatio(goodput_gain).ratio.EntirelyAbove(1.10));
  EXPECT_TRUE(PairedDifference(goodput_gain).EntirelyAbove(0.0));
  EXPECT_TRUE(PairedLogRatio(same).ratio.Contains(1.0));
}

TEST(PairedRunsTest, RejectsTooFewPairsAndNonPositiveMetricsNamingThePair) {
  std::vector<MetricPair> one = {{1, 1}};
  EXPECT_NE(MessageOf([&] { PairedLogRatio(one); }).find("at least 2 pairs"), std::string::npos);
  EXPECT_NE(MessageOf([&] { PairedDifference(one); }).find("at least 2 pairs"), std::string::npos);
  std::vector<MetricPair> zero = {{1, 1}, {0, 2}};
  EXPECT_NE(MessageOf([&] { PairedLogRatio(zero); }).find("pair 1 baseline"), std::string::npos);
  // A zero is fine for a difference (e.g. a run with no good requests)…
  EXPECT_NO_THROW(PairedDifference(zero));
  // …but not a NaN.
  std::vector<MetricPair> nan = {{1, 1}, {1, std::nan("")}};
  EXPECT_NE(MessageOf([&] { PairedDifference(nan); }).find("pair 1 candidate"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::stats
