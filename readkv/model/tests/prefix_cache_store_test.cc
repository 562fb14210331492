#include "readkv/model/prefix_cache_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/bitplanes.h"
#include "tiny_model.h"

namespace readkv::model {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

codec::CacheIdentity SmallIdentity() {
  codec::CacheIdentity id;
  id.model_id = "test/store";
  id.weights_digest = std::string(32, 'a');
  id.layers = 1;
  id.heads_q = 2;
  id.heads_kv = 1;
  id.head_dim = 8;
  id.calibration_digest = std::string(32, 'c');
  id.codebook_id = "gaussian-lloyd-tree";
  id.codebook_version = 1;
  id.store_bits = 8;
  return id;
}

// One full block of seeded codes for a prefix of `seed`-derived tokens.
codec::CacheObject MakeObject(uint64_t seed, const codec::CacheIdentity& id = SmallIdentity()) {
  kvgate::stats::SplitMixRng rng(seed);
  codec::BitPlaneStore store(id.head_dim, id.store_bits);
  std::vector<uint8_t> k(static_cast<size_t>(id.head_dim)), v(k.size());
  for (int t = 0; t < codec::kBlockTokens; ++t) {
    const uint64_t mask = (uint64_t{1} << id.store_bits) - 1;
    for (auto& c : k) c = static_cast<uint8_t>(rng.Next() & mask);
    for (auto& c : v) c = static_cast<uint8_t>(rng.Next() & mask);
    store.Append(k, v);
  }
  std::vector<int32_t> tokens(codec::kBlockTokens);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.Next() % 256);
  codec::CacheObject object;
  object.identity = id;
  object.prefix_digest = PrefixDigest(tokens);
  object.first_token = 0;
  object.tokens = codec::kBlockTokens;
  object.blocks.push_back(store.BlockBytes(0));
  return object;
}

size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST(PrefixCacheStoreTest, StoredObjectsLoadBackEqualAndAbsentOnesAreMisses) {
  TempDir dir;
  PrefixCacheStore store({dir.path() + "/cache", 0, {}}, SmallIdentity());
  const codec::CacheObject object = MakeObject(1);
  EXPECT_FALSE(store.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value());
  ASSERT_TRUE(store.Store(object));
  EXPECT_TRUE(fs::exists(store.PathOf(object.prefix_digest)));
  const auto back = store.Load(object.prefix_digest, 0, codec::kBlockTokens);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->blocks, object.blocks);
  EXPECT_EQ(back->identity, object.identity);
  const PrefixCacheCounters c = store.counters();
  EXPECT_EQ(c.misses, 1);
  EXPECT_EQ(c.hits, 1);
  EXPECT_EQ(c.stored, 1);
  EXPECT_EQ(c.stored_bytes,
            static_cast<int64_t>(fs::file_size(store.PathOf(object.prefix_digest))));
  EXPECT_TRUE(c.rejections.empty());
  // Only the object and the quarantine folder: no temporary left behind.
  EXPECT_EQ(CountFiles(dir.path() + "/cache"), 1u);
}

// Hostile-test finding (2026-12-02): names depended on the prompt prefix only, so a server of
// another identity on the same --cache-dir refused, quarantined and overwrote every object of
// the first, and two alternating configurations got 0 hits forever. Names carry the identity.
TEST(PrefixCacheStoreTest, StoresOfTwoIdentitiesShareADirectoryWithoutTouchingEachOther) {
  TempDir dir;
  const codec::CacheObject object = MakeObject(2);
  codec::CacheIdentity other_id = SmallIdentity();
  other_id.calibration_digest = std::string(32, 'd');
  codec::CacheObject other = object;
  other.identity = other_id;
  for (int round = 0; round < 2; ++round) {  // alternating configurations
    PrefixCacheStore first({dir.path(), 0, {}}, SmallIdentity());
    PrefixCacheStore second({dir.path(), 0, {}}, other_id);
    if (round == 0) {
      ASSERT_TRUE(first.Store(object));
      EXPECT_FALSE(second.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value());
      EXPECT_EQ(second.counters().misses, 1);  // a miss, not a refusal
      ASSERT_TRUE(second.Store(other));
    }
    const auto mine = first.Load(object.prefix_digest, 0, codec::kBlockTokens);
    const auto theirs = second.Load(object.prefix_digest, 0, codec::kBlockTokens);
    ASSERT_TRUE(mine.has_value()) << "round " << round;
    ASSERT_TRUE(theirs.has_value()) << "round " << round;
    EXPECT_EQ(mine->identity, SmallIdentity());
    EXPECT_EQ(theirs->identity, other_id);
    EXPECT_TRUE(first.counters().rejections.empty());
    EXPECT_TRUE(second.counters().rejections.empty());
    EXPECT_NE(first.PathOf(object.prefix_digest), second.PathOf(object.prefix_digest));
  }
  EXPECT_EQ(CountFiles(dir.path()), 2u);
  EXPECT_EQ(CountFiles(dir.path() + "/quarantine"), 0u);
}

