#include "kvgate/stats/student_t.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kvgate/stats/random.h"

namespace kvgate::stats {
namespace {

TEST(StudentTTest, QuantilesMatchPublishedTables) {
  EXPECT_NEAR(StudentTQuantile(0.975, 4), 2.7764451052, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.975, 1), 12.7062047362, 1e-8);
  EXPECT_NEAR(StudentTQuantile(0.95, 10), 1.8124611228, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.995, 30), 2.7499956536, 1e-8);
  EXPECT_NEAR(StudentTQuantile(0.975, 1e7), 1.959964, 1e-5);  // tends to the normal quantile
  EXPECT_NEAR(StudentTQuantile(0.5, 4), 0.0, 1e-12);
  EXPECT_NEAR(StudentTQuantile(0.025, 4), -StudentTQuantile(0.975, 4), 1e-12);
}

TEST(StudentTTest, RejectsOutOfRangeProbabilityAndDof) {
  EXPECT_THROW(StudentTQuantile(0.0, 4), std::invalid_argument);
  EXPECT_THROW(StudentTQuantile(1.0, 4), std::invalid_argument);
  EXPECT_THROW(StudentTQuantile(0.9, 0.0), std::invalid_argument);
  EXPECT_THROW(StudentTQuantile(0.9, -1.0), std::invalid_argument);
  EXPECT_THROW(StudentTQuantile(std::nan(""), 3.0), std::invalid_argument);
}

TEST(StudentTTest, MeanIntervalMatchesHandComputation) {
  std::vector<double> v = {1.0, 2.0, 3.0, 4.0, 5.0};  // mean 3, sd sqrt(2.5)
  TInterval t = MeanTInterval(v, 0.95);
  const double se = std::sqrt(2.5 / 5.0);
  EXPECT_EQ(t.n, 5u);
  EXPECT_DOUBLE_EQ(t.estimate, 3.0);
  EXPECT_NEAR(t.std_error, se, 1e-12);
  EXPECT_NEAR(t.t_quantile, 2.7764451052, 1e-9);
  EXPECT_NEAR(t.lo, 3.0 - 2.7764451052 * se, 1e-9);
  EXPECT_NEAR(t.hi, 3.0 + 2.7764451052 * se, 1e-9);
  EXPECT_DOUBLE_EQ(t.confidence, 0.95);
}

TEST(StudentTTest, ConstantValuesGiveAPointInterval) {
  std::vector<double> v = {0.7, 0.7, 0.7};
  TInterval t = MeanTInterval(v);
  EXPECT_DOUBLE_EQ(t.lo, 0.7);
  EXPECT_DOUBLE_EQ(t.hi, 0.7);
}

TEST(StudentTTest, MeanIntervalNeedsTwoValuesAndAValidConfidence) {
  std::vector<double> one = {1.0};
  std::vector<double> two = {1.0, 2.0};
  EXPECT_THROW(MeanTInterval(one), std::invalid_argument);
  EXPECT_THROW(MeanTInterval(two, 1.0), std::invalid_argument);
  EXPECT_THROW(MeanTInterval(two, 0.0), std::invalid_argument);
}

// 2000 seeded replicas of n = 5 normal draws: the 95% interval must cover the true mean in close
// to 95% of them (binomial sd ≈ 0.5 points; the band is about ±4 sd).
TEST(StudentTTest, CoverageOnSyntheticNormalDataIsNominal) {
  constexpr int kReplicas = 2000;
  constexpr double kTrueMean = 10.0;
  SeededRng rng(20240601);
  int covered = 0;
  for (int r = 0; r < kReplicas; ++r) {
    std::vector<double> v;
    for (int i = 0; i < 5; ++i) v.push_back(kTrueMean + 3.0 * rng.Normal());
    if (MeanTInterval(v, 0.95).Contains(kTrueMean)) ++covered;
  }
  const double coverage = static_cast<double>(covered) / kReplicas;
  EXPECT_GT(coverage, 0.93);
  EXPECT_LT(coverage, 0.97);
}

}  // namespace
}  // namespace kvgate::stats
