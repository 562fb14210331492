#include "readkv/codec/codebook.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Boundaries of the depth-t nodes: the sorted thresholds of depths 1..t, padded with +-inf, so
// node i of depth t is (b[i], b[i + 1]). Independent of the tree's Encode.
std::vector<double> NodeBounds(const LloydTree& tree, int depth) {
  std::vector<double> b = {-kInf};
  for (int s = 1; s <= depth; ++s) {
    for (float x : tree.thresholds(s)) b.push_back(x);
  }
  std::sort(b.begin() + 1, b.end());
  b.push_back(kInf);
  return b;
}

double Pdf(double x) {
  return std::isinf(x) ? 0.0 : std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}
double Cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

TEST(CodebookTest, DepthZeroAndOneMatchClosedForms) {
  LloydTree tree(8);
  EXPECT_EQ(tree.distortion(0), 1.0);
  EXPECT_EQ(tree.centroids(0)[0], 0.0f);
  EXPECT_NEAR(tree.distortion(1), 1.0 - 2.0 / std::numbers::pi, 1e-12);
  const double c1 = std::sqrt(2.0 / std::numbers::pi);
  ASSERT_EQ(tree.centroids(1).size(), 2u);
  EXPECT_NEAR(tree.centroids(1)[0], -c1, 1e-7);
  EXPECT_NEAR(tree.centroids(1)[1], c1, 1e-7);
  EXPECT_EQ(tree.thresholds(1)[0], 0.0f);
  EXPECT_EQ(tree.Decode(0, 0), 0.0f);
}

TEST(CodebookTest, DepthTwoIsTheFourLevelLloydMaxQuantizer) {
  LloydTree tree(4);
  const auto t2 = tree.thresholds(2);
  const auto c2 = tree.centroids(2);
  EXPECT_NEAR(t2[0], -0.9816, 1e-4);
  EXPECT_NEAR(t2[1], 0.9816, 1e-4);
  EXPECT_NEAR(c2[0], -1.5104, 1e-4);
  EXPECT_NEAR(c2[1], -0.4528, 1e-4);
  EXPECT_NEAR(c2[2], 0.4528, 1e-4);
  EXPECT_NEAR(c2[3], 1.5104, 1e-4);
  EXPECT_NEAR(tree.distortion(2), 0.1175, 1e-4);  // Max (1960), N = 4
}

TEST(CodebookTest, EveryThresholdSatisfiesTheTwoCellLloydCondition) {
  // tau of node i at depth t-1 = midpoint of its children's centroids at depth t.
  LloydTree tree(8);
  for (int t = 1; t <= 8; ++t) {
    const auto tau = tree.thresholds(t);
    const auto c = tree.centroids(t);
    for (size_t i = 0; i < tau.size(); ++i) {
      EXPECT_NEAR(tau[i], 0.5 * (c[2 * i] + c[2 * i + 1]), 2e-6) << "depth " << t << " node " << i;
    }
  }
}

TEST(CodebookTest, CentroidsAreConditionalMeansOfTheirNodes) {
  // E[Z | a<Z<b] from the float bounds, computed here with the plain CDF difference.
  LloydTree tree(8);
  for (int t = 1; t <= 6; ++t) {
    const auto b = NodeBounds(tree, t);
    const auto c = tree.centroids(t);
    for (size_t i = 0; i < c.size(); ++i) {
      const double mean = (Pdf(b[i]) - Pdf(b[i + 1])) / (Cdf(b[i + 1]) - Cdf(b[i]));
      EXPECT_NEAR(c[i], mean, 1e-5) << "depth " << t << " node " << i;
    }
  }
}

TEST(CodebookTest, CentroidOfEachNodeLiesInsideIt) {
  LloydTree tree(8);
  for (int t = 1; t <= 8; ++t) {
    const auto b = NodeBounds(tree, t);
    const auto c = tree.centroids(t);
    ASSERT_EQ(b.size(), c.size() + 1);
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_LT(b[i], c[i]) << "depth " << t << " node " << i;
      EXPECT_LT(c[i], b[i + 1]) << "depth " << t << " node " << i;
    }
  }
}

