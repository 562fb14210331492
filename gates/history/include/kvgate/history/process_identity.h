// Who owns a `running` run: enough to tell, later and from another process, whether that owner is
// still alive — even after its pid has been reused. On Linux the start token is
// "<boot_id>/<process start time in clock ticks since boot>" (from /proc), which no other process
// shares; elsewhere it is empty and only the pid is checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kvgate::history {

struct ProcessIdentity {
  std::string host;  // gethostname()
  int64_t pid = 0;
  std::string start_token;  // see above; may be empty

  bool operator==(const ProcessIdentity&) const = default;

  // The calling process.
  static ProcessIdentity Current();
  // A process on this host by pid; nullopt when no such process exists.
  static std::optional<ProcessIdentity> OfPid(int64_t pid);
};

enum class Liveness {
  kAlive,    // the same process (pid and start token match) is still running
  kGone,     // it exited, is a zombie, its pid was reused, or the machine rebooted since
  kUnknown,  // it ran on another host; this process cannot tell
};

Liveness CheckLiveness(const ProcessIdentity& identity);

}  // namespace kvgate::history
