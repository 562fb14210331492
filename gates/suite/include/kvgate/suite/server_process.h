// A `kvgate serve` (or any server command) started by the suite as a child process on a free
// loopback port: spawned with stdout and stderr appended to a log file (a file, not a pipe, so a
// chatty server can never block on a full pipe), ready once it printed `listening on HOST:PORT`
// and answered GET /health with 200. Stopped with SIGTERM (it drains), then SIGKILL after a
// grace period. The destructor stops it, so a failing run never leaves servers behind; and it is
// started with a death signal (spawn.h), so neither does a suite killed with SIGKILL.
//
// Given a CPU list, the server runs on those CPUs (SpawnChild); otherwise on the starting thread's.
//
// Not thread-safe; one owner. Errors starting it throw ServerStartError with the command line and
// the tail of what the server printed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvgate/suite/cpu_placement.h"

namespace kvgate::suite {

class ServerStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ServerProcess {
 public:
  // argv[0] is the program; `--host 127.0.0.1 --port 0` are appended when `append_address`.
  // `cpus` empty: the calling thread's CPUs.
  ServerProcess(std::vector<std::string> argv, std::chrono::duration<double> startup_timeout,
                std::string log_path, bool append_address = true, CpuList cpus = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& url() const { return url_; }  // http://127.0.0.1:PORT
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const CpuList& cpus() const { return cpus_; }  // as given; empty: not placed
  std::string CommandLine() const;
  const std::string& log_path() const { return log_path_; }
  // What the server printed so far (stdout and stderr), at most the last 64 KiB.
  std::string OutputTail();

  bool Alive();
  // Once it has ended (Alive() returned false): how, e.g. "exit 0" or "killed by signal 9".
  std::string ExitDescription() const;
  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status as from waitpid (or -1
  // if it had to be killed). Idempotent.
  int Stop(std::chrono::duration<double> grace = std::chrono::seconds(20));
  // SIGKILL at once (crash tests). Reaps the child.
  void Kill();

 private:
  std::vector<std::string> argv_;
  std::string log_path_;
  CpuList cpus_;
  long long log_start_ = 0;  // log size before this server started
  pid_t pid_ = -1;
  std::string url_;
  int port_ = 0;
  int exit_status_ = 0;
  bool reaped_ = false;
};

// GET http://127.0.0.1:PORT/path; returns the HTTP status, or 0 when nothing answered within
// the timeout. For health probes only.
int HttpGetStatus(const std::string& host, int port, const std::string& path,
                  std::chrono::milliseconds timeout);

}  // namespace kvgate::suite