TEST(CodebookTest, TreeIsAntisymmetric) {
  LloydTree tree(8);
  for (int t = 1; t <= 8; ++t) {
    const auto c = tree.centroids(t);
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], -c[c.size() - 1 - i]);
    const auto tau = tree.thresholds(t);
    for (size_t i = 0; i < tau.size(); ++i) EXPECT_EQ(tau[i], -tau[tau.size() - 1 - i]);
  }
}

TEST(CodebookTest, DistortionDecreasesStrictlyWithStrictlyDecreasingIncrements) {
  for (int w = 1; w <= kMaxStoreBits; ++w) {
    LloydTree tree(w);
    ASSERT_EQ(tree.distortions().size(), static_cast<size_t>(w) + 1);
    for (int t = 1; t <= w; ++t) {
      EXPECT_LT(tree.distortion(t), tree.distortion(t - 1)) << "W=" << w << " t=" << t;
      EXPECT_GT(tree.distortion(t), 0.0);
      if (t >= 2) {
        EXPECT_LT(tree.distortion(t - 1) - tree.distortion(t),
                  tree.distortion(t - 2) - tree.distortion(t - 1))
            << "W=" << w << " t=" << t;
      }
    }
  }
}

TEST(CodebookTest, DistortionEqualsPiecewiseIntegralOverTheFloatTables) {
  // D(t) = sum over nodes of int_a^b (z - c)^2 phi(z) dz, with
  // int z^2 phi = P + a phi(a) - b phi(b) and int z phi = phi(a) - phi(b).
  LloydTree tree(8);
  for (int t = 1; t <= 8; ++t) {
    const auto b = NodeBounds(tree, t);
    const auto c = tree.centroids(t);
    double d = 0.0;
    for (size_t i = 0; i < c.size(); ++i) {
      const double lo = b[i], hi = b[i + 1];
      const double p = Cdf(hi) - Cdf(lo);
      const double m1 = Pdf(lo) - Pdf(hi);
      const double m2 =
          p + (std::isinf(lo) ? 0.0 : lo * Pdf(lo)) - (std::isinf(hi) ? 0.0 : hi * Pdf(hi));
      d += m2 - 2.0 * c[i] * m1 + static_cast<double>(c[i]) * c[i] * p;
    }
    EXPECT_NEAR(d, tree.distortion(t), 1e-9 + 1e-6 * tree.distortion(t)) << "t=" << t;
  }
}

TEST(CodebookTest, DistortionMatchesMonteCarlo) {
  LloydTree tree(8);
  constexpr int kSamples = 200000;
  SplitMixRng rng(20261008);
  std::vector<double> sum(9, 0.0), sum_sq(9, 0.0);
  for (int n = 0; n < kSamples; ++n) {
    const float z = static_cast<float>(rng.Normal());
    const uint8_t code = tree.Encode(z);
    for (int t = 0; t <= 8; ++t) {
      const double e = static_cast<double>(z) - tree.Decode(code, t);
      sum[static_cast<size_t>(t)] += e * e;
      sum_sq[static_cast<size_t>(t)] += e * e * e * e;
    }
  }
  for (int t = 0; t <= 8; ++t) {
    const double mc = sum[static_cast<size_t>(t)] / kSamples;
    // Deep levels are dominated by a few tail samples (the standard error reaches ~6% at t = 8
    // with 2e5 samples; 2e7 samples agree to 0.4%), so the bound is 4 standard errors.
    const double variance = sum_sq[static_cast<size_t>(t)] / kSamples - mc * mc;
    const double standard_error = std::sqrt(variance / kSamples);
    EXPECT_NEAR(mc, tree.distortion(t), 4.0 * standard_error) << "t=" << t;
    EXPECT_LT(standard_error, 0.1 * tree.distortion(t)) << "t=" << t;  // the check has teeth
  }
}