// The header is what decides, not the name: an object of another identity copied or renamed
// under this identity's name is refused (naming the field), quarantined and counted once.
TEST(PrefixCacheStoreTest, AnObjectOfAnotherIdentityUnderThisNameIsRefusedQuarantinedOnce) {
  TempDir dir;
  const codec::CacheObject object = MakeObject(2);
  std::string foreign;
  {
    PrefixCacheStore writer({dir.path(), 0, {}}, SmallIdentity());
    ASSERT_TRUE(writer.Store(object));
    foreign = writer.PathOf(object.prefix_digest);
  }
  codec::CacheIdentity other = SmallIdentity();
  other.calibration_digest = std::string(32, 'd');
  std::vector<std::string> warnings;
  PrefixCacheStore reader({dir.path(), 0, [&](std::string_view l) { warnings.emplace_back(l); }},
                          other);
  fs::copy_file(foreign, reader.PathOf(object.prefix_digest));
  EXPECT_FALSE(reader.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value());
  EXPECT_EQ(reader.counters().rejections.at("identity_mismatch"), 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("calibration_digest"), std::string::npos) << warnings[0];
  EXPECT_FALSE(fs::exists(reader.PathOf(object.prefix_digest)));
  EXPECT_TRUE(fs::exists(foreign));  // the writer's own object is untouched
  EXPECT_EQ(CountFiles(dir.path() + "/quarantine"), 1u);
  // Gone from the cache: the next lookup is a plain miss, not a second rejection.
  EXPECT_FALSE(reader.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value());
  EXPECT_EQ(reader.counters().rejections.at("identity_mismatch"), 1);
  EXPECT_EQ(reader.counters().misses, 1);
}

TEST(PrefixCacheStoreTest, TornTruncatedFlippedOrMisnamedObjectsAreRefusedAsCorrupt) {
  TempDir dir;
  PrefixCacheStore store({dir.path(), 0, {}}, SmallIdentity());
  const codec::CacheObject object = MakeObject(3);
  const std::string path = store.PathOf(object.prefix_digest);
  int64_t expected = 0;
  // A write torn mid-way (simulated by truncation), at a few lengths including empty.
  for (const double share : {0.0, 0.01, 0.5, 0.999}) {
    ASSERT_TRUE(store.Store(object));
    fs::resize_file(path, static_cast<uintmax_t>(share * static_cast<double>(fs::file_size(path))));
    EXPECT_FALSE(store.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value()) << share;
    EXPECT_EQ(store.counters().rejections.at("corrupt"), ++expected);
    EXPECT_FALSE(fs::exists(path));
  }
  // One flipped payload bit.
  ASSERT_TRUE(store.Store(object));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) - 10));
    f.put('\x5a');
  }
  EXPECT_FALSE(store.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value());
  EXPECT_EQ(store.counters().rejections.at("corrupt"), ++expected);
  // A whole object under another prefix's name, or asked for at another position.
  const codec::CacheObject other = MakeObject(4);
  ASSERT_TRUE(store.Store(object));
  fs::copy_file(path, store.PathOf(other.prefix_digest));
  EXPECT_FALSE(store.Load(other.prefix_digest, 0, codec::kBlockTokens).has_value());
  EXPECT_FALSE(store.Load(object.prefix_digest, 256, codec::kBlockTokens).has_value());
  EXPECT_EQ(store.counters().rejections.at("corrupt"), expected + 2);
  EXPECT_EQ(CountFiles(dir.path() + "/quarantine"), static_cast<size_t>(expected + 2));
  EXPECT_EQ(store.counters().hits, 0);
}

