#include "kvgate/suite/spawn.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace kvgate::suite {
namespace {

int Wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

TEST(SpawnChildTest, RunsAProgramFromPathWithItsOutputOnTheGivenDescriptor) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = -1;
  ASSERT_EQ(SpawnChild({"sh", "-c", "echo spawned; echo oops >&2"}, out[1], out[1], &pid), 0);
  close(out[1]);
  std::string text;
  char buf[64];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  const int status = Wait(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(text, "spawned\noops\n");
}

TEST(SpawnChildTest, StartsTheChildInItsOwnProcessGroup) {
  pid_t pid = -1;
  ASSERT_EQ(SpawnChild({"sleep", "5"}, STDOUT_FILENO, STDERR_FILENO, &pid), 0);
  pid_t group = -1;
  for (int i = 0; i < 100 && (group = getpgid(pid)) != pid; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(group, pid);
  EXPECT_NE(group, getpgrp());
  kill(pid, SIGKILL);
  Wait(pid);
}

TEST(SpawnChildTest, ReportsWhatPosixSpawnpWouldAndLeavesNothingRunning) {
  pid_t pid = -1;
  EXPECT_EQ(SpawnChild({"kvgate-no-such-program-xyz"}, STDOUT_FILENO, STDERR_FILENO, &pid), ENOENT);
  EXPECT_EQ(SpawnChild({"/nonexistent/dir/prog"}, STDOUT_FILENO, STDERR_FILENO, &pid), ENOENT);
  const std::string plain = (std::filesystem::temp_directory_path() /
                             ("kvgate_spawn_test_" + std::to_string(getpid()))).string();
  std::ofstream(plain) << "not a program\n";  // created 0644: not executable
  EXPECT_EQ(SpawnChild({plain}, STDOUT_FILENO, STDERR_FILENO, &pid), EACCES);
  std::filesystem::remove(plain);
  EXPECT_EQ(SpawnChild({}, STDOUT_FILENO, STDERR_FILENO, &pid), EINVAL);
  EXPECT_EQ(pid, -1);
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // no child left behind, not even a zombie
  EXPECT_EQ(errno, ECHILD);
}

// Hostile-test finding (2026-12-02): `kvgate run --metrics-port` left its exposer's listening
// socket open in both servers it started. A child inherits no descriptor but 0, 1 and 2.
TEST(SpawnChildTest, TheChildInheritsNoOtherDescriptor) {
  int leaky[2];
  ASSERT_EQ(pipe(leaky), 0);  // no O_CLOEXEC: what a library's socket may look like
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = -1;
  const std::string probe =
      "import os, sys\n"
      "for fd in sys.argv[1:]:\n"
      "  try:\n"
      "    os.fstat(int(fd)); print(fd, 'open')\n"
      "  except OSError:\n"
      "    print(fd, 'closed')\n";
  ASSERT_EQ(SpawnChild({"python3", "-c", probe, std::to_string(leaky[0]), std::to_string(leaky[1]),
                        "1"},
                       out[1], out[1], &pid),
            0);
  close(out[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  close(leaky[0]);
  close(leaky[1]);
  Wait(pid);
  EXPECT_EQ(text, std::to_string(leaky[0]) + " closed\n" + std::to_string(leaky[1]) +
                      " closed\n1 open\n");
}

// What a child started on `cpus` says of itself, from /proc, as the kernel keeps it.
std::string ChildCpusAllowed(const CpuList& cpus, int* error) {
  const std::string file =
      (std::filesystem::temp_directory_path() / ("kvgate_spawn_cpus_" + std::to_string(getpid())))
          .string();
  pid_t pid = -1;
  *error = SpawnChild({"sh", "-c", "grep Cpus_allowed_list /proc/self/status > " + file},
                      STDOUT_FILENO, STDERR_FILENO, &pid, cpus);
  if (*error != 0) return "";
  Wait(pid);
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  std::filesystem::remove(file);
  return line;
}

TEST(SpawnChildTest, AChildStartedOnCpusRunsThereAndTheParentKeepsItsOwn) {
  const CpuList parent = AllowedCpus();
  if (parent.size() < 2) GTEST_SKIP() << "needs 2 CPUs; this process may run on " << parent.size();
  int error = 0;
  EXPECT_EQ(ChildCpusAllowed({parent.back()}, &error),
            "Cpus_allowed_list:\t" + std::to_string(parent.back()));
  EXPECT_EQ(error, 0);
  EXPECT_EQ(AllowedCpus(), parent);
  // The suite's case: its thread pinned to the first CPU, a server started on the others.
  {
    ScopedThreadAffinity suite({parent.front()});
    const CpuList rest(parent.begin() + 1, parent.end());
    EXPECT_EQ(ChildCpusAllowed(rest, &error), "Cpus_allowed_list:\t" + FormatCpuList(rest));
    EXPECT_EQ(AllowedCpus(), CpuList{parent.front()});
  }
  // Without a list the child inherits the calling thread's CPUs, as before.
  EXPECT_EQ(ChildCpusAllowed({}, &error), "Cpus_allowed_list:\t" + FormatCpuList(parent));
}

TEST(SpawnChildTest, CpusTheChildCannotUseAreReportedAndNothingIsLeftRunning) {
  int error = 0;
  ChildCpusAllowed({100000}, &error);  // no such CPU
  EXPECT_EQ(error, EINVAL);
  ChildCpusAllowed({-1}, &error);
  EXPECT_EQ(error, EINVAL);
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

// A parent that starts a long child and is then SIGKILLed, as `kvgate run` may be: the child gets
// SIGTERM. This process becomes a subreaper so the orphan is re-parented to it and can be reaped.
TEST(SpawnChildTest, TheChildGetsSigtermWhenItsParentIsKilled) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    pid_t child = -1;
    const int error = SpawnChild({"sleep", "30"}, STDOUT_FILENO, STDERR_FILENO, &child);
    if (error != 0) child = -error;
    (void)!write(report[1], &child, sizeof child);
    pause();  // killed below
    _exit(0);
  }
  close(report[1]);
  pid_t child = 0;
  ASSERT_EQ(read(report[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  close(report[0]);
  ASSERT_GT(child, 0) << "SpawnChild failed in the parent: errno " << -child;
  kill(parent, SIGKILL);
  Wait(parent);
  // The orphan is ours now; it must end by SIGTERM long before its 30 s sleep.
  const auto start = std::chrono::steady_clock::now();
  const int status = Wait(child);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  EXPECT_LT(seconds, 10.0);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace kvgate::suite
