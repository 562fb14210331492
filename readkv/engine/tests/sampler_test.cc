#include "readkv/engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace readkv::engine {
namespace {

TEST(SamplerTest, GreedyPicksTheLowestIdAmongTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(Sampler::Greedy(logits), 1);
  Sampler sampler(0.0, 123);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sampler.Next(logits), 1);
}

TEST(SamplerTest, GreedyIgnoresNonFiniteLogitsAndReportsAllNonFinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Sampler::Greedy(std::vector<float>{nan, -1.0f, inf, -2.0f}), 1);
  EXPECT_EQ(Sampler::Greedy(std::vector<float>{nan, inf, -inf}), -1);
  Sampler sampler(0.7, 1);
  EXPECT_EQ(sampler.Next(std::vector<float>{nan, nan}), -1);
}

TEST(SamplerTest, SameSeedGivesTheSameTokens) {
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, 0.25f, 0.9f};
  Sampler a(1.0, 42);
  Sampler b(1.0, 42);
  Sampler c(1.0, 43);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 64; ++i) {
    ta.push_back(a.Next(logits));
    tb.push_back(b.Next(logits));
    tc.push_back(c.Next(logits));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(SamplerTest, TemperatureSamplingFollowsTheSoftmax) {
  // p = softmax([0, ln 3]) = [0.25, 0.75] at T = 1.
  const std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0))};
  Sampler sampler(1.0, 7);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += sampler.Next(logits) == 1 ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

TEST(SamplerTest, NonFiniteLogitsAreNeverSampled) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.0f, -std::numeric_limits<float>::infinity(), 0.0f};
  Sampler sampler(2.0, 9);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = sampler.Next(logits);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

}  // namespace
}  // namespace readkv::engine
