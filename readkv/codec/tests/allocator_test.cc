#include "readkv/codec/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

double Objective(const LloydTree& tree, const std::vector<double>& w,
                 const std::vector<uint8_t>& t) {
  double total = 0.0;
  for (size_t j = 0; j < w.size(); ++j) total += w[j] * (1.0 - tree.distortion(t[j]));
  return total;
}

// Best objective over every depth vector on the allocator's grid within the budget.
double BruteForceBest(const LloydTree& tree, const DepthAllocator& alloc,
                      const std::vector<double>& w, int64_t budget) {
  const int levels = alloc.steps_per_object() + 1;
  std::vector<uint8_t> t(w.size());
  double best = -1.0;
  int64_t combos = 1;
  for (size_t j = 0; j < w.size(); ++j) combos *= levels;
  for (int64_t index = 0; index < combos; ++index) {
    int64_t rest = index;
    for (auto& depth : t) {
      depth = static_cast<uint8_t>(alloc.min_depth() + alloc.step() * (rest % levels));
      rest /= levels;
    }
    if (DepthAllocator::Spent(t) > budget) continue;
    best = std::max(best, Objective(tree, w, t));
  }
  return best;
}

TEST(AllocatorTest, DepthGridWithPacketsOfTwoStopsBelowW) {
  LloydTree tree(8);
  DepthAllocator alloc(tree.distortions(), /*min_depth=*/1, /*step=*/2);
  EXPECT_EQ(alloc.steps_per_object(), 3);  // depths 1, 3, 5, 7
  EXPECT_EQ(alloc.max_depth(), 7);
  std::vector<double> w = {1.0, 2.0};
  std::vector<uint8_t> t(2);
  alloc.Greedy(w, 100, t);
  EXPECT_EQ(t[0], 7);
  EXPECT_EQ(t[1], 7);
}

TEST(AllocatorTest, GreedyMatchesBruteForceOnSmallCases) {
  SplitMixRng rng(11);
  for (int store_bits : {3, 4}) {
    LloydTree tree(store_bits);
    for (int min_depth : {0, 1}) {
      for (int step : {1, 2}) {
        DepthAllocator alloc(tree.distortions(), min_depth, step);
        for (int trial = 0; trial < 40; ++trial) {
          const int n = 1 + static_cast<int>(rng.Next() % 4);
          std::vector<double> w(static_cast<size_t>(n));
          for (auto& x : w) x = (rng.Next() % 5 == 0) ? 0.0 : rng.Uniform01() * 3.0;
          const int64_t budget =
              alloc.FloorBudget(n) + static_cast<int64_t>(rng.Next() % (n * store_bits + 1));
          std::vector<uint8_t> greedy(static_cast<size_t>(n)), threshold(greedy.size());
          AllocatorScratch scratch;
          alloc.Greedy(w, budget, greedy);
          alloc.Threshold(w, budget, threshold, scratch);
          const double best = BruteForceBest(tree, alloc, w, budget);
          EXPECT_NEAR(Objective(tree, w, greedy), best, 1e-12)
              << "W=" << store_bits << " tmin=" << min_depth << " step=" << step;
          EXPECT_EQ(greedy, threshold);
        }
      }
    }
  }
}

TEST(AllocatorTest, ThresholdEqualsGreedyOnLargeRandomCasesWithTiesAndZeros) {
  LloydTree tree(8);
  SplitMixRng rng(12345);
  for (int min_depth : {0, 1}) {
    for (int step : {1, 2}) {
      DepthAllocator alloc(tree.distortions(), min_depth, step);
      for (int trial = 0; trial < 24; ++trial) {
        const int n = 200 + static_cast<int>(rng.Next() % 3000);
        std::vector<double> w(static_cast<size_t>(n));
        const int kind = trial % 4;
        for (auto& x : w) {
          if (kind == 0) {
            x = rng.Uniform01();  // continuous: few ties
          } else if (kind == 1) {
            x = static_cast<double>(rng.Next() % 4);  // heavy ties, many zeros
          } else if (kind == 2) {
            x = 1.0;  // every object identical
          } else {
            x = rng.Next() % 3 == 0 ? 0.0 : std::ldexp(1.0, -static_cast<int>(rng.Next() % 6));
          }
        }
        const int64_t floor = alloc.FloorBudget(n);
        const int64_t span = static_cast<int64_t>(n) * 8;
        const int64_t budget = floor + static_cast<int64_t>(rng.Next() % (span + 1));
        std::vector<uint8_t> greedy(w.size()), threshold(w.size());
        AllocatorScratch scratch;
        alloc.Greedy(w, budget, greedy);
        alloc.Threshold(w, budget, threshold, scratch);
        ASSERT_EQ(greedy, threshold) << "tmin=" << min_depth << " step=" << step
                                     << " trial=" << trial << " budget=" << budget;
        EXPECT_LE(DepthAllocator::Spent(threshold), budget);
        for (size_t j = 0; j < w.size(); ++j) {
          EXPECT_GE(threshold[j], min_depth);
          EXPECT_LE(threshold[j], 8);
          EXPECT_EQ((threshold[j] - min_depth) % step, 0);
          if (w[j] == 0.0) {
            EXPECT_EQ(threshold[j], min_depth);
          }
        }
      }
    }
  }
}

