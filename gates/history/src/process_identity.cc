#include "kvgate/history/process_identity.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

namespace kvgate::history {
namespace {

std::string HostName() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "unknown-host";
  return buffer;
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

struct ProcStat {
  char state = '?';
  std::string start_ticks;
};

// /proc/<pid>/stat: "pid (comm) state ppid … starttime(22) …". comm may contain spaces and
// parentheses, so fields are counted after the last ')'.
std::optional<ProcStat> ReadProcStat(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  ProcStat stat;
  std::string field;
  // Field 3 is the state; field 22 the start time. After ')' the first token is field 3.
  for (int index = 3; fields >> field; ++index) {
    if (index == 3) stat.state = field.empty() ? '?' : field[0];
    if (index == 22) {
      stat.start_ticks = field;
      return stat;
    }
  }
  return std::nullopt;
}

std::string StartToken(int64_t pid) {
  std::string boot = BootId();
  auto stat = ReadProcStat(pid);
  if (boot.empty() || !stat) return "";
  return boot + "/" + stat->start_ticks;
}

}  // namespace

ProcessIdentity ProcessIdentity::Current() {
  auto pid = static_cast<int64_t>(getpid());
  return ProcessIdentity{HostName(), pid, StartToken(pid)};
}

std::optional<ProcessIdentity> ProcessIdentity::OfPid(int64_t pid) {
  if (pid <= 0) return std::nullopt;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return std::nullopt;
  return ProcessIdentity{HostName(), pid, StartToken(pid)};
}

Liveness CheckLiveness(const ProcessIdentity& identity) {
  if (identity.host != HostName()) return Liveness::kUnknown;
  if (identity.pid <= 0) return Liveness::kGone;
  if (!identity.start_token.empty()) {
    auto stat = ReadProcStat(identity.pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') return Liveness::kGone;
    // A different boot id or start time means a reboot or a reused pid.
    return StartToken(identity.pid) == identity.start_token ? Liveness::kAlive : Liveness::kGone;
  }
  // No /proc when the run began: fall back to "does some process have that pid".
  if (kill(static_cast<pid_t>(identity.pid), 0) != 0 && errno == ESRCH) return Liveness::kGone;
  return Liveness::kAlive;
}

}  // namespace kvgate::history
