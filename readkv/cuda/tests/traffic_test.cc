// The Logits reader choice (ReadKvUsesMmaLogits) and the traffic model that follows it: host code
// shared by the launcher, the bench and the CUDA KV backend, so it is pinned in every build.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "readkv/cuda/decode_attention.h"

namespace readkv::cuda {
namespace {

// Sets KVGATE_READKV_LOGITS for one scope (nullptr: unset), restoring it after.
class LogitsEnv {
 public:
  explicit LogitsEnv(const char* value) {
    const char* old = std::getenv("KVGATE_READKV_LOGITS");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value == nullptr) {
      unsetenv("KVGATE_READKV_LOGITS");
    } else {
      setenv("KVGATE_READKV_LOGITS", value, 1);
    }
  }
  ~LogitsEnv() {
    if (had_) {
      setenv("KVGATE_READKV_LOGITS", old_.c_str(), 1);
    } else {
      unsetenv("KVGATE_READKV_LOGITS");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(ReadKvLogitsReaderTest, TensorCoresUpToTwoKeyBitsUnlessTheEnvironmentPicks) {
  {
    const LogitsEnv env(nullptr);
    EXPECT_TRUE(ReadKvUsesMmaLogits(1.0));
    EXPECT_TRUE(ReadKvUsesMmaLogits(2.0));
    EXPECT_FALSE(ReadKvUsesMmaLogits(2.5));
    EXPECT_FALSE(ReadKvUsesMmaLogits(7.0));
  }
  {
    const LogitsEnv env("mma");
    EXPECT_TRUE(ReadKvUsesMmaLogits(7.0));
  }
  {
    const LogitsEnv env("wide4");
    EXPECT_FALSE(ReadKvUsesMmaLogits(2.0));
  }
}

TEST(ReadKvLogitsReaderTest, TrafficCountsWhatEachReaderReadsPerChunk) {
  const LogitsEnv env(nullptr);
  DecodeShape shape;
  shape.batch = 2;
  shape.heads_q = 32;
  shape.heads_kv = 8;
  shape.head_dim = 128;
  shape.max_tokens = 8192;
  shape.max_pages = 32;
  shape.chunk_tokens = 1024;
  const std::vector<int32_t> lens = {8192, 3000};  // 8 and 3 chunks
  const TrafficBytes mma = ReadKvDecodeTraffic(shape, lens.data(), 8, 2.0, nullptr, nullptr);
  const TrafficBytes wide = ReadKvDecodeTraffic(shape, lens.data(), 8, 4.0, nullptr, nullptr);
  // Per row and chunk, the transposed reader copies the row's entry list (2696 bytes) and the
  // tensor-core one reads the row's d Key depths; nothing else differs.
  const int64_t row_chunks = int64_t{8} * (8 + 3);
  EXPECT_EQ(wide.schedule - mma.schedule, row_chunks * (2696 - 128));
  EXPECT_EQ(wide.Total() - mma.Total(), wide.schedule - mma.schedule);
  EXPECT_EQ(wide.payload, 0);  // no depths given: the payload is the device's to sum
}

}  // namespace
}  // namespace readkv::cuda