TEST(CodebookTest, ValueInsideALeafDecodesToThatLeafsCentroid) {
  for (int w : {1, 3, 8}) {
    LloydTree tree(w);
    const auto b = NodeBounds(tree, w);
    const auto c = tree.centroids(w);
    for (size_t leaf = 0; leaf < c.size(); ++leaf) {
      std::vector<float> inside = {c[leaf]};
      if (!std::isinf(b[leaf])) inside.push_back(static_cast<float>(b[leaf]));  // z == tau: right
      if (!std::isinf(b[leaf]) && !std::isinf(b[leaf + 1])) {
        inside.push_back(static_cast<float>(0.5 * (b[leaf] + b[leaf + 1])));
        inside.push_back(std::nextafter(static_cast<float>(b[leaf + 1]), -INFINITY));
      }
      for (float z : inside) {
        const uint8_t code = tree.Encode(z);
        EXPECT_EQ(code, leaf) << "W=" << w << " z=" << z;
        EXPECT_EQ(tree.Decode(code, w), c[leaf]);
      }
    }
  }
}

TEST(CodebookTest, DepthPrefixDecodesToTheDepthNodeContainingZ) {
  LloydTree tree(8);
  std::vector<std::vector<double>> bounds;
  for (int t = 0; t <= 8; ++t) bounds.push_back(NodeBounds(tree, t));
  SplitMixRng rng(5);
  for (int n = 0; n < 3000; ++n) {
    const float z = static_cast<float>(rng.Normal() * 1.5);
    const uint8_t code = tree.Encode(z);
    for (int t = 1; t <= 8; ++t) {
      const auto& b = bounds[static_cast<size_t>(t)];
      size_t node = 0;
      while (!(z >= b[node] && z < b[node + 1])) ++node;
      EXPECT_EQ(code >> (8 - t), node) << "z=" << z << " t=" << t;
      EXPECT_EQ(tree.Decode(code, t), tree.centroids(t)[node]);
    }
  }
}

TEST(CodebookTest, SpecialInputsEncodeAsDocumented) {
  LloydTree tree(8);
  EXPECT_EQ(tree.Encode(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(tree.Encode(-std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(tree.Encode(INFINITY), 255);
  EXPECT_EQ(tree.Encode(-INFINITY), 0);
  EXPECT_EQ(tree.Encode(0.0f), 128);  // bit 1 iff z >= tau, and the root tau is 0
  EXPECT_EQ(tree.Encode(-0.0f), 128);
  EXPECT_EQ(tree.Encode(-1e-30f), 127);
}

TEST(CodebookTest, SmallerTreesArePrefixesOfLargerOnes) {
  // Holds by construction: every node is solved from its own interval only, independent of W.
  LloydTree big(8);
  SplitMixRng rng(17);
  for (int w = 1; w < 8; ++w) {
    LloydTree small(w);
    for (int t = 1; t <= w; ++t) {
      const auto a = small.thresholds(t), b = big.thresholds(t);
      ASSERT_EQ(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()));
    }
    for (int t = 0; t <= w; ++t) {
      const auto a = small.centroids(t), b = big.centroids(t);
      ASSERT_EQ(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()));
      EXPECT_EQ(small.distortion(t), big.distortion(t));
    }
    for (int n = 0; n < 1000; ++n) {
      const float z = static_cast<float>(rng.Normal() * 2.0);
      EXPECT_EQ(small.Encode(z), big.Encode(z) >> (8 - w)) << "W=" << w << " z=" << z;
    }
  }
}

TEST(CodebookTest, DigestIsStableAndCoversTheTables) {
  LloydTree a(8), b(8), c(4);
  EXPECT_EQ(a.digest(), b.digest());
  EXPECT_NE(a.digest(), c.digest());
  EXPECT_EQ(a.digest().size(), 32u);
  // Frozen codebook: if this changes, the tables changed and kCodebookVersion must be bumped.
  EXPECT_EQ(a.digest(), "c1bce53ba4154d255e4757e8a776ebd7");
}

TEST(CodebookTest, RejectsStoreBitsOutsideOneToEight) {
  for (int w : {0, -1, 9}) {
    try {
      LloydTree tree(w);
      ADD_FAILURE() << "accepted W=" << w;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "store_bits");
    }
  }
  LloydTree tree(3);
  EXPECT_THROW(tree.thresholds(0), InvalidArgument);
  EXPECT_THROW(tree.thresholds(4), InvalidArgument);
  EXPECT_THROW(tree.centroids(-1), InvalidArgument);
}

}  // namespace
}  // namespace readkv::codec
