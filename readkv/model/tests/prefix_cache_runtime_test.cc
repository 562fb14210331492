// The persistent prefix cache through the runtime (runtime.h, kvgate serve --cache-dir): a hit
// is bit-identical to a miss, objects of another identity are never read, and the options it
// needs are enforced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "readkv/model/runtime.h"
#include "runtime_test_support.h"

namespace readkv::model {
namespace {

using testing::ByteKeyOptions;
using testing::CompressedRuntimeTest;
using testing::MaxAbsDiff;
using testing::Step;
using testing::TempDir;

namespace fs = std::filesystem;

// A 552-token prompt (2 full prefix blocks + 39 tokens + the last) then 8 decode steps: every
// logit the engine would see.
std::vector<std::vector<float>> RunPrompt(LlamaDecodeModel& model, uint64_t id,
                                          const std::vector<int32_t>& prompt,
                                          const engine::ReadPolicy& policy = {}) {
  model.StartSequence(id, policy);
  std::vector<std::vector<float>> out;
  out.push_back(Step(model, id, std::span<const int32_t>(prompt).first(552)));
  for (size_t t = 552; t < prompt.size(); ++t) {
    out.push_back(Step(model, id, std::span<const int32_t>(&prompt[t], 1)));
  }
  model.EndSequence(id);
  return out;
}

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST_F(CompressedRuntimeTest, PrefixCacheHitsAreBitIdenticalToAFreshCache) {
  TempDir cache;
  RuntimeOptions o;
  o.kv.kind = codec::KvBackend::kReadKv;
  o.prefix_cache.directory = cache.path();
  std::vector<std::vector<float>> miss, hit, restarted;
  {
    LlamaDecodeModel model(dir_.path(), o);
    miss = RunPrompt(model, 1, prompt_);
    PrefixCacheCounters c = model.prefix_cache_counters();
    EXPECT_EQ(c.misses, 2);
    EXPECT_EQ(c.stored, 2);
    EXPECT_EQ(c.hits, 0);
    hit = RunPrompt(model, 2, prompt_);  // same server, next request
    EXPECT_EQ(model.prefix_cache_counters().hits, 2);
  }
  EXPECT_EQ(FilesIn(cache.path()), 2u);
  {
    LlamaDecodeModel model(dir_.path(), o);  // a restart on the same directory
    restarted = RunPrompt(model, 1, prompt_);
    EXPECT_EQ(model.prefix_cache_counters().hits, 2);
    EXPECT_EQ(model.prefix_cache_counters().stored, 0);
    EXPECT_TRUE(model.ledgers().cache_rejections.empty());
    // The same counts reach the ledgers (readkv_prefix_cache_objects_total).
    const auto objects = model.ledgers().prefix_cache_objects;
    EXPECT_EQ(objects.at("hit"), 2);
    EXPECT_EQ(objects.at("miss"), 0);
    EXPECT_EQ(objects.at("stored"), 0);
  }
  ASSERT_EQ(miss.size(), 9u);
  for (size_t i = 0; i < miss.size(); ++i) {
    EXPECT_EQ(hit[i], miss[i]) << "position " << i;  // exact, not close
    EXPECT_EQ(restarted[i], miss[i]) << "position " << i;
  }
  // The cache changes how the prompt attends its prefix (through its encoded form) but stays
  // close to a server without it.
  RuntimeOptions plain = o;
  plain.prefix_cache = {};
  LlamaDecodeModel model(dir_.path(), plain);
  const auto without = RunPrompt(model, 1, prompt_);
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < miss.size(); ++i) {
    worst = std::max(worst, MaxAbsDiff(without[i], miss[i]));
    for (float x : without[i]) scale = std::max(scale, static_cast<double>(std::abs(x)));
  }
  std::cout << "[ measure  ] prefix cache on vs off: max |logit diff| / max |logit| "
            << worst / scale << "\n";
  EXPECT_GT(worst, 0.0);  // the prompt really attends its prefix through the encoded form
  EXPECT_LT(worst / scale, 0.15);
}

TEST_F(CompressedRuntimeTest, PrefixCacheSharedFirstBlockAndAnotherReadPolicyStayExact) {
  // A prompt sharing only the first block, and a request at another read budget: storage is
  // reused without re-encoding and answers equal a server whose cache started empty.
  std::vector<int32_t> other = prompt_;
  for (size_t i = 300; i < other.size(); ++i) other[i] = prompt_[(i * 7) % 250 + 1];
  engine::ReadPolicy low;
  low.read_bits = 2.0;
  RuntimeOptions o;
  o.kv.kind = codec::KvBackend::kReadKv;
  TempDir warm_dir, fresh_a, fresh_b;
  o.prefix_cache.directory = warm_dir.path();
  LlamaDecodeModel warm(dir_.path(), o);
  RunPrompt(warm, 1, prompt_);
  const auto warm_other = RunPrompt(warm, 2, other);
  EXPECT_EQ(warm.prefix_cache_counters().hits, 1);
  const auto warm_low = RunPrompt(warm, 3, prompt_, low);
  EXPECT_EQ(warm.prefix_cache_counters().hits, 3);
  EXPECT_EQ(warm.prefix_cache_counters().stored, 3);  // 2 + other's second block
  o.prefix_cache.directory = fresh_a.path();
  LlamaDecodeModel fresh(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh, 1, other), warm_other);
  o.prefix_cache.directory = fresh_b.path();
  LlamaDecodeModel fresh_low(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh_low, 1, prompt_, low), warm_low);
}

