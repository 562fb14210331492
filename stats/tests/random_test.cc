#include "kvgate/stats/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kvgate::stats {
namespace {

TEST(SeededRngTest, EngineIsTheStandardMt19937_64) {
  // The C++ standard ([rand.predef]) fixes the 10000th output of a default-seeded mt19937_64.
  SeededRng rng(5489u);
  uint64_t x = 0;
  for (int i = 0; i < 10000; ++i) x = rng.Next();
  EXPECT_EQ(x, 9981545732273789042ull);
}

// Bootstrap intervals are regated from stored history, so every draw must stay bit-identical.
// The values below were computed by the code as of commit fb9e836 (x86-64, glibc's libm for
// Normal).
TEST(SeededRngTest, DrawsAreFrozen) {
  SeededRng rng(20261205);
  EXPECT_EQ(rng.Next(), 9099455867197555040ull);
  EXPECT_EQ(rng.Next(), 17086799726947497818ull);
  EXPECT_EQ(rng.Next(), 2392110184091095743ull);
  EXPECT_EQ(rng.UniformIndex(1000003), 67714u);
  EXPECT_EQ(rng.UniformIndex(1000003), 817875u);
  EXPECT_EQ(rng.UniformIndex(1000003), 124221u);
  EXPECT_EQ(rng.UniformIndex(1000003), 248204u);
  EXPECT_EQ(rng.UniformIndex((uint64_t{1} << 63) + 1), 3467715931991285807ull);
  EXPECT_EQ(rng.Uniform01(), 0x1.da8b19c604ea1p-1);
  EXPECT_EQ(rng.Uniform01(), 0x1.382208d4a345p-1);
  EXPECT_EQ(rng.Uniform01(), 0x1.871c9a916347p-3);
  EXPECT_EQ(rng.Normal(), 0x1.cf2858a762e58p-1);
  EXPECT_EQ(rng.Normal(), -0x1.75b0f49a6c80ap+0);
  EXPECT_EQ(rng.Normal(), -0x1.e7bcbff97ec65p-1);
  EXPECT_EQ(rng.Normal(), -0x1.93bbdd778ec2fp-2);
  EXPECT_EQ(rng.Normal(), 0x1.165e3553d2db9p-1);
  EXPECT_EQ(rng.Next(), 4497828526960947270ull);
}

// The codec's signs, synthetic data and calibration seeds and the training corpus of the committed
// models come from SplitMixRng and DeriveSeed, so these outputs are part of every cache identity
// and must never change. The values were computed by readkv::codec::SplitMix64 and DeriveSeed as
// of commit fb9e836, before they moved here (x86-64, glibc's libm for Normal).
TEST(SplitMixRngTest, StreamIsFrozen) {
  SplitMixRng rng(20261205);
  EXPECT_EQ(rng.Next(), 14923685392124320195ull);
  EXPECT_EQ(rng.Next(), 13194210412921193962ull);
  EXPECT_EQ(rng.Next(), 10294844152046297514ull);
  EXPECT_EQ(rng.Next(), 15059149528404772108ull);
  EXPECT_EQ(rng.Uniform01(), 0x1.d3cc4eabd45d8p-3);
  EXPECT_EQ(rng.Uniform01(), 0x1.8846141e14c38p-2);
  EXPECT_EQ(rng.Uniform01(), 0x1.38b865d12eb1ap-1);
  // Box-Muller: pairs, the second value of a pair cached; the fifth draw leaves a spare.
  EXPECT_EQ(rng.Normal(), 0x1.37aa5196c925cp-3);
  EXPECT_EQ(rng.Normal(), 0x1.08c38585d659fp-1);
  EXPECT_EQ(rng.Normal(), 0x1.478a949fd3499p-1);
  EXPECT_EQ(rng.Normal(), 0x1.58b0517a6e64cp+1);
  EXPECT_EQ(rng.Normal(), -0x1.26a2a6eb5c271p+0);
  EXPECT_EQ(rng.Next(), 5813039617392266644ull);
}

TEST(DeriveSeedTest, IsFrozen) {
  EXPECT_EQ(DeriveSeed(0, 0), 5711333093415807177ull);
  EXPECT_EQ(DeriveSeed(1, 0x9a55), 779395043517320466ull);
  EXPECT_EQ(DeriveSeed(20261203, 3, 5), 17939308174458118002ull);
  EXPECT_EQ(DeriveSeed(0xfeed, 101, 4096, 7), 8933769863805949021ull);
  EXPECT_EQ(DeriveSeed(~0ull, 1, 2, 3), 14989651706833435275ull);
  // Omitted parts are zeros.
  EXPECT_EQ(DeriveSeed(20261203, 3, 5), DeriveSeed(20261203, 3, 5, 0));
}

TEST(SplitMix64Test, IsAStandardBitGeneratorOfTheSameStream) {
  static_assert(std::uniform_random_bit_generator<SplitMix64>);
  SplitMix64 engine(20261205);
  SplitMixRng rng(20261205);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(engine(), rng.Next());
}

TEST(SeededRngTest, SameSeedSameSequenceDifferentSeedDifferentSequence) {
  SeededRng a(7), b(7), c(8);
  std::vector<uint64_t> va, vb, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a.UniformIndex(1000));
    vb.push_back(b.UniformIndex(1000));
    vc.push_back(c.UniformIndex(1000));
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
}

