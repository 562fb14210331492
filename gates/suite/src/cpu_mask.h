// A CPU list as the kernel's affinity calls take it (sched_setaffinity(2)): shared by the
// placement (cpu_placement.h) and SpawnChild, which must build the mask before it forks (the
// child may only make async-signal-safe calls, and allocating is not one).
#pragma once

#include <sched.h>

#include <cstddef>
#include <memory>

#include "kvgate/suite/cpu_placement.h"

namespace kvgate::suite {

class CpuMask {
 public:
  // A mask with room for CPUs 0 .. capacity-1, none set.
  explicit CpuMask(int capacity);
  // A mask holding `cpus`. Throws std::invalid_argument for a negative CPU number.
  explicit CpuMask(const CpuList& cpus);

  cpu_set_t* get() const { return set_.get(); }
  size_t bytes() const { return bytes_; }
  CpuList ToList() const;

 private:
  struct Free {
    void operator()(cpu_set_t* set) const { CPU_FREE(set); }
  };
  int capacity_;
  size_t bytes_;
  std::unique_ptr<cpu_set_t, Free> set_;
};

}  // namespace kvgate::suite
