#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "kvgate/suite/spawn.h"

namespace kvgate::failure_tests {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int OpenForWriting(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open '" + path + "': " + strerror(errno));
  return fd;
}

// The parent pid from /proc/<pid>/stat ("pid (comm) state ppid ..."); comm may hold spaces and
// parentheses, so the fields are counted after the last ')'.
std::optional<pid_t> ParentOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::string state;
  long long parent = 0;
  if (!(fields >> state >> parent)) return std::nullopt;
  return static_cast<pid_t>(parent);
}

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string stdout_path,
                           std::string stderr_path)
    : argv_(std::move(argv)),
      stdout_path_(std::move(stdout_path)),
      stderr_path_(std::move(stderr_path)) {
  if (argv_.empty()) throw std::invalid_argument("ChildProcess: empty command");
  const int out_fd = OpenForWriting(stdout_path_);
  int err_fd = -1;
  try {
    err_fd = OpenForWriting(stderr_path_);
  } catch (...) {
    close(out_fd);
    throw;
  }
  // Its own process group: a Ctrl-C meant for the scenario runner must not reach the child
  // half-way through a crash the scenario is staging; SIGTERM if the runner dies first.
  const int error = suite::SpawnChild(argv_, out_fd, err_fd, &pid_);
  close(out_fd);
  close(err_fd);
  if (error != 0) {
    pid_ = -1;
    throw std::runtime_error("cannot start '" + CommandLine() + "': " + strerror(error));
  }
}

ChildProcess::~ChildProcess() { Kill(); }

std::string ChildProcess::CommandLine() const {
  std::string line;
  for (const std::string& arg : argv_) line += (line.empty() ? "" : " ") + arg;
  return line;
}

bool ChildProcess::Running() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    reaped_ = true;
    status_ = status;
    return false;
  }
  return true;
}

std::optional<int> ChildProcess::Wait(std::chrono::duration<double> timeout) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  while (Running()) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status();
}

int ChildProcess::Kill() {
  if (Running()) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    status_ = status;
  }
  return status_;
}

std::string ChildProcess::Stdout() const { return ReadWholeFile(stdout_path_); }
std::string ChildProcess::Stderr() const { return ReadWholeFile(stderr_path_); }

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

std::optional<int> ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return std::nullopt;
}

CommandOutcome RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                          const std::string& name, std::chrono::duration<double> timeout) {
  const std::string base = (std::filesystem::path(scratch_dir) / name).string();
  ChildProcess child(argv, base + ".out", base + ".err");
  CommandOutcome outcome;
  std::optional<int> status = child.Wait(timeout);
  if (!status) {
    outcome.timed_out = true;
    status = child.Kill();
  }
  outcome.status = *status;
  outcome.out = child.Stdout();
  outcome.err = child.Stderr();
  return outcome;
}

std::vector<history::ProcessIdentity> Descendants(pid_t pid) {
  std::multimap<pid_t, pid_t> children;  // parent -> child
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto child = static_cast<pid_t>(std::stol(name));
    if (auto parent = ParentOf(child)) children.emplace(*parent, child);
  }
  std::vector<history::ProcessIdentity> found;
  std::vector<pid_t> frontier = {pid};
  // Bounded: a pid appears once in the parent map, so the walk visits each process once.
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      if (auto identity = history::ProcessIdentity::OfPid(it->second)) {
        found.push_back(*identity);
        frontier.push_back(it->second);
      }
    }
  }
  return found;
}

bool KillIfAlive(const history::ProcessIdentity& process) {
  if (history::CheckLiveness(process) != history::Liveness::kAlive) return false;
  return kill(static_cast<pid_t>(process.pid), SIGKILL) == 0;
}

}  // namespace kvgate::failure_tests