// Objects are named by their identity: a W = 6 runtime on a directory of W = 8 objects reads
// none of them (no hit, no refusal), stores its own beside them, and answers as a fresh one.
TEST_F(CompressedRuntimeTest, PrefixCacheObjectsOfAnotherStoreWidthAreNeverReadAndStayWhole) {
  TempDir cache, fresh_dir;
  RuntimeOptions o;
  o.kv.kind = codec::KvBackend::kReadKv;
  o.prefix_cache.directory = cache.path();
  {
    LlamaDecodeModel w8(dir_.path(), o);
    RunPrompt(w8, 1, prompt_);
  }
  const size_t w8_objects = FilesIn(cache.path());
  ASSERT_EQ(w8_objects, 2u);
  o.kv.store_bits = 6;
  o.kv.read_bits = 3.0;
  std::vector<std::string> warnings;
  o.prefix_cache.warn = [&](std::string_view line) { warnings.emplace_back(line); };
  LlamaDecodeModel w6(dir_.path(), o);
  const auto beside = RunPrompt(w6, 1, prompt_);
  const engine::KvLedgers led = w6.ledgers();
  EXPECT_TRUE(led.cache_rejections.empty());
  EXPECT_EQ(w6.prefix_cache_counters().hits, 0);
  EXPECT_EQ(w6.prefix_cache_counters().stored, 2);
  EXPECT_EQ(FilesIn(cache.path()), w8_objects + 2);  // both widths' objects, side by side
  EXPECT_EQ(FilesIn(cache.path() + "/quarantine"), 0u);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  o.prefix_cache.directory = fresh_dir.path();
  o.prefix_cache.warn = nullptr;
  LlamaDecodeModel fresh(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh, 1, prompt_), beside);
}

// Outlier lists are part of the identity: a server that keeps them never reads objects written
// without them (another name, so no hit and no refusal), and its own hits are exact.
TEST_F(CompressedRuntimeTest, PrefixCacheWithOutlierListsIsExactAndApartFromObjectsWithout) {
  TempDir cache, fresh_dir;
  RuntimeOptions o;
  o.kv.kind = codec::KvBackend::kReadKv;
  o.kv.reader = codec::ReaderKind::kConstrained;
  o.prefix_cache.directory = cache.path();
  {
    LlamaDecodeModel without(dir_.path(), o);
    RunPrompt(without, 1, prompt_);
    EXPECT_EQ(without.cache_identity().outlier_cap, 0);
  }
  ASSERT_EQ(FilesIn(cache.path()), 2u);
  o.kv.outlier_cap = 2;
  LlamaDecodeModel with(dir_.path(), o);
  EXPECT_EQ(with.cache_identity().outlier_cap, 2);
  EXPECT_GT(with.cache_identity().outlier_threshold, 3.9);
  const auto first = RunPrompt(with, 1, prompt_);
  EXPECT_EQ(with.prefix_cache_counters().hits, 0);
  EXPECT_EQ(with.prefix_cache_counters().stored, 2);
  const auto again = RunPrompt(with, 2, prompt_);
  EXPECT_EQ(with.prefix_cache_counters().hits, 2);
  EXPECT_EQ(again, first);
  EXPECT_TRUE(with.ledgers().cache_rejections.empty());
  EXPECT_EQ(FilesIn(cache.path()), 4u);
  o.prefix_cache.directory = fresh_dir.path();
  LlamaDecodeModel fresh(dir_.path(), o);
  EXPECT_EQ(RunPrompt(fresh, 1, prompt_), first);
}