TEST(AllocatorTest, SpendsTheWholeBudgetWhenEveryGainIsPositive) {
  LloydTree tree(8);
  DepthAllocator alloc(tree.distortions(), 0, 1);
  std::vector<double> w = {5.0, 1.0, 0.25, 3.0};
  std::vector<uint8_t> t(4);
  AllocatorScratch scratch;
  alloc.Threshold(w, 13, t, scratch);
  EXPECT_EQ(DepthAllocator::Spent(t), 13);
  // Heavier objects never get less depth than lighter ones.
  EXPECT_GE(t[0], t[3]);
  EXPECT_GE(t[3], t[1]);
  EXPECT_GE(t[1], t[2]);
}

TEST(AllocatorTest, TiesGoToTheLowestIndexFirst) {
  LloydTree tree(8);
  DepthAllocator alloc(tree.distortions(), 0, 1);
  std::vector<double> w(6, 1.0);
  std::vector<uint8_t> greedy(6), threshold(6);
  AllocatorScratch scratch;
  alloc.Greedy(w, 9, greedy);
  alloc.Threshold(w, 9, threshold, scratch);
  EXPECT_EQ(greedy, (std::vector<uint8_t>{2, 2, 2, 1, 1, 1}));
  EXPECT_EQ(threshold, greedy);
}

TEST(AllocatorTest, ZeroWeightsStayAtTheFloorEvenWithBudgetLeft) {
  LloydTree tree(4);
  DepthAllocator alloc(tree.distortions(), 1, 1);
  std::vector<double> w = {0.0, 2.0, 0.0};
  std::vector<uint8_t> t(3);
  alloc.Greedy(w, 100, t);
  EXPECT_EQ(t, (std::vector<uint8_t>{1, 4, 1}));
}

TEST(AllocatorTest, FloorAboveBudgetIsRejected) {
  LloydTree tree(8);
  DepthAllocator alloc(tree.distortions(), 1, 2);
  std::vector<double> w(10, 1.0);
  std::vector<uint8_t> t(10);
  AllocatorScratch scratch;
  try {
    alloc.Threshold(w, 9, t, scratch);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "budget");
  }
  EXPECT_THROW(alloc.Greedy(w, 9, t), InvalidArgument);
}

TEST(AllocatorTest, BadWeightsAndSizesAreRejected) {
  LloydTree tree(8);
  DepthAllocator alloc(tree.distortions(), 0, 1);
  std::vector<uint8_t> t(2);
  std::vector<double> negative = {1.0, -1.0};
  std::vector<double> nan = {1.0, std::numeric_limits<double>::quiet_NaN()};
  std::vector<double> three = {1.0, 1.0, 1.0};
  try {
    alloc.Greedy(negative, 4, t);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "weights");
  }
  EXPECT_THROW(alloc.Greedy(nan, 4, t), InvalidArgument);
  EXPECT_THROW(alloc.Greedy(three, 4, t), InvalidArgument);
  EXPECT_THROW(DepthAllocator(tree.distortions(), 9, 1), InvalidArgument);
  EXPECT_THROW(DepthAllocator(tree.distortions(), 0, 0), InvalidArgument);
  std::vector<double> not_convex = {1.0, 0.9, 0.1};
  EXPECT_THROW(DepthAllocator(not_convex, 0, 1), InvalidArgument);
}

}  // namespace
}  // namespace readkv::codec
