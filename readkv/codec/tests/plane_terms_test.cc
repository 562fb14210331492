// Plane terms (plane_terms.h): the sign expansion reproduces every centroid of the tree at every
// depth, keeps only odd terms, and the popcount logit equals the quantised query's float dot
// product with the centroids.
#include "readkv/codec/plane_terms.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

TEST(PlaneTermsTest, TheExpansionIsEveryCentroidWithOddTermsOnly) {
  const LloydTree tree(8);
  for (int t = 1; t <= 8; ++t) {
    SCOPED_TRACE("depth " + std::to_string(t));
    const std::vector<double> a = PlaneTermCoefficients(tree, t);
    ASSERT_EQ(a.size(), size_t{1} << t);
    int terms = 0;
    for (unsigned mask = 0; mask < a.size(); ++mask) {
      if (std::popcount(mask) % 2 == 0) {
        EXPECT_EQ(a[mask], 0.0) << "mask " << mask;
      } else {
        terms += a[mask] != 0.0;
      }
    }
    EXPECT_EQ(terms, 1 << (t - 1));  // every odd term carries weight
    for (int code = 0; code < 256; ++code) {
      const double want = tree.Decode(static_cast<uint8_t>(code), t);
      EXPECT_NEAR(EvaluatePlaneTerms(a, 8, t, static_cast<uint8_t>(code)), want,
                  1e-12 * (1.0 + std::fabs(want)))
          << "code " << code;
    }
  }
  // Depth 1 is the sign trick's one term, +-C_1.
  const std::vector<double> a1 = PlaneTermCoefficients(tree, 1);
  EXPECT_DOUBLE_EQ(a1[1], tree.centroids(1)[1]);
  EXPECT_THROW(PlaneTermCoefficients(tree, 0), InvalidArgument);
  EXPECT_THROW(PlaneTermCoefficients(tree, 9), InvalidArgument);
}

TEST(PlaneTermsTest, ThePopcountLogitIsTheQuantisedQueryDotTheCentroids) {
  const LloydTree tree(8);
  kvgate::stats::SplitMixRng rng(20261205);
  for (int d : {64, 100, 128}) {  // 100: a last word only partly used
    std::vector<float> q(static_cast<size_t>(d));
    std::vector<uint8_t> codes(static_cast<size_t>(d));
    for (int trial = 0; trial < 4; ++trial) {
      for (float& x : q) x = static_cast<float>(rng.Normal());
      for (uint8_t& c : codes) c = tree.Encode(static_cast<float>(rng.Normal()));
      const QuantizedQuery qq = QuantizeQuery(q);
      for (int t = 1; t <= 8; ++t) {
        const std::vector<double> a = PlaneTermCoefficients(tree, t);
        double want = 0.0, exact = 0.0, bound = 0.0;
        for (int c = 0; c < d; ++c) {
          const double k = tree.Decode(codes[static_cast<size_t>(c)], t);
          want += qq.Value(static_cast<size_t>(c)) * k;
          exact += static_cast<double>(q[static_cast<size_t>(c)]) * k;
          bound += 0.5 * qq.scale * std::fabs(k);  // rounding q costs at most scale / 2 each
        }
        const double got = PlaneTermLogit(a, 8, qq, codes);
        EXPECT_NEAR(got, want, 1e-9 * (1.0 + std::fabs(want))) << "d " << d << " depth " << t;
        EXPECT_LE(std::fabs(got - exact), bound + 1e-9) << "d " << d << " depth " << t;
      }
    }
  }
  const QuantizedQuery zero = QuantizeQuery(std::vector<float>(8, 0.0f));
  EXPECT_EQ(zero.scale, 1.0);
  const std::vector<double> a3 = PlaneTermCoefficients(tree, 3);
  EXPECT_EQ(PlaneTermLogit(a3, 8, zero, std::vector<uint8_t>(8, 255)), 0.0);
  EXPECT_THROW(PlaneTermLogit(a3, 8, zero, std::vector<uint8_t>(7, 0)), InvalidArgument);
  EXPECT_THROW(PlaneTermLogit(std::vector<double>(6, 0.0), 8, zero, std::vector<uint8_t>(8, 0)),
               InvalidArgument);  // not 2^t coefficients
  EXPECT_THROW(PlaneTermLogit(a3, 2, zero, std::vector<uint8_t>(8, 0)), InvalidArgument);
}

}  // namespace
}  // namespace readkv::codec
