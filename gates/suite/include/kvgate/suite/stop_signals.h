// SIGINT and SIGTERM as a stop flag, for the lifetime of one StopSignals object: a long operation
// (`kvgate run`, `kvgate load`) polls the flag or hands it to loadgen::RunLoad, and ends cleanly
// with what it measured kept, instead of dying mid-write. The previous handlers come back when
// the object goes. One object at a time per process; the flag is one process-wide atomic, which
// the handler only stores to (async-signal-safe).
#pragma once

#include <atomic>
#include <csignal>

namespace kvgate::suite {

class StopSignals {
 public:
  StopSignals();  // clears the flag and installs the handlers
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Set once SIGINT or SIGTERM arrived while an object was alive.
  static const std::atomic<bool>& Flag();
  static bool Requested() { return Flag().load(); }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace kvgate::suite
