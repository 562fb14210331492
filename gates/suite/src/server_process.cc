#include "kvgate/suite/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include "kvgate/http/blocking_client.h"
#include "kvgate/suite/spawn.h"
#include "listening_sockets.h"


namespace kvgate::suite {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxOutput = 64 * 1024;

}  // namespace

int HttpGetStatus(const std::string& host, int port, const std::string& path,
                  std::chrono::milliseconds timeout) {
  try {
    const bool v6 = host.find(':') != std::string::npos;
    const kvgate::http::Url url = kvgate::http::Url::Parse(
        "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port));
    return static_cast<int>(
        kvgate::http::Fetch(url, {}, path, "", timeout, "kvgate-suite").result_int());
  } catch (const std::exception&) {
    return 0;
  }
}

ServerProcess::ServerProcess(std::vector<std::string> argv,
                             std::chrono::duration<double> startup_timeout, std::string log_path,
                             bool append_address, CpuList cpus)
    : argv_(std::move(argv)), log_path_(std::move(log_path)), cpus_(std::move(cpus)) {
  if (argv_.empty()) throw ServerStartError("server command is empty");
  if (append_address) {
    for (const char* arg : {"--host", "127.0.0.1", "--port", "0"}) argv_.emplace_back(arg);
  }
  int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    throw ServerStartError("cannot open server log '" + log_path_ + "': " + strerror(errno));
  }
  off_t log_start = lseek(log_fd, 0, SEEK_END);
  log_start_ = log_start < 0 ? 0 : log_start;
  // Its own process group, so a Ctrl-C at the terminal reaches the suite, which then stops the
  // servers in order instead of having them die mid-write; SIGTERM if the suite dies first.
  int status = SpawnChild(argv_, log_fd, log_fd, &pid_, cpus_);
  close(log_fd);
  if (status != 0) {
    pid_ = -1;
    throw ServerStartError("cannot start '" + CommandLine() + "'" +
                           (cpus_.empty() ? "" : " on CPUs " + FormatCpuList(cpus_)) + ": " +
                           strerror(status));
  }

  const std::regex listening("listening on ([0-9.]+):([0-9]+)");
  Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(startup_timeout);
  std::smatch match;
  std::string output;
  // The port is the one the server printed AND one its own process tree listens on: a line
  // copied from elsewhere, or another process's port, is never taken for this server's.
  auto owns_printed_port = [&] {
    if (!std::regex_search(output = OutputTail(), match, listening)) return false;
    const std::optional<std::set<int>> ports = ListeningPortsOfTree(pid_);
    return !ports || ports->count(std::stoi(match[2].str())) > 0;
  };
  while (!owns_printed_port()) {
    if (Clock::now() > deadline) {
      std::string tail = OutputTail();
      const bool printed = std::regex_search(tail, match, listening);
      Stop(std::chrono::seconds(2));
      throw ServerStartError(
          "'" + CommandLine() + "' " +
          (printed ? "printed 'listening on " + match[1].str() + ":" + match[2].str() +
                         "' but none of its processes listens on that port"
                   : std::string("did not print 'listening on' within the startup timeout")) +
          "; it printed:\n" + tail);
    }
    if (!Alive()) {
      throw ServerStartError("'" + CommandLine() + "' exited during start-up (status " +
                             std::to_string(exit_status_) + "); it printed:\n" + OutputTail());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  port_ = std::stoi(match[2].str());
  url_ = "http://" + match[1].str() + ":" + std::to_string(port_);
  while (HttpGetStatus(match[1].str(), port_, "/health", std::chrono::milliseconds(2000)) != 200) {
    if (Clock::now() > deadline || !Alive()) {
      std::string tail = OutputTail();
      Stop(std::chrono::seconds(2));
      throw ServerStartError("'" + CommandLine() + "' listens on " + url_ +
                             " but /health never answered 200; it printed:\n" + tail);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

ServerProcess::~ServerProcess() { Stop(std::chrono::seconds(5)); }

std::string ServerProcess::CommandLine() const {
  std::string line;
  for (const std::string& arg : argv_) line += (line.empty() ? "" : " ") + arg;
  return line;
}

std::string ServerProcess::OutputTail() {
  // Only what this process wrote: the log may hold earlier servers' lines.
  std::ifstream in(log_path_, std::ios::binary);
  in.seekg(0, std::ios::end);
  std::streamoff end = in.tellg();
  std::streamoff begin = std::max<std::streamoff>(log_start_, end - static_cast<std::streamoff>(kMaxOutput));
  if (end <= begin) return {};
  in.seekg(begin);
  std::string text(static_cast<size_t>(end - begin), '\0');
  in.read(text.data(), end - begin);
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

bool ServerProcess::Alive() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  pid_t got = waitpid(pid_, &status, WNOHANG);
  if (got == pid_) {
    reaped_ = true;
    exit_status_ = status;
    return false;
  }
  return true;
}

int ServerProcess::Stop(std::chrono::duration<double> grace) {
  if (pid_ <= 0) return exit_status_;
  if (Alive()) {
    kill(pid_, SIGTERM);
    Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace);
    while (Alive() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (Alive()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &exit_status_, 0);
      reaped_ = true;
      exit_status_ = -1;
    }
  }
  return exit_status_;
}

std::string ServerProcess::ExitDescription() const {
  if (!reaped_) return pid_ > 0 ? "still running" : "never started";
  if (exit_status_ == -1) return "killed by signal 9 after its stop grace period";
  if (WIFEXITED(exit_status_)) return "exit " + std::to_string(WEXITSTATUS(exit_status_));
  if (WIFSIGNALED(exit_status_)) {
    return "killed by signal " + std::to_string(WTERMSIG(exit_status_));
  }
  return "wait status " + std::to_string(exit_status_);
}

void ServerProcess::Kill() {
  if (Alive()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &exit_status_, 0);
    reaped_ = true;
  }
}

}  // namespace kvgate::suite
