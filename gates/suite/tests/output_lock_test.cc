// The output folder of a run is one run's alone (hostile-test finding, 2026-12-02: two runs with
// the same --out measured each other's servers).
#include "../src/output_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "../../history/tests/temp_dir.h"

namespace kvgate::suite {
namespace {

TEST(OutputFolderLockTest, ASecondHolderIsRefusedByNameAndPid) {
  history::testing::TempDir dir;
  const std::filesystem::path out = dir.path() / "kvgate-out";
  std::optional<OutputFolderLock> first;
  first.emplace(out);  // creates the folder
  // Another process (the usual case) and another open in this one are both refused.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      OutputFolderLock second(out);
      _exit(1);
    } catch (const OutputFolderBusy& e) {
      const std::string what = e.what();
      const bool named = what.find(out.string()) != std::string::npos &&
                         what.find("pid " + std::to_string(getppid())) != std::string::npos;
      _exit(named ? 0 : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_THROW(OutputFolderLock again(out), OutputFolderBusy);
  // Released with its holder: the next run takes the folder.
  first.reset();
  EXPECT_NO_THROW(OutputFolderLock next(out));
}

TEST(OutputFolderLockTest, AnUnwritableFolderIsAClearError) {
  history::testing::TempDir dir;
  const std::filesystem::path file = dir.path() / "plain-file";
  std::ofstream(file) << "x";
  EXPECT_THROW(OutputFolderLock lock(file), std::exception);  // not a folder
}

}  // namespace
}  // namespace kvgate::suite
