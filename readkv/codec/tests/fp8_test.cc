#include "readkv/codec/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

// The e4m3fn value of a code from its fields, written independently of the codec:
// sign s, exponent e (bias 7), mantissa m; e == 0 is subnormal m * 2^-9; S.1111.111 is NaN.
double ExpectedValue(int code) {
  const int s = code >> 7;
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s != 0 ? -magnitude : magnitude;
}

bool IsNanCode(int code) { return (code & 0x7F) == 0x7F; }

// Round-to-nearest-even by brute force over all finite codes of the same sign.
uint8_t BruteForceEncode(float x) {
  if (std::isnan(x)) return 0x7F;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return static_cast<uint8_t>(sign | 0x7E);
  int best = 0;
  double best_err = kFp8E4m3Max;
  for (int c = 0; c <= 0x7E; ++c) {
    const double err = std::fabs(ExpectedValue(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8Test, DecodeMatchesTheE4m3fnTableForAll256Codes) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float got = Fp8E4m3Decode(static_cast<uint8_t>(c));
    const double want = ExpectedValue(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 0x80) << "code " << c;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(Fp8E4m3Decode(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4m3Decode(0xFE), -448.0f);
  EXPECT_EQ(Fp8E4m3Decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4m3Decode(0x08), std::ldexp(1.0f, -6));
}

TEST(Fp8Test, EncodeOfEveryDecodedCodeReturnsThatCode) {
  for (int c = 0; c < 256; ++c) {
    if (IsNanCode(c)) continue;
    const float v = Fp8E4m3Decode(static_cast<uint8_t>(c));
    EXPECT_EQ(Fp8E4m3Encode(v), c) << "code " << c;  // includes -0 -> 0x80
    EXPECT_EQ(Fp8E4m3Decode(Fp8E4m3Encode(v)), v);
  }
  EXPECT_EQ(Fp8E4m3Encode(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(Fp8E4m3Decode(Fp8E4m3Encode(-0.0f))));
}

TEST(Fp8Test, TiesRoundToEvenAndOffTiesRoundToNearest) {
  for (int c = 0; c < 0x7E; ++c) {
    for (int sign : {0, 0x80}) {
      const float lo = Fp8E4m3Decode(static_cast<uint8_t>(sign | c));
      const float hi = Fp8E4m3Decode(static_cast<uint8_t>(sign | (c + 1)));
      const float mid = 0.5f * (lo + hi);  // exact: both have few mantissa bits
      ASSERT_EQ(static_cast<double>(mid), 0.5 * (static_cast<double>(lo) + hi));
      const int even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(Fp8E4m3Encode(mid), sign | even) << "between codes " << c << " and " << c + 1;
      EXPECT_EQ(Fp8E4m3Encode(std::nextafter(mid, lo)), sign | c);
      EXPECT_EQ(Fp8E4m3Encode(std::nextafter(mid, hi)), sign | (c + 1));
    }
  }
}

TEST(Fp8Test, SubnormalsRoundToNearestEven) {
  const float unit = std::ldexp(1.0f, -9);
  EXPECT_EQ(Fp8E4m3Encode(unit), 0x01);
  EXPECT_EQ(Fp8E4m3Encode(0.5f * unit), 0x00);  // tie between 0 and 1: even
  EXPECT_EQ(Fp8E4m3Encode(1.5f * unit), 0x02);  // tie between 1 and 2: even
  EXPECT_EQ(Fp8E4m3Encode(2.5f * unit), 0x02);
  EXPECT_EQ(Fp8E4m3Encode(7.5f * unit), 0x08);  // tie between 7 * 2^-9 and 2^-6: even (8)
  EXPECT_EQ(Fp8E4m3Encode(0.51f * unit), 0x01);
  EXPECT_EQ(Fp8E4m3Encode(0.49f * unit), 0x00);
  EXPECT_EQ(Fp8E4m3Encode(-0.6f * unit), 0x81);
  EXPECT_EQ(Fp8E4m3Encode(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(Fp8E4m3Encode(-std::numeric_limits<float>::denorm_min()), 0x80);
}

TEST(Fp8Test, SaturatesBeyond448AndEncodesNanAs0x7F) {
  for (float x : {448.0f, 449.0f, 463.9f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(),
                  INFINITY}) {
    EXPECT_EQ(Fp8E4m3Encode(x), 0x7E) << x;
    EXPECT_EQ(Fp8E4m3Encode(-x), 0xFE) << -x;
  }
  EXPECT_EQ(Fp8E4m3Encode(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(Fp8E4m3Encode(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_TRUE(std::isnan(Fp8E4m3Decode(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8E4m3Decode(0xFF)));
  EXPECT_EQ(Fp8E4m3Encode(432.0f), 0x7E);  // tie between 416 (0x7D) and 448 (0x7E): even
  EXPECT_EQ(Fp8E4m3Encode(431.0f), 0x7D);
}

TEST(Fp8Test, EncodeAgreesWithBruteForceNearestEvenOnSampledFloats) {
  SplitMixRng rng(8);
  for (int n = 0; n < 20000; ++n) {
    // Magnitudes spread over 2^-14 .. 2^10 so subnormal, normal and saturated ranges all occur.
    const float x = static_cast<float>((rng.Uniform01() - 0.5) * std::ldexp(1.0, -14 + n % 25));
    ASSERT_EQ(Fp8E4m3Encode(x), BruteForceEncode(x)) << x;
  }
  for (uint32_t bits = 0; bits < 0xFFFFFFFFu - 65599u; bits += 65599u) {
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(Fp8E4m3Encode(x), BruteForceEncode(x)) << x;
  }
}

TEST(Fp8Test, ScaleIsAmaxOver448) {
  EXPECT_EQ(Fp8ScaleFromAmax(448.0f), 1.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(896.0f), 2.0f);
  EXPECT_FLOAT_EQ(Fp8ScaleFromAmax(3.5f), 3.5f / 448.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(0.0f), 1.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(-2.0f), 1.0f);
  try {
    Fp8ScaleFromAmax(std::numeric_limits<float>::quiet_NaN());
    ADD_FAILURE() << "NaN amax accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "amax");
  }
  // The largest calibration magnitude maps to the largest code.
  const float amax = 3.7f;
  EXPECT_EQ(Fp8E4m3Encode(amax / Fp8ScaleFromAmax(amax)), 0x7E);
}

}  // namespace
}  // namespace readkv::codec