TEST(PrefixCacheStoreTest, ATemporaryLeftByACrashIsNeverReadAndIsRemovedOnOpen) {
  TempDir dir;
  const codec::CacheObject object = MakeObject(5);
  // A pid that is certainly gone: a child that already exited and was reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead =
      dir.path() + "/." + object.prefix_digest + ".rkv.tmp." + std::to_string(child) + ".0";
  const std::string live =
      dir.path() + "/." + object.prefix_digest + ".rkv.tmp." + std::to_string(::getppid()) + ".0";
  std::ofstream(dead) << "RKVCACHE half an object";
  std::ofstream(live) << "RKVCACHE another server, still writing";
  PrefixCacheStore store({dir.path(), 0, {}}, SmallIdentity());
  EXPECT_EQ(store.counters().removed_temporaries, 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_FALSE(store.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value());
  EXPECT_EQ(store.counters().misses, 1);
  EXPECT_TRUE(store.counters().rejections.empty());
}

TEST(PrefixCacheStoreTest, TwoStoresWritingOneNameConcurrentlyNeverExposeAPartialObject) {
  TempDir dir;
  PrefixCacheStore a({dir.path(), 0, {}}, SmallIdentity());
  PrefixCacheStore b({dir.path(), 0, {}}, SmallIdentity());
  const codec::CacheObject object = MakeObject(6);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    PrefixCacheStore r({dir.path(), 0, {}}, SmallIdentity());
    for (int i = 0; i < 400 && !done; ++i) r.Load(object.prefix_digest, 0, codec::kBlockTokens);
    EXPECT_TRUE(r.counters().rejections.empty());
  });
  std::thread wa([&] {
    for (int i = 0; i < 30; ++i) EXPECT_TRUE(a.Store(object));
  });
  std::thread wb([&] {
    for (int i = 0; i < 30; ++i) EXPECT_TRUE(b.Store(object));
  });
  wa.join();
  wb.join();
  done = true;
  reader.join();
  EXPECT_EQ(CountFiles(dir.path()), 1u);  // the object; no temporaries
  EXPECT_TRUE(a.Load(object.prefix_digest, 0, codec::kBlockTokens).has_value());
}

TEST(PrefixCacheStoreTest, BeyondMaxBytesTheLeastRecentlyUsedObjectIsEvicted) {
  TempDir dir;
  const codec::CacheObject first = MakeObject(7), second = MakeObject(8), third = MakeObject(9);
  const auto size = static_cast<int64_t>(codec::SerializeCacheObject(first).size());
  PrefixCacheStore store({dir.path(), 2 * size + size / 2, {}}, SmallIdentity());
  ASSERT_TRUE(store.Store(first));
  ASSERT_TRUE(store.Store(second));
  // Make the ages unambiguous whatever the file system's timestamp granularity.
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(store.PathOf(first.prefix_digest), old);
  fs::last_write_time(store.PathOf(second.prefix_digest), old + std::chrono::minutes(1));
  ASSERT_TRUE(store.Load(first.prefix_digest, 0, codec::kBlockTokens).has_value());  // used now
  ASSERT_TRUE(store.Store(third));
  EXPECT_EQ(store.counters().evicted, 1);
  EXPECT_TRUE(fs::exists(store.PathOf(first.prefix_digest)));
  EXPECT_FALSE(fs::exists(store.PathOf(second.prefix_digest)));
  EXPECT_TRUE(fs::exists(store.PathOf(third.prefix_digest)));
}

TEST(PrefixCacheStoreTest, NamesThatAreNotDigestsAndForeignObjectsAreRefusedNamingTheField) {
  TempDir dir;
  PrefixCacheStore store({dir.path(), 0, {}}, SmallIdentity());
  try {
    store.Load("../../etc/passwd", 0, codec::kBlockTokens);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("prefix_digest:", 0), 0u) << e.what();
  }
  codec::CacheIdentity other = SmallIdentity();
  other.store_bits = 7;
  try {
    store.Store(MakeObject(10, other));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("identity:", 0), 0u) << e.what();
  }
  EXPECT_THROW(PrefixCacheStore({"", 0, {}}, SmallIdentity()), std::invalid_argument);
  std::ofstream(dir.path() + "/plain_file") << "x";
  EXPECT_THROW(PrefixCacheStore({dir.path() + "/plain_file", 0, {}}, SmallIdentity()),
               std::invalid_argument);
}

}  // namespace
}  // namespace readkv::model
