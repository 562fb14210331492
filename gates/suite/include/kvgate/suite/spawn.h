// How the suite and the failure scenarios start a child process: argv[0] found on PATH (as
// posix_spawnp finds it), stdout and stderr onto the given descriptors, its own process group (a
// Ctrl-C at the terminal reaches only the parent, which then stops its children in order), and
// SIGTERM delivered to the child when the parent dies without stopping it (Linux
// PR_SET_PDEATHSIG): a `kvgate run` killed with SIGKILL leaves no server behind holding its port
// or GPU memory. The child inherits no other descriptor of the parent's (stdin aside): no
// listening socket, lock or database handle stays open in it. Given a CPU list, the child runs on
// those CPUs from its first instruction (set between fork and exec, so no thread of the parent's
// ever changes its own CPUs for it, and the child never runs a moment elsewhere); otherwise it
// inherits the calling thread's.
//
// The death signal follows the *thread* that started the child: start children from a thread
// that outlives them (the suite's and the scenarios' main threads do).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "kvgate/suite/cpu_placement.h"

namespace kvgate::suite {

// Starts argv and stores its pid in *pid. Returns 0, or the errno that made it fail (ENOENT: not
// found on PATH, EACCES: not executable, EINVAL: none of `cpus` may be used, ...), as
// posix_spawnp does; nothing is left running then. `cpus` empty: the calling thread's CPUs.
// Thread-safe; the descriptors are only duplicated.
int SpawnChild(const std::vector<std::string>& argv, int stdout_fd, int stderr_fd, pid_t* pid,
               const CpuList& cpus = {});

}  // namespace kvgate::suite
