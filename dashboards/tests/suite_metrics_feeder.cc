// Stands in for `kvgate run` in the dashboards' integration test: a kvgate::suite::RunMetrics
// that walks a scripted run (phases, requests done, each gate decided, a verdict), serves it on
// 127.0.0.1 (job=suite) and, given --pushgateway URL, pushes the final results (job=kvgate_run).
// The series are the real class's, so the gate panels are checked against what kvgate run
// exports; only the run itself is scripted, to keep the test seconds long.
//
// Usage: kvgate_suite_metrics_feeder [--pushgateway URL] [--seconds N]
// Prints `listening on 127.0.0.1:PORT`, then `pushed` after a push, and exits after N seconds
// (default 600) or on SIGTERM/SIGINT.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "kvgate/suite/run_metrics.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  std::string pushgateway;
  double seconds = 600.0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--pushgateway" && i + 1 < argc) {
      pushgateway = argv[++i];
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--pushgateway URL] [--seconds N]\n", argv[0]);
      return 2;
    }
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  try {
    kvgate::suite::RunMetrics metrics("feeder-run-1");
    const int port = metrics.Serve(0);
    std::printf("listening on 127.0.0.1:%d\n", port);
    std::fflush(stdout);

    for (const char* phase : {"servers", "quality", "load"}) metrics.SetPhase(phase);
    metrics.SetGateResult("passkey", "pass", 200, 200);
    metrics.SetGateResult("qa_f1", "pass", -0.4, -1.0);
    metrics.AddRequestsDone("baseline", 40);
    metrics.AddRequestsDone("candidate", 40);
    metrics.SetGateResult("p99", "fail", 1.09, 1.05);
    metrics.SetGateResult("goodput", "inconclusive", 1.12, 1.10);
    metrics.SetPhase("done");
    metrics.SetVerdict("no_go");
    if (!pushgateway.empty()) {
      metrics.PushToGateway(pushgateway, "kvgate_run");
      std::printf("pushed\n");
      std::fflush(stdout);
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!g_stop && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "feeder: %s\n", e.what());
    return 1;
  }
  return 0;
}
