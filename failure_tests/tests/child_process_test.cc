#include "child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "scratch_dir.h"

namespace kvgate::failure_tests {
namespace {

using testing::ScratchDir;

TEST(ChildProcessTest, CapturesOutputAndExitStatus) {
  ScratchDir scratch;
  CommandOutcome outcome = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"},
                                      scratch.path().string(), "sh", std::chrono::seconds(20));
  EXPECT_FALSE(outcome.timed_out);
  EXPECT_EQ(ExitCode(outcome.status), 3);
  EXPECT_EQ(DescribeWaitStatus(outcome.status), "exit 3");
  EXPECT_EQ(outcome.out, "out\n");
  EXPECT_EQ(outcome.err, "err\n");
}

TEST(ChildProcessTest, ACommandPastItsTimeoutIsKilledAndSaysSo) {
  ScratchDir scratch;
  const auto start = std::chrono::steady_clock::now();
  CommandOutcome outcome =
      RunCommand({"sleep", "30"}, scratch.path().string(), "sleep", std::chrono::milliseconds(200));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(outcome.timed_out);
  EXPECT_EQ(ExitCode(outcome.status), std::nullopt);
  EXPECT_EQ(DescribeWaitStatus(outcome.status), "killed by signal 9");
}

TEST(ChildProcessTest, KillReapsAndAStartFailureNamesTheCommand) {
  ScratchDir scratch;
  const std::string base = (scratch.path() / "c").string();
  ChildProcess child({"sleep", "30"}, base + ".out", base + ".err");
  EXPECT_TRUE(child.Running());
  EXPECT_EQ(child.Wait(std::chrono::milliseconds(50)), std::nullopt);
  const int status = child.Kill();
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(child.Running());
  EXPECT_EQ(child.status(), status);
  EXPECT_EQ(child.Kill(), status);  // idempotent
  try {
    ChildProcess missing({"/nonexistent/kvgate", "run"}, base + ".out", base + ".err");
    FAIL() << "expected a start error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kvgate run"), std::string::npos) << e.what();
  }
}

TEST(DescendantsTest, FindsGrandchildrenWhichKillIfAliveThenStops) {
  ScratchDir scratch;
  const std::string base = (scratch.path() / "tree").string();
  // A shell whose own child outlives a SIGKILL of the shell: what `kvgate run` does to its
  // servers.
  ChildProcess shell({"sh", "-c", "sleep 30 & echo $!; wait"}, base + ".out", base + ".err");
  std::vector<history::ProcessIdentity> found;
  for (int i = 0; i < 200 && found.empty(); ++i) {
    found = Descendants(shell.pid());
    if (found.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_FALSE(found[0].start_token.empty());
  shell.Kill();
  EXPECT_EQ(history::CheckLiveness(found[0]), history::Liveness::kAlive);  // orphaned, alive
  EXPECT_TRUE(KillIfAlive(found[0]));
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = history::CheckLiveness(found[0]) == history::Liveness::kGone;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
  EXPECT_FALSE(KillIfAlive(found[0]));  // never a second signal to a pid that may be reused
}

}  // namespace
}  // namespace kvgate::failure_tests
