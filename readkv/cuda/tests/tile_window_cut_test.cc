// The GPU tile reader's Value cut of a window by counting against sorted weights
// (src/tile_window_cut.h), run on the host against the codec's DepthAllocator::Threshold: random,
// zero and tied weights, windows of 1 to 128 blocks, budgets from none to all; and the warp's
// two-round search against the one-thread binary search. Runs in every build.
#include "tile_window_cut.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/allocator.h"
#include "readkv/codec/codebook.h"

namespace readkv::cuda::tile {
namespace {

// Depths as the device computes them (tile_value_cut.cuh, CutWindowBlocks and ValueBlockDepth):
// the window's positive steps, and when the budget buys fewer the cut by counting.
std::vector<uint8_t> DepthsByCounting(const std::vector<double>& w, long long budget,
                                      const std::vector<double>& inc, int spo) {
  const int n = static_cast<int>(w.size());
  std::vector<double> sorted = w;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  long long steps = budget - n;
  steps = std::min<long long>(steps, static_cast<long long>(n) * spo);
  const long long positive = GainsAbove(sorted.data(), n, inc.data(), spo, 0.0, false);
  std::vector<uint8_t> depths(w.size(), 1);
  if (steps <= 0) return depths;
  if (positive <= steps) {  // every positive step
    for (int j = 0; j < n; ++j) {
      depths[static_cast<size_t>(j)] = static_cast<uint8_t>(
          1 + StepsAbove(w[static_cast<size_t>(j)], 0.0, inc.data(), spo));
    }
    return depths;
  }
  const double gain = CutGainOfSorted(sorted.data(), n, inc.data(), spo, steps);
  const long long above = GainsAbove(sorted.data(), n, inc.data(), spo, gain, false);
  EXPECT_LT(above, steps);
  EXPECT_GE(GainsAbove(sorted.data(), n, inc.data(), spo, gain, true), steps);
  const unsigned key = TieKey(w.data(), n, inc.data(), spo, gain, steps - above);
  EXPECT_NE(key, 0xFFFFFFFFu);
  for (int j = 0; j < n; ++j) {
    depths[static_cast<size_t>(j)] = static_cast<uint8_t>(
        1 + StepsAtCut(w[static_cast<size_t>(j)], j, inc.data(), spo, gain, key));
  }
  return depths;
}

// The warp's two rounds, one lane after another: the column's first entry at or below the cut.
int WarpSearch(const std::vector<double>& sorted, const std::vector<double>& inc, int spo,
               long long steps, int s) {
  const int n = static_cast<int>(sorted.size());
  const auto passes = [&](int i) {
    return AtOrBelowCut(sorted.data(), n, inc.data(), spo, steps, inc[static_cast<size_t>(s)], i);
  };
  int first = -1;
  for (int lane = 0; lane < 32 && first < 0; ++lane) {
    if (passes(Round1Entry(lane))) first = lane;
  }
  if (first < 0) return n;
  for (int lane = 0; lane < 4; ++lane) {
    if (passes(Round2Entry(first, lane))) return std::min(n, Round2Entry(first, lane));
  }
  ADD_FAILURE() << "round 2 found nothing after round 1's lane " << first;
  return n;
}

TEST(TileWindowCutTest, MatchesTheCodecsThresholdAllocator) {
  kvgate::stats::SplitMixRng rng(41);
  for (const int w_bits : {2, 4, 8}) {
    const codec::LloydTree tree(w_bits);
    const codec::DepthAllocator alloc(tree.distortions(), 1, 1);
    const int spo = alloc.steps_per_object();
    std::vector<double> inc(static_cast<size_t>(spo));
    for (int k = 0; k < spo; ++k) inc[static_cast<size_t>(k)] = alloc.increment(k);
    for (const int n : {1, 2, 7, 32, 64, 100, 127, 128}) {
      for (int trial = 0; trial < 12; ++trial) {
        std::vector<double> w(static_cast<size_t>(n));
        for (double& x : w) x = std::exp(3.0 * rng.Normal());  // log-normal(0, 3)
        if (trial % 4 == 1) w[static_cast<size_t>(n / 2)] = 0.0;  // a block nobody weighs
        if (trial % 4 == 2) std::fill(w.begin(), w.end(), 0.25);  // every gain tied
        if (trial % 4 == 3 && n > 2) {                            // ties among some
          w[1] = w[0];
          w[static_cast<size_t>(n - 1)] = w[0];
        }
        // Budgets: none above t_min, every one up to 16 past it, then a stride to all.
        for (long long budget = n; budget <= static_cast<long long>(n) * w_bits;
             budget += budget < n + 16 ? 1 : 1 + n / 3) {
          std::vector<uint8_t> want(w.size());
          codec::AllocatorScratch scratch;
          alloc.Threshold(w, budget, want, scratch);
          ASSERT_EQ(DepthsByCounting(w, budget, inc, spo), want)
              << "bits " << w_bits << ", blocks " << n << ", trial " << trial << ", budget "
              << budget;
        }
      }
    }
  }
}

TEST(TileWindowCutTest, TheWarpsTwoRoundsFindTheBinarySearchsEntry) {
  kvgate::stats::SplitMixRng rng(43);
  const codec::LloydTree tree(8);
  const codec::DepthAllocator alloc(tree.distortions(), 1, 1);
  const int spo = alloc.steps_per_object();
  std::vector<double> inc(static_cast<size_t>(spo));
  for (int k = 0; k < spo; ++k) inc[static_cast<size_t>(k)] = alloc.increment(k);
  for (const int n : {1, 3, 4, 5, 31, 64, 65, 127, 128}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<double> sorted(static_cast<size_t>(n));
      for (double& x : sorted) x = std::exp(2.0 * rng.Normal());
      if (trial % 3 == 1) std::fill(sorted.begin(), sorted.begin() + n / 2, 2.0);
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      const long long positive = GainsAbove(sorted.data(), n, inc.data(), spo, 0.0, false);
      for (long long steps = 1; steps < positive; steps += 1 + positive / 40) {
        for (int s = 0; s < spo; ++s) {
          int lo = 0, hi = n;  // the one-thread search, as CutGainOfSorted's
          while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (AtOrBelowCut(sorted.data(), n, inc.data(), spo, steps, inc[static_cast<size_t>(s)],
                             mid)) {
              hi = mid;
            } else {
              lo = mid + 1;
            }
          }
          ASSERT_EQ(WarpSearch(sorted, inc, spo, steps, s), lo)
              << "blocks " << n << ", steps " << steps << ", column " << s;
        }
      }
    }
  }
}

}  // namespace
}  // namespace readkv::cuda::tile
