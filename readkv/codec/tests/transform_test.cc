#include "readkv/codec/transform.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

std::vector<float> RandomVector(int d, uint64_t seed) {
  SplitMixRng rng(seed);
  std::vector<float> v(static_cast<size_t>(d));
  for (float& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(TransformTest, FwhtMatchesSylvesterMatrix) {
  for (int n : {1, 2, 8, 32}) {
    std::vector<double> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 0.5 * i - 3.0 + (i % 3);
    std::vector<double> expected(static_cast<size_t>(n), 0.0);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        const double h = std::popcount(static_cast<unsigned>(i & j)) % 2 == 0 ? 1.0 : -1.0;
        expected[static_cast<size_t>(i)] += h * x[static_cast<size_t>(j)];
      }
    }
    std::vector<double> got = x;
    Fwht(std::span<double>(got));
    std::vector<float> got_f(x.begin(), x.end());
    Fwht(std::span<float>(got_f));
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(got[static_cast<size_t>(i)], expected[static_cast<size_t>(i)], 1e-12) << n;
      EXPECT_NEAR(got_f[static_cast<size_t>(i)], expected[static_cast<size_t>(i)], 1e-4) << n;
    }
  }
}

TEST(TransformTest, ForwardMatchesDefinitionOnBasisVectors) {
  // Column j of (1/sqrt d) H diag(s) is s_j / sqrt(d) times column j of H.
  const int d = 16;
  HadamardTransform t(d, 42);
  for (int j = 0; j < d; ++j) {
    std::vector<float> e(d, 0.0f), out(d);
    e[static_cast<size_t>(j)] = 1.0f;
    t.Forward(e, out);
    for (int i = 0; i < d; ++i) {
      const double h = std::popcount(static_cast<unsigned>(i & j)) % 2 == 0 ? 1.0 : -1.0;
      EXPECT_NEAR(out[static_cast<size_t>(i)], t.signs()[static_cast<size_t>(j)] * h / 4.0, 1e-7);
    }
  }
}

TEST(TransformTest, PreservesInnerProductsAndNorms) {
  for (int d : {8, 64, 128, 256}) {
    HadamardTransform t(d, 0xabcdef + static_cast<uint64_t>(d));
    for (uint64_t trial = 0; trial < 20; ++trial) {
      const auto x = RandomVector(d, 1000 + trial);
      const auto y = RandomVector(d, 5000 + trial);
      std::vector<float> tx(static_cast<size_t>(d)), ty(static_cast<size_t>(d));
      t.Forward(x, tx);
      t.Forward(y, ty);
      const double scale = std::sqrt(Dot(x, x) * Dot(y, y));
      EXPECT_NEAR(Dot(tx, ty), Dot(x, y), 1e-5 * scale) << "d=" << d;
      EXPECT_NEAR(Dot(tx, tx), Dot(x, x), 1e-5 * Dot(x, x)) << "d=" << d;
      // The inverse is orthogonal too (used on the attention output).
      std::vector<float> ix(static_cast<size_t>(d)), iy(static_cast<size_t>(d));
      t.Inverse(x, ix);
      t.Inverse(y, iy);
      EXPECT_NEAR(Dot(ix, iy), Dot(x, y), 1e-5 * scale) << "d=" << d;
    }
  }
}

TEST(TransformTest, InverseUndoesForward) {
  for (int d : {8, 64, 128, 256}) {
    HadamardTransform t(d, 7);
    const auto x = RandomVector(d, 99);
    std::vector<float> y(static_cast<size_t>(d)), back(static_cast<size_t>(d));
    t.Forward(x, y);
    t.Inverse(y, back);
    for (int i = 0; i < d; ++i)
      EXPECT_NEAR(back[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 1e-5);
    t.Inverse(x, y);
    t.Forward(y, back);
    for (int i = 0; i < d; ++i)
      EXPECT_NEAR(back[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 1e-5);
  }
}

TEST(TransformTest, InPlaceAndOverlappingCallsMatchOutOfPlace) {
  const int d = 64;
  HadamardTransform t(d, 3);
  const auto x = RandomVector(d, 11);
  std::vector<float> expected(static_cast<size_t>(d));
  t.Forward(x, expected);
  std::vector<float> in_place = x;
  t.Forward(in_place, in_place);
  EXPECT_EQ(in_place, expected);
  // Partly overlapping ranges: the output starts 3 floats after the input.
  std::vector<float> buffer(static_cast<size_t>(d) + 3);
  std::copy(x.begin(), x.end(), buffer.begin());
  t.Forward(std::span<const float>(buffer.data(), d), std::span<float>(buffer.data() + 3, d));
  EXPECT_EQ(std::vector<float>(buffer.begin() + 3, buffer.end()), expected);

  std::vector<float> inv_expected(static_cast<size_t>(d));
  t.Inverse(x, inv_expected);
  std::vector<float> inv_in_place = x;
  t.Inverse(inv_in_place, inv_in_place);
  EXPECT_EQ(inv_in_place, inv_expected);
}

TEST(TransformTest, SignsComeFromSplitMixBitsLowBitFirst) {
  const uint64_t seed = 0x1234;
  HadamardTransform t(128, seed);
  SplitMixRng rng(seed);
  const uint64_t w0 = rng.Next();
  const uint64_t w1 = rng.Next();
  for (int i = 0; i < 128; ++i) {
    const uint64_t word = i < 64 ? w0 : w1;
    const int expected = ((word >> (i % 64)) & 1u) != 0 ? -1 : 1;
    EXPECT_EQ(t.signs()[static_cast<size_t>(i)], expected) << i;
  }
}

TEST(TransformTest, SameSeedGivesSameSignsAndDifferentSeedDifferentSigns) {
  HadamardTransform a(128, 77), b(128, 77), c(128, 78);
  EXPECT_EQ(a.signs(), b.signs());
  EXPECT_NE(a.signs(), c.signs());
  EXPECT_EQ(a.seed(), 77u);
  EXPECT_EQ(a.head_dim(), 128);
  int negatives = 0;
  for (int8_t s : a.signs()) negatives += s < 0 ? 1 : 0;
  EXPECT_GT(negatives, 32);  // a fair coin: 64 +- 6 expected
  EXPECT_LT(negatives, 96);
}

TEST(TransformTest, RejectsHeadDimThatIsNotAPowerOfTwoAtLeastEight) {
  for (int d : {0, -8, 4, 12, 96, 100}) {
    try {
      HadamardTransform t(d, 1);
      ADD_FAILURE() << "accepted d=" << d;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "head_dim");
    }
  }
  std::vector<float> six(6);
  EXPECT_THROW(Fwht(std::span<float>(six)), InvalidArgument);
}

TEST(TransformTest, RejectsWrongVectorSize) {
  HadamardTransform t(16, 1);
  std::vector<float> in(15), out(16);
  EXPECT_THROW(t.Forward(in, out), InvalidArgument);
  EXPECT_THROW(t.Inverse(out, in), InvalidArgument);
}

}  // namespace
}  // namespace readkv::codec
