#include "prefix_cache_servers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "kvgate/filesystem/remove_tree.h"

namespace kvgate::failure_tests::prefix_cache {
namespace {

namespace fs = std::filesystem;

class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / ("prefix_cache_servers_test_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~ScratchDir() { RemoveTree(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(PrefixCacheServersTest, PromptsAreSeededAndSpanTwoToFourPrefixBlocks) {
  const auto a = Prompts(8, 1), b = Prompts(8, 1), c = Prompts(8, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<std::string> first_blocks;
  for (const auto& p : a) {
    EXPECT_GE(p.size(), 600u);
    EXPECT_LE(p.size(), 1250u);
    first_blocks.insert(p.substr(0, 256));
  }
  EXPECT_EQ(first_blocks.size(), a.size());  // no two prompts share a prefix block
}

TEST(PrefixCacheServersTest, TheServerLogIsSummedAndRefusedFieldsCounted) {
  ScratchDir dir;
  const fs::path log = dir.path() / "server.log";
  std::ofstream(log)
      << "[info] listening\n"
      << "[warning] prefix cache: refused /c/ab.rkv (identity_mismatch; field store_bits: "
         "running '6', object '8'); moved to quarantine/, recomputing\n"
      << "[info] prefix cache: sequence 1: 3 prefix blocks, 0 loaded, 3 computed, 3 stored\n"
      << "[warning] prefix cache: refused /c/cd.rkv (corrupt; corrupt cache object (magic))\n"
      << "[info] prefix cache: sequence 2: 2 prefix blocks, 2 loaded, 0 computed, 0 stored\n";
  const PrefixLog parsed = ReadPrefixLog(log.string());
  EXPECT_EQ(parsed.prompts, 2);
  EXPECT_EQ(parsed.blocks, 5);
  EXPECT_EQ(parsed.loaded, 2);
  EXPECT_EQ(parsed.computed, 3);
  EXPECT_EQ(parsed.stored, 3);
  ASSERT_EQ(parsed.refused_fields.size(), 1u);
  EXPECT_EQ(parsed.refused_fields.at("store_bits"), 1);
}

TEST(PrefixCacheServersTest, ObjectsQuarantineAndDigestsAreReadFromTheCacheDirectory) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "quarantine");
  std::ofstream(dir.path() / "a.rkv") << "one";
  std::ofstream(dir.path() / "b.rkv") << "two";
  std::ofstream(dir.path() / ".a.rkv.tmp.1.0") << "partial";
  std::ofstream(dir.path() / "quarantine" / "c.identity_mismatch.1.rkv") << "old";
  EXPECT_EQ(CountObjects(dir.path().string()), 2);
  EXPECT_EQ(CountQuarantined(dir.path().string()), 1);
  const auto digests = ObjectDigests(dir.path().string());
  ASSERT_EQ(digests.size(), 2u);
  EXPECT_NE(digests.at("a.rkv"), digests.at("b.rkv"));
  std::ofstream(dir.path() / "b.rkv") << "one";
  EXPECT_NE(ObjectDigests(dir.path().string()), digests);
  EXPECT_EQ(FirstDifference({"x", "y"}, {"x", "y"}), -1);
  EXPECT_EQ(FirstDifference({"x", "y"}, {"x", "z"}), 1);
  EXPECT_EQ(FirstDifference({"x"}, {"x", "z"}), 1);
  EXPECT_EQ(RejectionCount({{"corrupt", 2.0}}, "identity_mismatch"), 0.0);
}

}  // namespace
}  // namespace kvgate::failure_tests::prefix_cache
