#include "chunk_times.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace kvgate::history::chunk_times {
namespace {

TEST(ChunkTimesTest, RoundTripsAnyInt64SequenceExactly) {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> cases = {
      {},
      {0},
      {-1},
      {5'000'000, 6'000'000, 6'000'001, 90'000'000'000},
      {kMax, kMin, 0, kMax, -5, kMin},  // deltas that wrap around 2^64
      {100, 50, 25, 0, -25},            // decreasing
  };
  for (const auto& times : cases) {
    auto decoded = Decode(Encode(times));
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(*decoded, times);
  }
}

TEST(ChunkTimesTest, TokenGapsOfMillisecondsCostAboutThreeBytes) {
  std::vector<int64_t> times;
  for (int i = 0; i < 1000; ++i) times.push_back(2'000'000'000 + int64_t{i} * 1'000'000);
  EXPECT_LE(Encode(times).size(), 1 + 5 + 3 * 999u);  // first absolute time, then 1 ms gaps
}

TEST(ChunkTimesTest, RejectsMalformedBytes) {
  EXPECT_FALSE(Decode(std::vector<uint8_t>{}).has_value());
  EXPECT_FALSE(Decode(std::vector<uint8_t>{0x02, 0x00}).has_value());  // unknown format
  EXPECT_FALSE(Decode(std::vector<uint8_t>{0x01, 0x80}).has_value());  // truncated varint
  std::vector<uint8_t> too_long = {0x01};
  for (int i = 0; i < 10; ++i) too_long.push_back(0xff);
  too_long.push_back(0x01);
  EXPECT_FALSE(Decode(too_long).has_value());                   // more than 64 bits
  EXPECT_TRUE(Decode(std::vector<uint8_t>{0x01}).has_value());  // no chunks
}

}  // namespace
}  // namespace kvgate::history::chunk_times
