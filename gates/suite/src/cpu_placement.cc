#include "kvgate/suite/cpu_placement.h"

#include <algorithm>
#include <cerrno>
#include <new>
#include <stdexcept>
#include <system_error>

#include "cpu_mask.h"

namespace kvgate::suite {
namespace {

void SetThreadCpus(const CpuList& cpus) {
  const CpuMask mask(cpus);
  if (sched_setaffinity(0, mask.bytes(), mask.get()) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            "cannot run this thread on CPUs " + FormatCpuList(cpus));
  }
}

std::string CountOf(size_t n) { return std::to_string(n) + (n == 1 ? " CPU" : " CPUs"); }

}  // namespace

CpuMask::CpuMask(int capacity)
    : capacity_(std::max(capacity, 1)),
      bytes_(CPU_ALLOC_SIZE(capacity_)),
      set_(CPU_ALLOC(capacity_)) {
  if (!set_) throw std::bad_alloc();
  CPU_ZERO_S(bytes_, set_.get());
}

CpuMask::CpuMask(const CpuList& cpus)
    : CpuMask(cpus.empty() ? 1 : *std::max_element(cpus.begin(), cpus.end()) + 1) {
  for (int cpu : cpus) {
    if (cpu < 0) throw std::invalid_argument("CPU numbers are >= 0, got " + std::to_string(cpu));
    CPU_SET_S(static_cast<size_t>(cpu), bytes_, set_.get());
  }
}

CpuList CpuMask::ToList() const {
  CpuList cpus;
  for (int cpu = 0; cpu < capacity_; ++cpu) {
    if (CPU_ISSET_S(static_cast<size_t>(cpu), bytes_, set_.get())) cpus.push_back(cpu);
  }
  return cpus;
}

CpuList AllowedCpus() {
  // The kernel refuses (EINVAL) a mask smaller than its own CPU count: grow until it fits.
  for (int capacity = 1024;; capacity *= 2) {
    const CpuMask mask(capacity);
    if (sched_getaffinity(0, mask.bytes(), mask.get()) == 0) return mask.ToList();
    if (errno != EINVAL || capacity >= (1 << 20)) {
      throw std::system_error(errno, std::generic_category(), "cannot read this thread's CPUs");
    }
  }
}

std::string FormatCpuList(const CpuList& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string CpuPlacement::Describe() const {
  const std::string all = FormatCpuList(allowed);
  if (!pinned) {
    return "placement: shared (placement.mode = \"shared\"): the suite, its load generator and "
           "the local servers on CPUs " +
           all + ", wherever the OS puts them";
  }
  if (suite == servers) {
    return "placement: one CPU (" + all +
           "): the suite, its load generator and the local "
           "servers share it (the servers take turns, so each serves beside the same clients)";
  }
  return "placement: the suite and its load generator on CPUs " + FormatCpuList(suite) +
         ", local servers on CPUs " + FormatCpuList(servers) + " (of " + all + ")";
}

CpuPlacement PlanPlacement(const policy::PlacementSpec& spec, const CpuList& allowed) {
  if (allowed.empty()) throw std::invalid_argument("placement: there is no CPU to run on");
  CpuPlacement plan{false, allowed, allowed, allowed};
  if (spec.mode == policy::PlacementSpec::Mode::kShared) return plan;
  plan.pinned = true;
  const size_t n = allowed.size();
  if (spec.suite_cpus == 0 && n == 1) return plan;  // nothing to split: all share the one CPU
  const size_t k =
      spec.suite_cpus > 0 ? static_cast<size_t>(spec.suite_cpus) : std::max<size_t>(1, n / 4);
  if (k >= n) {
    throw std::invalid_argument("placement.suite_cpus = " + std::to_string(spec.suite_cpus) +
                                " leaves no CPU for the servers: this process may run on " +
                                CountOf(n) + " (" + FormatCpuList(allowed) + ")");
  }
  plan.suite.assign(allowed.begin(), allowed.begin() + static_cast<std::ptrdiff_t>(k));
  plan.servers.assign(allowed.begin() + static_cast<std::ptrdiff_t>(k), allowed.end());
  return plan;
}

ScopedThreadAffinity::ScopedThreadAffinity(const CpuList& cpus) : previous_(AllowedCpus()) {
  SetThreadCpus(cpus);
}

ScopedThreadAffinity::~ScopedThreadAffinity() {
  try {
    SetThreadCpus(previous_);
  } catch (const std::exception&) {
    // The CPUs it had are gone (a cpuset shrank meanwhile): it keeps the set it runs on.
  }
}

}  // namespace kvgate::suite
