#include "readkv/codec/key_bytes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "readkv/codec/outliers.h"

namespace readkv::codec {
namespace {

TEST(KeyBytesTest, EveryCodeReadsBackAtItsCellsMidpointExactlyInHalf) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float value = KeyByteValue(code);
    EXPECT_EQ(value * 64.0f, static_cast<float>(2 * c - 255)) << c;  // odd sixty-fourths
    EXPECT_EQ(HalfToFloat(FloatToHalf(value)), value) << c;  // the GPU's f16 operand, exact
    EXPECT_EQ(EncodeKeyByte(value), code) << c;              // the midpoint is in its own cell
    if (c > 0) {
      EXPECT_EQ(value - KeyByteValue(static_cast<uint8_t>(c - 1)), 1.0f / 32) << c;
    }
  }
  EXPECT_EQ(KeyByteValue(255), kKeyByteOutermost);
  EXPECT_EQ(KeyByteValue(0), -kKeyByteOutermost);
}

TEST(KeyBytesTest, InsideTheGridTheErrorIsAtMostHalfACell) {
  for (int i = -4000; i < 4000; ++i) {
    const float z = static_cast<float>(i) / 1000.0f;
    EXPECT_LE(std::fabs(KeyByteValue(EncodeKeyByte(z)) - z), 1.0f / 64 + 1e-6f) << z;
  }
  // Cell edges belong to the cell above them: floor(32 z) + 128.
  EXPECT_EQ(EncodeKeyByte(0.0f), 128);
  EXPECT_EQ(EncodeKeyByte(-1.0f / 32), 127);
  EXPECT_EQ(EncodeKeyByte(1.0f / 32), 129);
}

TEST(KeyBytesTest, PastTheGridTheExtremeCodesAndTheListsCorrectByTheSign) {
  EXPECT_EQ(EncodeKeyByte(4.0f), 255);
  EXPECT_EQ(EncodeKeyByte(10.0f), 255);
  EXPECT_EQ(EncodeKeyByte(-4.0f), 0);
  EXPECT_EQ(EncodeKeyByte(-10.0f), 0);
  EXPECT_EQ(EncodeKeyByte(std::numeric_limits<float>::infinity()), 255);
  EXPECT_EQ(EncodeKeyByte(std::numeric_limits<float>::quiet_NaN()), 0);  // as LloydTree::Encode
  // Every z the lists can hold (|z| past the W = 8 tree's outermost threshold, 3.99) has an
  // extreme code, so the correction restores fp16(z) from the code's value exactly.
  EXPECT_EQ(EncodeKeyByte(3.97f), 255);
  EXPECT_EQ(EncodeKeyByte(-3.97f), 0);
  for (const float z : {3.995f, 4.5f, 10.0f, 100.0f, -3.995f, -4.5f, -10.0f, -100.0f}) {
    const uint16_t half = FloatToHalf(z);
    const float restored = KeyByteValue(EncodeKeyByte(z)) + ByteKeyOutlierCorrection(half);
    EXPECT_NEAR(restored, HalfToFloat(half), 1e-6f * std::fabs(z)) << z;
  }
}

}  // namespace
}  // namespace readkv::codec
