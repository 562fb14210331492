#include "kvgate/suite/stop_signals.h"

namespace kvgate::suite {
namespace {

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler stores to it");

extern "C" void OnStopSignal(int) { g_stop_requested.store(true); }

}  // namespace

StopSignals::StopSignals() {
  g_stop_requested.store(false);
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

const std::atomic<bool>& StopSignals::Flag() { return g_stop_requested; }

}  // namespace kvgate::suite
