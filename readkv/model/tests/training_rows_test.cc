// The row lengths `kvgate train` draws (internal::RowLength): the curriculum's stages, the
// full-length mix, and the share of half-length rows a continued long-context run asks for.
#include <gtest/gtest.h>

#include <map>

#include "llama_internal.h"

namespace readkv::model {
namespace {

std::map<int, int> Draw(double progress, int max_length, bool curriculum, double mid_share,
                        int n) {
  kvgate::stats::SplitMixRng rng(20261203);
  std::map<int, int> counts;
  for (int i = 0; i < n; ++i) {
    ++counts[internal::RowLength(progress, max_length, curriculum, mid_share, rng)];
  }
  return counts;
}

TEST(RowLength, CurriculumStagesComeFirstUnlessTurnedOff) {
  kvgate::stats::SplitMixRng rng(1);
  EXPECT_EQ(internal::RowLength(0.0, 33280, true, 0.3, rng), 512);
  EXPECT_EQ(internal::RowLength(0.10, 33280, true, 0.3, rng), 1024);
  EXPECT_EQ(internal::RowLength(0.20, 33280, true, 0.3, rng), 2048);
  EXPECT_EQ(internal::RowLength(0.30, 33280, true, 0.3, rng), 4096);
  // Never longer than the model's rows, at any stage.
  EXPECT_EQ(internal::RowLength(0.30, 1000, true, 0.0, rng), 1000);
  // Without the curriculum the first step already draws from the full mix.
  const auto counts = Draw(0.0, 33280, false, 0.0, 2000);
  EXPECT_EQ(counts.count(512), 0u);
  EXPECT_GT(counts.at(33280), 1000);
}

TEST(RowLength, HalfLengthRowsTakeTheirShareFromTheFullLength) {
  const int n = 20000;
  const auto plain = Draw(0.9, 33280, true, 0.0, n);
  EXPECT_EQ(plain.count(16640), 0u) << "no half-length rows unless asked for";
  const auto mid = Draw(0.9, 33280, true, 0.3, n);
  // Shares 10 / 10 / 20 / 30 / 30% of 1K / 2K / 4K / 16,640 / 33,280 (binomial sd <= 0.33%).
  EXPECT_NEAR(mid.at(1024) / double{n}, 0.10, 0.015);
  EXPECT_NEAR(mid.at(2048) / double{n}, 0.10, 0.015);
  EXPECT_NEAR(mid.at(4096) / double{n}, 0.20, 0.015);
  EXPECT_NEAR(mid.at(16640) / double{n}, 0.30, 0.015);
  EXPECT_NEAR(mid.at(33280) / double{n}, 0.30, 0.015);
  EXPECT_EQ(mid.size(), 5u);
  // The short rows keep their shares: only the full length gives up rows.
  EXPECT_NEAR((mid.at(1024) + mid.at(2048) + mid.at(4096)) / double{n},
              (plain.at(1024) + plain.at(2048) + plain.at(4096)) / double{n}, 0.02);
}

}  // namespace
}  // namespace readkv::model
