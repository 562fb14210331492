#include "kvgate/stats/moments.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace kvgate::stats {
namespace {

TEST(MomentsTest, MatchesHandComputedMeanAndUnbiasedVariance) {
  std::vector<double> v = {2, 4, 4, 4, 5, 5, 7, 9};
  Moments m = ComputeMoments(v);
  EXPECT_EQ(m.n, 8u);
  EXPECT_DOUBLE_EQ(m.mean, 5.0);
  EXPECT_DOUBLE_EQ(m.variance, 32.0 / 7.0);  // sum of squared deviations 32, n - 1 = 7
  EXPECT_DOUBLE_EQ(Mean(v), 5.0);
  EXPECT_DOUBLE_EQ(SampleVariance(v), 32.0 / 7.0);
}

TEST(MomentsTest, StaysAccurateUnderALargeOffset) {
  // Nanosecond timestamps around 1e12 with unit spread: the naive sum-of-squares formula loses
  // every significant digit here.
  std::vector<double> v;
  for (int i = 0; i < 1000; ++i) v.push_back(1e12 + (i % 2 == 0 ? 1.0 : -1.0));
  EXPECT_NEAR(SampleVariance(v), 1000.0 / 999.0, 1e-6);
  EXPECT_NEAR(Mean(v), 1e12, 1e-3);
}

TEST(MomentsTest, SingleValueHasZeroVarianceInMomentsButVarianceNeedsTwo) {
  std::vector<double> one = {3.5};
  EXPECT_EQ(ComputeMoments(one).variance, 0.0);
  EXPECT_THROW(SampleVariance(one), std::invalid_argument);
}

TEST(MomentsTest, RejectsEmptyAndNonFiniteInputNamingTheIndex) {
  EXPECT_THROW(Mean({}), std::invalid_argument);
  std::vector<double> bad = {1.0, std::numeric_limits<double>::quiet_NaN()};
  try {
    Mean(bad);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("value 1"), std::string::npos) << e.what();
  }
  std::vector<double> inf = {std::numeric_limits<double>::infinity()};
  EXPECT_THROW(Mean(inf), std::invalid_argument);
}

}  // namespace
}  // namespace kvgate::stats