// The tile reader needs a channel group of 16: the same tiny model with d = 16.
class TileRuntimeTest : public CompressedRuntimeTest {
 protected:
  int HeadDim() const override { return 16; }
  // `model`'s prefix-cache objects have `layout`; the prompt served twice, the second time its
  // prefix restored from them (both requests' prefixes found), gives the same logits bit for bit.
  void ExpectPrefixCacheRestoresExactly(LlamaDecodeModel& model, const std::string& layout) {
    EXPECT_EQ(model.cache_identity().layout, layout);
    const auto miss = RunPrompt(model, 1, prompt_);
    const auto hit = RunPrompt(model, 2, prompt_);
    EXPECT_EQ(model.prefix_cache_counters().hits, 2);
    EXPECT_EQ(hit, miss);
  }
};

// The tile reader serves like the others: close to dense at full depth, worse at one bit, and
// its tile-layout prefix-cache objects restore bit for bit; a request naming a reader of the
// other layout is refused while a prefix cache of tiles is on.
TEST_F(TileRuntimeTest, TheTileReaderDecodesAndItsPrefixCacheRestoresExactly) {
  const auto [r8, r1] = FullAndOneBit(codec::ReaderKind::kTile);
  std::cout << "[ measure  ] tile reader, max |logit diff| / max |logit| vs exact: (8,8) " << r8
            << ", (8,1) " << r1 << "\n";
  EXPECT_LT(r8, 0.15);
  EXPECT_GT(r1, 4 * r8);

  TempDir cache;
  RuntimeOptions o;
  o.kv.kind = codec::KvBackend::kReadKv;
  o.kv.reader = codec::ReaderKind::kTile;
  o.prefix_cache.directory = cache.path();
  LlamaDecodeModel model(dir_.path(), o);
  ExpectPrefixCacheRestoresExactly(model, "tiles16");
  engine::ReadPolicy constrained;
  constrained.reader = "constrained";
  EXPECT_THROW(model.StartSequence(3, constrained), std::invalid_argument);
}

// Byte keys (--byte-keys): the tile reader's caches with keys as uniform bytes. Their prefix-cache
// objects are tiles16-kbytes and restore bit for bit; a request asking fewer key bits is refused
// (keys are read whole), and a server of tree keys never reads those objects.
TEST_F(TileRuntimeTest, ByteKeysDecodeAndTheirPrefixCacheRestoresExactly) {
  TempDir cache;
  RuntimeOptions o = ByteKeyOptions();
  o.prefix_cache.directory = cache.path();
  LlamaDecodeModel model(dir_.path(), o);
  ExpectPrefixCacheRestoresExactly(model, "tiles16-kbytes");
  engine::ReadPolicy fewer;
  fewer.key_bits = 6.0;
  fewer.value_bits = 4.0;
  EXPECT_THROW(model.StartSequence(3, fewer), std::invalid_argument);

  o.kv.byte_keys = false;  // tree keys: another identity, so the byte-key objects are misses
  LlamaDecodeModel tree(dir_.path(), o);
  EXPECT_EQ(tree.cache_identity().layout, "tiles16");
  RunPrompt(tree, 1, prompt_);
  EXPECT_EQ(tree.prefix_cache_counters().hits, 0);
  EXPECT_TRUE(tree.ledgers().cache_rejections.empty());
}

TEST(PrefixCacheOptionsTest, PrefixCacheNeedsReadKvAndDensePrefill) {
  RuntimeOptions o;
  o.prefix_cache.directory = "/tmp/unused-prefix-cache";
  for (const codec::KvBackend kind : {codec::KvBackend::kDense, codec::KvBackend::kFp8}) {
    o.kv.kind = kind;
    try {
      ValidateRuntimeOptions(o);
      FAIL() << codec::KvBackendName(kind) << ": no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("cache_dir:", 0), 0u) << e.what();
    }
  }
  o.kv.kind = codec::KvBackend::kReadKv;
  o.kv.prefill = PrefillAttention::kThroughCache;
  EXPECT_THROW(ValidateRuntimeOptions(o), std::invalid_argument);
  o.kv.prefill = PrefillAttention::kDense;
  ValidateRuntimeOptions(o);
}

}  // namespace
}  // namespace readkv::model
