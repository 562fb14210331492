// The GPU tile reader's one-thread Threshold allocator (src/tile_threshold.h), run on the host
// against the codec's DepthAllocator::Threshold: random, zero and tied weights, every budget.
// Runs in every build.
#include "kvgate/stats/random.h"
#include "tile_threshold.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "readkv/codec/allocator.h"
#include "readkv/codec/codebook.h"

namespace readkv::cuda::tile {
namespace {

void ExpectSameAsCodec(const codec::DepthAllocator& alloc, const std::vector<double>& w,
                       long long budget) {
  std::vector<uint8_t> want(w.size()), got(w.size());
  codec::AllocatorScratch scratch;
  alloc.Threshold(w, budget, want, scratch);
  std::vector<double> inc(kSmallSteps, 0.0);
  for (int k = 0; k < alloc.steps_per_object(); ++k)
    inc[static_cast<size_t>(k)] = alloc.increment(k);
  SmallThreshold(w.data(), static_cast<int>(w.size()), budget, inc.data(), alloc.steps_per_object(),
                 got.data());
  ASSERT_EQ(got, want) << "objects " << w.size() << " budget " << budget;
}

TEST(TileThresholdTest, MatchesTheCodecsThresholdAllocator) {
  kvgate::stats::SplitMixRng rng(37);
  for (int w_bits = 2; w_bits <= 8; ++w_bits) {
    const codec::LloydTree tree(w_bits);
    const codec::DepthAllocator alloc(tree.distortions(), 1, 1);
    for (const int objects : {1, 4, 8}) {
      for (int trial = 0; trial < 60; ++trial) {
        std::vector<double> w(static_cast<size_t>(objects));
        for (double& x : w) x = std::exp(2.0 * rng.Normal());  // log-normal(0, 2)
        if (trial % 5 == 1) w[0] = 0.0;                          // a group nobody reads
        if (trial % 5 == 2) std::fill(w.begin(), w.end(), 1.5);  // every gain tied
        if (trial % 5 == 3 && objects > 1) w[1] = w[0];          // one tie
        for (long long budget = objects; budget <= objects * w_bits; ++budget) {
          ExpectSameAsCodec(alloc, w, budget);
          if (testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace readkv::cuda::tile
