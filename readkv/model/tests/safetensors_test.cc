#include "readkv/model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "readkv/model/errors.h"

namespace readkv::model {
namespace {

std::vector<uint8_t> Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> TwoTensorImage() {
  const auto a = Bytes({1.0f, -2.0f, 3.5f, 0.25f, 8.0f, -0.0f});
  std::vector<uint8_t> b(2 * 3);
  for (size_t i = 0; i < 3; ++i) {
    const uint16_t x = FloatToBf16(static_cast<float>(i) - 1.5f);
    std::memcpy(b.data() + 2 * i, &x, 2);
  }
  return SerializeSafetensors({{"a", TensorDType::kF32, {2, 3}, a}, {"b", TensorDType::kBF16, {3}, b}},
                              {{"producer", "test"}});
}

// Rewrites the header JSON of an image (keeping the data region).
std::vector<uint8_t> WithHeader(const std::vector<uint8_t>& image, const std::string& header) {
  uint64_t n = 0;
  std::memcpy(&n, image.data(), 8);
  const size_t data = image.size() - 8 - n;
  std::vector<uint8_t> out(8 + header.size() + data);
  const uint64_t m = header.size();
  std::memcpy(out.data(), &m, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::memcpy(out.data() + 8 + header.size(), image.data() + 8 + n, data);
  return out;
}

std::string ErrorName(const std::vector<uint8_t>& image) {
  try {
    SafetensorsFile::FromBytes(image);
  } catch (const ModelFormatError& e) {
    return e.what_failed();
  }
  return "<no error>";
}

TEST(SafetensorsTest, RoundTripKeepsNamesShapesDtypesDataAndMetadata) {
  const SafetensorsFile f = SafetensorsFile::FromBytes(TwoTensorImage());
  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorEntry* a = f.Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, TensorDType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> back(6);
  std::memcpy(back.data(), f.Data(*a).data(), 24);
  EXPECT_EQ(back, (std::vector<float>{1.0f, -2.0f, 3.5f, 0.25f, 8.0f, -0.0f}));
  const TensorEntry* b = f.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, TensorDType::kBF16);
  uint16_t x = 0;
  std::memcpy(&x, f.Data(*b).data() + 4, 2);
  EXPECT_EQ(Bf16ToFloat(x), 0.5f);
  EXPECT_EQ(f.metadata().at("producer"), "test");
  EXPECT_EQ(f.Find("missing"), nullptr);
  // The header is padded so the data region starts 8-byte aligned.
  uint64_t n = 0;
  std::memcpy(&n, f.bytes().data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(SafetensorsTest, TruncatedFilesAreRefusedNamingTheHeader) {
  const auto image = TwoTensorImage();
  EXPECT_EQ(ErrorName(std::vector<uint8_t>(image.begin(), image.begin() + 5)), "header");
  EXPECT_EQ(ErrorName(std::vector<uint8_t>(image.begin(), image.begin() + 20)), "header");
  // Data cut short: the tensor whose bytes are now outside the file is named.
  EXPECT_EQ(ErrorName(std::vector<uint8_t>(image.begin(), image.end() - 2)), "b");
  std::vector<uint8_t> huge = image;
  const uint64_t big = uint64_t{1} << 50;
  std::memcpy(huge.data(), &big, 8);
  EXPECT_EQ(ErrorName(huge), "header");
}

TEST(SafetensorsTest, MalformedEntriesNameTheTensor) {
  const auto image = TwoTensorImage();
  EXPECT_EQ(ErrorName(WithHeader(image, "{not json")), "header");
  EXPECT_EQ(ErrorName(WithHeader(image, R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})")),
            "w");
  EXPECT_EQ(
      ErrorName(WithHeader(image, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})")),
      "w");  // shape needs 8 bytes
  EXPECT_EQ(ErrorName(WithHeader(
                image, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})")),
            "v");  // overlaps w: the later tensor is named
  EXPECT_EQ(ErrorName(WithHeader(image, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})")),
            "w");
  // A nameless tensor cannot be named by its errors: the header is (found by the fuzzer, with
  // a bad entry that used to throw an error naming "").
  EXPECT_EQ(ErrorName(WithHeader(image, R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})")),
            "header");
  EXPECT_EQ(ErrorName(WithHeader(image, R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})")),
            "header");
}

TEST(SafetensorsTest, SerializeRefusesDataOfTheWrongSize) {
  const auto a = Bytes({1.0f, 2.0f});
  try {
    SerializeSafetensors({{"layer.weight", TensorDType::kF32, {3}, a}}, {});
    FAIL() << "no error";
  } catch (const ModelFormatError& e) {
    EXPECT_EQ(e.what_failed(), "layer.weight");
  }
}

TEST(SafetensorsTest, HalfPrecisionConversionsRoundToNearestEven) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-3.140625f)), -3.140625f);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  for (float x : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953f}) {
    EXPECT_EQ(F16ToFloat(FloatToF16(x)), x) << x;
  }
  EXPECT_EQ(F16ToFloat(FloatToF16(1.0f + 1.0f / 2048)), 1.0f);  // tie to even
}

}  // namespace
}  // namespace readkv::model
