// Where `kvgate run` runs its local servers and itself (docs/gates.md, "Where local servers
// run"). The two servers never serve at once (quality on one, then the other; load pairs ABAB),
// so what makes their measurements comparable is that each serves on the same CPUs, away from
// the suite's own threads (the load generator's event loop, the quality clients). Left to the OS,
// one of two identical servers sat beside the load generator for a whole run on 2 cores and they
// measured 0.86x to 1.27x apart in goodput.
//
// Placement `split` (the policy's default): the suite and the threads it starts on the first K
// of the CPUs it may run on, every local server on all the others (the same set for both).
// K = placement.suite_cpus, or max(1, N/4) of N CPUs when that is 0. With one CPU nothing can be
// split: everything shares it, which is equal by construction since the servers take turns.
// Placement `shared`: nothing is pinned, for machines where the user places the processes
// (their own taskset or cgroup). External (`kind = "url"`) servers are never placed.
//
// CPU numbers are the kernel's (as sched_getaffinity(2) and /proc/self/status name them).
// Linux only.
#pragma once

#include <string>
#include <vector>

#include "kvgate/policy/policy.h"

namespace kvgate::suite {

// CPU numbers, ascending, no repeats.
using CpuList = std::vector<int>;

// The CPUs the calling thread may run on. Throws std::system_error if the kernel will not say.
CpuList AllowedCpus();

// "0", "1-3", "0,2-5": runs of consecutive CPUs as ranges, as taskset(1) and /proc print them;
// "" for none.
std::string FormatCpuList(const CpuList& cpus);

// Who runs where for one `kvgate run`.
struct CpuPlacement {
  bool pinned = false;  // split: the suite's thread and its local servers are pinned
  CpuList allowed;      // the CPUs the suite could run on when it planned
  CpuList suite;        // the suite's thread and every thread it starts (= allowed if not pinned)
  CpuList servers;      // every local server (= allowed if not pinned)

  // One line for the run's progress, e.g. "placement: the suite and its load generator on CPUs
  // 0, local servers on CPUs 1 (of 0-1)".
  std::string Describe() const;
};

// Plans a run's placement on `allowed` (non-empty, ascending). Throws std::invalid_argument when
// an explicit placement.suite_cpus leaves no CPU for the servers, naming the key, its value and
// the allowed CPUs.
CpuPlacement PlanPlacement(const policy::PlacementSpec& spec, const CpuList& allowed);

// Runs the calling thread on `cpus` (threads it creates from then on inherit them) until
// destroyed, then puts back the CPU set it had. The constructor throws std::system_error when
// the kernel refuses the set (EINVAL: none of them is allowed); a failed restore is ignored.
// Belongs to the thread that made it; not copyable or movable.
class ScopedThreadAffinity {
 public:
  explicit ScopedThreadAffinity(const CpuList& cpus);
  ~ScopedThreadAffinity();
  ScopedThreadAffinity(const ScopedThreadAffinity&) = delete;
  ScopedThreadAffinity& operator=(const ScopedThreadAffinity&) = delete;

 private:
  CpuList previous_;
};

}  // namespace kvgate::suite
