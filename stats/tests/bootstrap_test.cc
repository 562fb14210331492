#include "kvgate/stats/bootstrap.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kvgate/stats/percentile.h"
#include "kvgate/stats/random.h"

namespace kvgate::stats {
namespace {

std::vector<double> NormalSample(SeededRng& rng, int n, double mean, double sd) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(mean + sd * rng.Normal());
  return v;
}

TEST(BootstrapTest, SameSeedGivesTheSameIntervalAndAnotherSeedDoesNot) {
  SeededRng rng(3);
  std::vector<double> v = NormalSample(rng, 50, 1.0, 1.0);
  BootstrapOptions options{.replicas = 500, .confidence = 0.95, .seed = 11};
  Interval a = BootstrapMeanInterval(v, options);
  Interval b = BootstrapMeanInterval(v, options);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  options.seed = 12;
  Interval c = BootstrapMeanInterval(v, options);
  EXPECT_TRUE(c.lo != a.lo || c.hi != a.hi);
}

// Integer data and integer-only resampling: the bounds are exact rationals, so this pins the
// algorithm (engine, bounded draw, order-statistic rule) bit for bit on every platform.
TEST(BootstrapTest, IntervalIsPinnedForAFixedSeed) {
  std::vector<double> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  Interval i = BootstrapMeanInterval(v, {.replicas = 1000, .confidence = 0.9, .seed = 42});
  EXPECT_DOUBLE_EQ(i.estimate, 4.5);
  EXPECT_DOUBLE_EQ(i.lo, 3.0);
  EXPECT_DOUBLE_EQ(i.hi, 5.9);
}

TEST(BootstrapTest, UsesSymmetricOrderStatisticsOfTheReplicas) {
  // A statistic that counts its calls returns 0, 1, …, B - 1 over the replicas (after the
  // estimate call), so the bounds reveal which order statistics are read.
  int calls = 0;
  IndexStatistic counter = [&calls](std::span<const size_t>) {
    return static_cast<double>(calls++ - 1);
  };
  Interval i = BootstrapOverIndices(5, counter, {.replicas = 1000, .confidence = 0.95, .seed = 1});
  EXPECT_EQ(i.estimate, -1.0);
  EXPECT_EQ(i.lo, 25.0);   // k = floor(1000 × 0.025)
  EXPECT_EQ(i.hi, 974.0);  // B - 1 - k
}

TEST(BootstrapTest, MeanIntervalCoverageIsCloseToNominal) {
  constexpr int kReplicas = 400;
  SeededRng rng(77);
  int covered = 0;
  for (int r = 0; r < kReplicas; ++r) {
    std::vector<double> v = NormalSample(rng, 40, 5.0, 2.0);
    BootstrapOptions options{.replicas = 1000, .confidence = 0.95, .seed = uint64_t(r)};
    if (BootstrapMeanInterval(v, options).Contains(5.0)) ++covered;
  }
  const double coverage = static_cast<double>(covered) / kReplicas;
  // The percentile bootstrap under-covers slightly at n = 40 (≈ 0.93-0.94); sd ≈ 1.1 points.
  EXPECT_GT(coverage, 0.89);
  EXPECT_LT(coverage, 0.98);
}

TEST(BootstrapTest, PercentileStatisticWorksThroughIndices) {
  SeededRng rng(5);
  std::vector<double> v = NormalSample(rng, 200, 0.0, 1.0);
  IndexStatistic p90 = [&v](std::span<const size_t> idx) {
    std::vector<double> s;
    for (size_t i : idx) s.push_back(v[i]);
    return *Percentile(s, 0.9);
  };
  Interval i = BootstrapOverIndices(v.size(), p90, {.replicas = 300, .seed = 9});
  EXPECT_DOUBLE_EQ(i.estimate, *Percentile(v, 0.9));
  EXPECT_LE(i.lo, i.hi);
  EXPECT_TRUE(i.Contains(1.2816));  // the true 90th percentile of N(0, 1)
}

// Per-item scores where items differ a lot in difficulty (shared by both systems) but the
// systems differ by a small constant: pairing removes the item variance from the difference.
TEST(BootstrapTest, PairedIntervalShrinksAsCorrelationGrows) {
  SeededRng rng(2024);
  constexpr int kItems = 200;
  std::vector<double> difficulty = NormalSample(rng, kItems, 0.0, 1.0);
  std::vector<double> noise = NormalSample(rng, kItems, 0.0, 1.0);
  BootstrapOptions options{.replicas = 1000, .confidence = 0.95, .seed = 4};
  double previous_width = std::numeric_limits<double>::infinity();
  for (double rho : {0.0, 0.5, 0.9, 0.99}) {
    std::vector<double> baseline = difficulty;
    std::vector<double> candidate;
    for (int i = 0; i < kItems; ++i) {
      candidate.push_back(rho * difficulty[i] + std::sqrt(1 - rho * rho) * noise[i] - 0.1);
    }
    Interval paired = PairedBootstrapMeanDifference(baseline, candidate, options);
    Interval independent = IndependentBootstrapMeanDifference(baseline, candidate, options);
    EXPECT_LT(paired.Width(), previous_width) << "rho " << rho;
    previous_width = paired.Width();
    EXPECT_NEAR(paired.estimate, independent.estimate, 1e-12);
    if (rho >= 0.9) {
      EXPECT_LT(paired.Width(), 0.5 * independent.Width()) << "rho " << rho;
    }
  }
}

TEST(BootstrapTest, PairedEstimateIsTheMeanDifference) {
  std::vector<double> baseline = {80, 90, 100, 70};
  std::vector<double> candidate = {79, 90, 98, 70};
  Interval i = PairedBootstrapMeanDifference(baseline, candidate, {.replicas = 200, .seed = 1});
  EXPECT_DOUBLE_EQ(i.estimate, -0.75);
  EXPECT_GE(i.lo, -2.0);  // no resample can be worse than the worst item
  EXPECT_LE(i.hi, 0.0);
}

TEST(BootstrapTest, RejectsBadInputWithAClearMessage) {
  std::vector<double> a = {1, 2, 3};
  std::vector<double> b = {1, 2};
  EXPECT_THROW(PairedBootstrapMeanDifference(a, b, {}), std::invalid_argument);
  EXPECT_THROW(BootstrapMeanInterval({}, {}), std::invalid_argument);
  EXPECT_THROW(BootstrapMeanInterval(a, {.replicas = 0}), std::invalid_argument);
  EXPECT_THROW(BootstrapMeanInterval(a, {.confidence = 1.0}), std::invalid_argument);
  std::vector<double> nan = {1, std::nan(""), 3};
  try {
    PairedBootstrapMeanDifference(a, nan, {});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("candidate[1]"), std::string::npos) << e.what();
  }
  IndexStatistic returns_nan = [](std::span<const size_t>) { return std::nan(""); };
  EXPECT_THROW(BootstrapOverIndices(3, returns_nan, {}), std::invalid_argument);
}

}  // namespace
}  // namespace kvgate::stats
