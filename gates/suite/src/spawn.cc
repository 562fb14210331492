#include "kvgate/suite/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include "cpu_mask.h"

extern char** environ;

namespace kvgate::suite {
namespace {

// close_range(2)'s CLOSE_RANGE_CLOEXEC (Linux 5.11), spelled out for headers that predate it.
constexpr unsigned kCloseRangeCloexec = 1U << 2;

// argv[0] as execvp would run it: as given if it names a path, else the first executable match on
// PATH (default "/bin:/usr/bin"). Resolved here, before fork: the child may only make
// async-signal-safe calls, and execvp's search is not one.
int ResolveProgram(const std::string& name, std::string* path) {
  if (name.empty()) return ENOENT;
  if (name.find('/') != std::string::npos) {
    *path = name;
    return 0;
  }
  const char* env = std::getenv("PATH");
  const std::string dirs = env != nullptr ? env : "/bin:/usr/bin";
  int error = ENOENT;
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end == begin ? "." : dirs.substr(begin, end - begin);
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(candidate.c_str(), X_OK) == 0) {
        *path = candidate;
        return 0;
      }
      error = EACCES;
    }
    begin = end + 1;
  }
  return error;
}

}  // namespace

int SpawnChild(const std::vector<std::string>& argv, int stdout_fd, int stderr_fd, pid_t* pid,
               const CpuList& cpus) {
  if (argv.empty()) return EINVAL;
  std::optional<CpuMask> mask;  // built here: the child may not allocate
  if (!cpus.empty()) {
    if (*std::min_element(cpus.begin(), cpus.end()) < 0) return EINVAL;
    mask.emplace(cpus);
  }
  std::string program;
  if (const int error = ResolveProgram(argv[0], &program); error != 0) return error;
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& arg : args) raw.push_back(arg.data());
  raw.push_back(nullptr);
  // exec failures come back through a close-on-exec pipe: nothing arrives if exec succeeded.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return errno;
  const pid_t parent = getpid();
  const long open_max = sysconf(_SC_OPEN_MAX);  // before fork: sysconf is not async-signal-safe
  const long fd_limit = open_max > 0 ? std::min(open_max, 1L << 20) : 65536;
  const pid_t child = fork();
  if (child < 0) {
    const int error = errno;
    close(report[0]);
    close(report[1]);
    return error;
  }
  if (child == 0) {
    // Async-signal-safe calls only from here on.
    setpgid(0, 0);
    int error = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) error = errno;
    // The parent died before the death signal was armed: nobody is left to stop this child.
    if (error == 0 && getppid() != parent) error = ESRCH;
    // The raw system call: glibc's wrapper is not on the async-signal-safe list.
    if (error == 0 && mask && syscall(SYS_sched_setaffinity, 0, mask->bytes(), mask->get()) != 0) {
      error = errno;
    }
    if (error == 0 && (dup2(stdout_fd, STDOUT_FILENO) < 0 || dup2(stderr_fd, STDERR_FILENO) < 0)) {
      error = errno;
    }
    // The child inherits nothing else: no listening socket of the parent's (a --metrics-port
    // exposer), no lock file, no history connection. Close-on-exec on every descriptor from 3
    // up; the exec-failure pipe is close-on-exec already and still usable until the exec.
    if (error == 0 && syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec) != 0) {
      for (long fd = 3; fd < fd_limit; ++fd) {
        const int flags = fcntl(static_cast<int>(fd), F_GETFD);
        if (flags >= 0) fcntl(static_cast<int>(fd), F_SETFD, flags | FD_CLOEXEC);
      }
    }
    if (error == 0) {
      execve(program.c_str(), raw.data(), environ);
      error = errno;
    }
    (void)!write(report[1], &error, sizeof(error));
    _exit(127);
  }
  close(report[1]);
  int error = 0;
  ssize_t got = 0;
  do {
    got = read(report[0], &error, sizeof(error));
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  if (got == static_cast<ssize_t>(sizeof(error))) {
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return error != 0 ? error : ECHILD;
  }
  *pid = child;
  return 0;
}

}  // namespace kvgate::suite
