// Child processes the scenarios start and break on purpose that are not servers: a `kvgate run`
// to SIGKILL while it writes history, a `kvgate history list` to see what the next start does.
// (Servers go through kvgate::suite::ServerProcess, which also waits for them to listen.)
//
// A ChildProcess writes stdout and stderr to files (never pipes: a chatty child can never block on
// a full pipe) and is SIGKILLed and reaped by its destructor if still running, so a failing
// scenario leaves nothing behind. Not thread-safe; one owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kvgate/history/process_identity.h"

namespace kvgate::failure_tests {

class ChildProcess {
 public:
  // Starts argv (argv[0] is looked up on PATH when it has no '/'). Throws std::runtime_error
  // naming the command when it cannot be started.
  ChildProcess(std::vector<std::string> argv, std::string stdout_path, std::string stderr_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string CommandLine() const;
  bool Running();
  // Waits up to `timeout` for the child to end; its wait status, or nullopt if still running.
  std::optional<int> Wait(std::chrono::duration<double> timeout);
  // SIGKILL now and reap; returns the wait status. Idempotent.
  int Kill();
  // The wait status once reaped (Running() false), else nullopt.
  std::optional<int> status() const { return reaped_ ? std::optional<int>(status_) : std::nullopt; }

  std::string Stdout() const;  // what it wrote so far
  std::string Stderr() const;

 private:
  std::vector<std::string> argv_;
  std::string stdout_path_, stderr_path_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

// "exit 3", "killed by signal 9", ... for a waitpid status.
std::string DescribeWaitStatus(int status);

// The exit code of a normally ended child, or nullopt when a signal ended it.
std::optional<int> ExitCode(int status);

// What a finished command did.
struct CommandOutcome {
  int status = 0;          // wait status
  bool timed_out = false;  // it ran past the timeout and was SIGKILLed
  std::string out, err;
};

// Runs argv to completion (SIGKILL after `timeout`), output through files in `scratch_dir`
// named after `name`.
CommandOutcome RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                          const std::string& name, std::chrono::duration<double> timeout);

// Every live descendant of `pid` (children, their children, ...), from /proc, with identities
// that survive pid reuse, so they can be stopped later exactly (KillIfAlive).
std::vector<history::ProcessIdentity> Descendants(pid_t pid);

// SIGKILLs the process if it is still the same one (pid and start token match). True when it
// sent the signal.
bool KillIfAlive(const history::ProcessIdentity& process);

}  // namespace kvgate::failure_tests
