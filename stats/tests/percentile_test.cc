#include "kvgate/stats/percentile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace kvgate::stats {
namespace {

TEST(PercentileTest, UsesFloorOfNTimesPIndexWithoutInterpolation) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);  // unsorted on purpose
  EXPECT_EQ(*Percentile(samples, 0.5), 51.0);   // index 50
  EXPECT_EQ(*Percentile(samples, 0.99), 100.0);  // index 99
  EXPECT_EQ(*Percentile(samples, 0.0), 1.0);
  EXPECT_EQ(*Percentile(samples, 1.0), 100.0);  // clamped to n - 1
  std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(*Percentile(ten, 0.9), 10.0);  // index 9
  EXPECT_EQ(*Percentile(ten, 0.89), 9.0);  // floor(8.9) = 8
}

TEST(PercentileTest, EmptyGivesNoValueAndBadPThrows) {
  EXPECT_FALSE(Percentile({}, 0.5).has_value());
  EXPECT_THROW(Percentile({1.0}, 1.5), std::invalid_argument);
  EXPECT_THROW(Percentile({1.0}, -0.1), std::invalid_argument);
}

TEST(PercentileSpreadTest, IsZeroForAConstantPoolAndForNothingToDraw) {
  SeededRng rng(7);
  const std::vector<double> same(50, 3.0);
  EXPECT_EQ(PercentileSpread(same, 64, 0.99, 100, rng), 0.0);
  EXPECT_EQ(PercentileSpread({}, 64, 0.99, 100, rng), 0.0);
  EXPECT_EQ(PercentileSpread(same, 0, 0.99, 100, rng), 0.0);
  EXPECT_THROW(PercentileSpread(same, 64, 1.5, 100, rng), std::invalid_argument);
}

// A pool like the H200 runs' TPOT: 95% fast requests, 5% ten times slower (prefill stalls). The
// P99 of 64 requests is their maximum, so whether a run caught a slow one moves it a lot; with
// more requests per run the spread shrinks.
TEST(PercentileSpreadTest, ShrinksWithRequestsPerRunOnATwoModePool) {
  std::vector<double> pool;
  for (int i = 0; i < 950; ++i) pool.push_back(2.0 + 0.001 * i);
  for (int i = 0; i < 50; ++i) pool.push_back(20.0 + 0.1 * i);
  SeededRng rng(1);
  const double at64 = PercentileSpread(pool, 64, 0.99, 400, rng);
  const double at1024 = PercentileSpread(pool, 1024, 0.99, 400, rng);
  EXPECT_GT(at64, 0.05);
  EXPECT_LT(at1024, at64 / 3);
  // Deterministic for a seed.
  SeededRng again(1);
  EXPECT_EQ(PercentileSpread(pool, 64, 0.99, 400, again), at64);
}

// The spread of the median of n normal draws is about 1.2533 sigma / sqrt(n) (its asymptotic
// standard error): a check of the resampling against a known answer.
TEST(PercentileSpreadTest, MatchesTheMediansStandardErrorOnANormalPool) {
  SeededRng source(3);
  std::vector<double> pool;
  for (int i = 0; i < 20000; ++i) pool.push_back(100.0 + source.Normal());
  SeededRng rng(5);
  const double cv = PercentileSpread(pool, 400, 0.5, 2000, rng);
  const double expected = 1.2533 / std::sqrt(400.0) / 100.0;
  EXPECT_NEAR(cv, expected, 0.1 * expected);
}

}  // namespace
}  // namespace kvgate::stats
