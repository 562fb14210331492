#include "kvgate/stats/percentile.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvgate::stats
