// Internal to loadgen: what the generator's thread changes about itself for the duration of a
// run, restored on scope exit (RAII): its timer slack (Linux's default 50 us would dominate the
// send lag) and, when asked, SCHED_FIFO. Kept apart from the exchange and the scheduler.
#pragma once

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#endif

#include <cstring>
#include <string>

#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen::internal {

// Lowers the calling thread's timer slack (Linux's default 50 µs would dominate the send lag)
// for the duration of a run.
class TimerSlackGuard {
 public:
  TimerSlackGuard() {
#ifdef __linux__
    previous_ = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (previous_ > 0) prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
#endif
  }
  ~TimerSlackGuard() {
#ifdef __linux__
    if (previous_ > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(previous_), 0, 0, 0);
#endif
  }
  TimerSlackGuard(const TimerSlackGuard&) = delete;
  TimerSlackGuard& operator=(const TimerSlackGuard&) = delete;

 private:
  int previous_ = -1;
};

// Runs the calling thread under SCHED_FIFO for the duration of a run (LoadSettings::
// realtime_priority), restoring its policy afterwards.
class RealtimePriorityGuard {
 public:
  explicit RealtimePriorityGuard(int priority) {
    if (priority <= 0) return;
#ifdef __linux__
    if (pthread_getschedparam(pthread_self(), &old_policy_, &old_param_) != 0) {
      throw SettingsError("realtime-priority", "cannot read the thread's scheduling policy");
    }
    sched_param param{};
    param.sched_priority = priority;
    if (int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param); rc != 0) {
      throw SettingsError("realtime-priority", std::string("cannot switch to SCHED_FIFO (needs "
                                                           "CAP_SYS_NICE): ") +
                                                   std::strerror(rc));
    }
    active_ = true;
#else
    throw SettingsError("realtime-priority", "only supported on Linux");
#endif
  }
  ~RealtimePriorityGuard() {
#ifdef __linux__
    if (active_) pthread_setschedparam(pthread_self(), old_policy_, &old_param_);
#endif
  }
  RealtimePriorityGuard(const RealtimePriorityGuard&) = delete;
  RealtimePriorityGuard& operator=(const RealtimePriorityGuard&) = delete;

 private:
  bool active_ = false;
#ifdef __linux__
  int old_policy_ = SCHED_OTHER;
  sched_param old_param_{};
#endif
};

}  // namespace kvgate::loadgen::internal
