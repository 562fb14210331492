#include "kvgate/history/process_identity.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace kvgate::history {
namespace {

// A child that exits when told to, so the test can read its identity while it is alive.
struct Child {
  pid_t pid = -1;
  int write_end = -1;
  static Child Start() {
    int fds[2];
    if (pipe(fds) != 0) return {};
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      char c;
      (void)!read(fds[0], &c, 1);  // returns when the parent closes its end
      _exit(0);
    }
    close(fds[0]);
    return Child{pid, fds[1]};
  }
  void LetExit() { close(write_end); }
};

TEST(ProcessIdentityTest, CurrentProcessIsAliveAndHasAStartToken) {
  ProcessIdentity self = ProcessIdentity::Current();
  EXPECT_EQ(self.pid, getpid());
  EXPECT_FALSE(self.host.empty());
  EXPECT_FALSE(self.start_token.empty());  // Linux with /proc
  EXPECT_EQ(CheckLiveness(self), Liveness::kAlive);
  EXPECT_EQ(ProcessIdentity::OfPid(getpid()), self);
}

TEST(ProcessIdentityTest, ExitedZombieAndReapedChildrenAreGone) {
  Child child = Child::Start();
  ASSERT_GT(child.pid, 0);
  auto identity = ProcessIdentity::OfPid(child.pid);
  ASSERT_TRUE(identity.has_value());
  EXPECT_EQ(CheckLiveness(*identity), Liveness::kAlive);
  child.LetExit();
  // Not yet reaped: a zombie, which will never finish a run.
  for (int i = 0; i < 200 && CheckLiveness(*identity) == Liveness::kAlive; ++i) usleep(5000);
  EXPECT_EQ(CheckLiveness(*identity), Liveness::kGone);
  int status = 0;
  ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
  EXPECT_EQ(CheckLiveness(*identity), Liveness::kGone);
  EXPECT_FALSE(ProcessIdentity::OfPid(child.pid).has_value());
}

TEST(ProcessIdentityTest, AReusedPidWithAnotherStartTokenIsGone) {
  ProcessIdentity self = ProcessIdentity::Current();
  self.start_token += "0";  // same pid, different process start: a reused pid
  EXPECT_EQ(CheckLiveness(self), Liveness::kGone);
}

TEST(ProcessIdentityTest, AnotherHostCannotBeJudged) {
  ProcessIdentity other = ProcessIdentity::Current();
  other.host = "some-other-host.invalid";
  EXPECT_EQ(CheckLiveness(other), Liveness::kUnknown);
}

}  // namespace
}  // namespace kvgate::history