TEST(SeededRngTest, UniformIndexStaysInRangeAndIsBalanced) {
  SeededRng rng(1);
  std::vector<int> counts(3, 0);
  constexpr int kDraws = 30000;
  for (int i = 0; i < kDraws; ++i) ++counts[rng.UniformIndex(3)];
  for (int c : counts) EXPECT_NEAR(c, kDraws / 3, 400);  // sd ≈ 82
  // A bound just above 2^63 rejects almost half the raw outputs; results must stay below it.
  const uint64_t big = (uint64_t{1} << 63) + 1;
  for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.UniformIndex(big), big);
  EXPECT_EQ(rng.UniformIndex(1), 0u);
  EXPECT_THROW(rng.UniformIndex(0), std::invalid_argument);
}

TEST(SeededRngTest, UniformAndNormalHaveTheRightMoments) {
  SeededRng rng(99);
  constexpr int kDraws = 100000;
  double usum = 0.0, nsum = 0.0, nsq = 0.0;
  for (int i = 0; i < kDraws; ++i) {
    double u = rng.Uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    usum += u;
    double z = rng.Normal();
    nsum += z;
    nsq += z * z;
  }
  EXPECT_NEAR(usum / kDraws, 0.5, 0.005);
  EXPECT_NEAR(nsum / kDraws, 0.0, 0.015);
  EXPECT_NEAR(nsq / kDraws, 1.0, 0.02);
}

TEST(RngTest, UniformIntCoversBothEndsAndRejectsAnEmptyRange) {
  SplitMixRng rng(4);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 5000; ++i) {
    const int64_t v = rng.UniformInt(-2, 2);
    ASSERT_GE(v, -2);
    ASSERT_LE(v, 2);
    ++counts[static_cast<size_t>(v + 2)];
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);  // sd ≈ 28
  EXPECT_EQ(rng.UniformInt(7, 7), 7);
  // The full 64-bit range has no UniformIndex bound; it is the raw output.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  SplitMixRng a(9), b(9);
  EXPECT_EQ(a.UniformInt(kMin, kMax), static_cast<int64_t>(kMin + b.Next()));
  EXPECT_THROW(rng.UniformInt(3, 2), std::invalid_argument);
  // Same formula as before the draw moved here: lo + UniformIndex(hi - lo + 1).
  SeededRng c(11), d(11);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(c.UniformInt(1, 50000), 1 + static_cast<int64_t>(d.UniformIndex(50000)));
}

// Sample mean and coefficient of variation of n draws.
template <class Draw>
std::pair<double, double> MeanAndCv(int n, Draw draw) {
  double sum = 0.0, sq = 0.0;
  for (int i = 0; i < n; ++i) {
    const double x = draw();
    EXPECT_GE(x, 0.0);
    sum += x;
    sq += x * x;
  }
  const double mean = sum / n;
  const double var = (sq - n * mean * mean) / (n - 1);
  return {mean, std::sqrt(var) / mean};
}

TEST(SplitMixRngTest, ExponentialHasMeanOneOverRateAndUnitCv) {
  SplitMixRng rng(21);
  auto [mean, cv] = MeanAndCv(100000, [&] { return rng.Exponential(4.0); });
  EXPECT_NEAR(mean, 0.25, 0.25 * 0.015);  // se of the mean ≈ 0.3%
  EXPECT_NEAR(cv, 1.0, 0.02);
  EXPECT_THROW(rng.Exponential(0.0), std::invalid_argument);
  EXPECT_THROW(rng.Exponential(std::numeric_limits<double>::infinity()), std::invalid_argument);
}

TEST(SplitMixRngTest, GammaHasMeanShapeTimesScaleAndCvOneOverSqrtShape) {
  SplitMixRng rng(22);
  for (double shape : {0.25, 1.0, 4.0, 30.0}) {
    auto [mean, cv] = MeanAndCv(100000, [&] { return rng.Gamma(shape, 2.0); });
    // se of the mean is cv / sqrt(n) of it: at most 0.7% (shape 0.25).
    EXPECT_NEAR(mean, 2.0 * shape, 2.0 * shape * 0.03) << "shape " << shape;
    EXPECT_NEAR(cv, 1.0 / std::sqrt(shape), 0.05 / std::sqrt(shape)) << "shape " << shape;
  }
  EXPECT_THROW(rng.Gamma(0.0, 1.0), std::invalid_argument);
  EXPECT_THROW(rng.Gamma(1.0, -1.0), std::invalid_argument);
  EXPECT_THROW(rng.Gamma(std::nan(""), 1.0), std::invalid_argument);
}

}  // namespace
}  // namespace kvgate::stats
