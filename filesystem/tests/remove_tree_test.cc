#include "kvgate/filesystem/remove_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

namespace kvgate {
namespace {

namespace fs = std::filesystem;

void WriteFile(const fs::path& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
}

std::string ReadFile(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// symlink_status: true for a dangling link too, and never looks through a link.
bool Exists(const fs::path& path) { return fs::exists(fs::symlink_status(path)); }

// Each test works in a fresh folder of its own under the system temp dir.
class RemoveTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kvgate_remove_tree_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    scratch_ = pattern;
  }
  void TearDown() override {
    if (scratch_.empty()) return;
    // Undo what a test may have left read-only, then clean up with the function under test.
    std::error_code ignored;
    for (auto it = fs::recursive_directory_iterator(scratch_, ignored);
         it != fs::recursive_directory_iterator(); it.increment(ignored)) {
      if (it->is_directory(ignored) && !it->is_symlink(ignored)) {
        fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ignored);
      }
    }
    RemoveTree(scratch_, ignored);
  }

  fs::path scratch_;
};

TEST_F(RemoveTreeTest, RemovesNestedDirectoriesFilesAndEmptyDirectories) {
  const fs::path root = scratch_ / "tree";
  fs::create_directories(root / "a" / "b" / "c");
  fs::create_directories(root / "a" / "empty");
  WriteFile(root / "a" / "b" / "c" / "leaf.txt", "leaf");
  WriteFile(root / "a" / "b" / "middle.txt", "middle");
  WriteFile(root / ".hidden", "hidden");
  WriteFile(root / "top.txt", "top");
  // Deeper than the 64 directories nftw keeps open at once.
  fs::path deep = root / "deep";
  for (int i = 0; i < 100; ++i) deep /= "d";
  fs::create_directories(deep);
  WriteFile(deep / "bottom.txt", "bottom");
  WriteFile(scratch_ / "sibling.txt", "sibling");

  RemoveTree(root);

  EXPECT_FALSE(Exists(root));
  EXPECT_EQ(ReadFile(scratch_ / "sibling.txt"), "sibling");  // the parent's other entries stay
}

TEST_F(RemoveTreeTest, RemovesLinksInsideTheTreeButNeverWhatTheyPointTo) {
  const fs::path outside = scratch_ / "outside";
  fs::create_directories(outside / "inner");
  WriteFile(outside / "keep.txt", "keep");
  WriteFile(outside / "inner" / "keep_too.txt", "keep too");
  WriteFile(scratch_ / "outside_file.txt", "outside file");

  const fs::path root = scratch_ / "tree";
  fs::create_directories(root / "sub");
  fs::create_directory_symlink(outside, root / "absolute_link_to_dir");
  fs::create_directory_symlink("../../outside", root / "sub" / "relative_link_to_dir");
  fs::create_symlink(scratch_ / "outside_file.txt", root / "sub" / "link_to_file");
  fs::create_symlink(scratch_ / "nowhere", root / "dangling_link");
  ASSERT_EQ(ReadFile(root / "sub" / "relative_link_to_dir" / "keep.txt"), "keep");

  RemoveTree(root);

  EXPECT_FALSE(Exists(root));
  EXPECT_EQ(ReadFile(outside / "keep.txt"), "keep");
  EXPECT_EQ(ReadFile(outside / "inner" / "keep_too.txt"), "keep too");
  EXPECT_EQ(ReadFile(scratch_ / "outside_file.txt"), "outside file");
}

TEST_F(RemoveTreeTest, ALinkGivenAsTheRootIsRemovedAndItsTargetKept) {
  const fs::path target = scratch_ / "target";
  fs::create_directories(target);
  WriteFile(target / "keep.txt", "keep");
  const fs::path link = scratch_ / "link";
  fs::create_directory_symlink(target, link);

  RemoveTree(link);

  EXPECT_FALSE(Exists(link));
  EXPECT_EQ(ReadFile(target / "keep.txt"), "keep");
}

TEST_F(RemoveTreeTest, RemovesASingleFile) {
  const fs::path file = scratch_ / "file.txt";
  WriteFile(file, "x");
  std::error_code ec = std::make_error_code(std::errc::io_error);

  EXPECT_TRUE(RemoveTree(file, ec));

  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(Exists(file));
}

TEST_F(RemoveTreeTest, AMissingPathIsNotAnError) {
  WriteFile(scratch_ / "file.txt", "x");
  for (const fs::path& missing : {scratch_ / "missing", scratch_ / "missing" / "deeper",
                                  scratch_ / "file.txt" / "under_a_file"}) {
    SCOPED_TRACE(missing.string());
    EXPECT_NO_THROW(RemoveTree(missing));
    std::error_code ec = std::make_error_code(std::errc::io_error);  // cleared on success
    EXPECT_TRUE(RemoveTree(missing, ec));
    EXPECT_FALSE(ec) << ec.message();
  }
  EXPECT_EQ(ReadFile(scratch_ / "file.txt"), "x");
}

// rmdir() refuses a path whose last component is "." with EINVAL whoever calls it (root too, as
// CI runs), which makes an unremovable entry without relying on permissions. The children are
// removed first (depth first); the directory itself stays.
TEST_F(RemoveTreeTest, AnEntryThatCannotBeRemovedThrowsNamingThePathAndTheErrno) {
  const fs::path root = scratch_ / "tree";
  fs::create_directories(root / "sub");
  WriteFile(root / "sub" / "file.txt", "x");
  const fs::path dot = root / ".";

  try {
    RemoveTree(dot);
    FAIL() << "expected std::filesystem::filesystem_error";
  } catch (const fs::filesystem_error& e) {
    EXPECT_EQ(e.code(), std::errc::invalid_argument) << e.what();
    EXPECT_EQ(e.path1(), dot);
    EXPECT_NE(std::string(e.what()).find("[" + dot.string() + "]"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(Exists(root / "sub"));
  EXPECT_TRUE(Exists(root));

  std::error_code ec;
  static_assert(noexcept(RemoveTree(dot, ec)));
  EXPECT_FALSE(RemoveTree(dot, ec));
  EXPECT_EQ(ec, std::errc::invalid_argument) << ec.message();
}

// The failing entry below the root is named as path2(). Permissions are the only way to make one
// without privileges, and they do not stop root, so this one skips as root (as in CI).
TEST_F(RemoveTreeTest, AnUnremovableEntryBelowTheRootIsNamedAsPathTwo) {
  if (::geteuid() == 0) GTEST_SKIP() << "root removes entries of a read-only directory";
  const fs::path root = scratch_ / "tree";
  const fs::path locked = root / "locked";
  fs::create_directories(locked);
  WriteFile(locked / "file.txt", "x");
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);

  try {
    RemoveTree(root);
    FAIL() << "expected std::filesystem::filesystem_error";
  } catch (const fs::filesystem_error& e) {
    EXPECT_EQ(e.code(), std::errc::permission_denied) << e.what();
    EXPECT_EQ(e.path1(), root);
    EXPECT_EQ(e.path2(), locked / "file.txt");
  }
  EXPECT_EQ(ReadFile(locked / "file.txt"), "x");
}

}  // namespace
}  // namespace kvgate
