// Live progress of one `kvgate run` as Prometheus series, for `--metrics-port` (pull) and
// `--pushgateway` (push of the final gate results). dashboards/ plots these next to the servers'
// own series; the names are part of the outside contract (dashboards/README.md):
//
//   kvgate_run_info{run_id}                     1 for the run this process executes (absent
//                                               until the run id is known)
//   kvgate_run_phase{phase}                     1 for the current phase, 0 for every other
//   kvgate_run_requests_done_total{server}      requests finished, server = baseline | candidate
//   kvgate_gate_result{gate, result}            gate = GateResult::gate (passkey | qa_f1 | p99 |
//                                               goodput); 1 for the decided result (pass | fail |
//                                               inconclusive), 0 for the two others; absent
//                                               until the gate is decided
//   kvgate_gate_observed{gate}, kvgate_gate_threshold{gate}
//                                               the gate's measured value and its threshold, in
//                                               the gate's own unit (ratio, F1 points, count)
//   kvgate_run_verdict{verdict}                 1 for go | no_go | inconclusive once decided
//
// Thread-safe: every method may be called from any thread while Serve() is answering scrapes.
// Labels are taken as given; an empty gate, phase or server throws std::invalid_argument.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::suite {

// A push the Pushgateway refused or could not take (unreachable, non-2xx answer).
class PushError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RunMetrics {
 public:
  // The run id may be unknown at start (the history assigns it): pass "" and call SetRunId.
  explicit RunMetrics(std::string run_id = "");
  ~RunMetrics();  // stops the listener, if any
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // Replaces the run id kvgate_run_info carries.
  void SetRunId(std::string_view run_id);
  // Marks `phase` current (1) and every phase set before as not (0).
  void SetPhase(std::string_view phase);
  void AddRequestsDone(std::string_view server, int64_t requests = 1);
  // result: "pass" | "fail" | "inconclusive" (anything else throws std::invalid_argument).
  void SetGateResult(std::string_view gate, std::string_view result, double observed,
                     double threshold);
  // verdict: "go" | "no_go" | "inconclusive".
  void SetVerdict(std::string_view verdict);

  // Every family, ready for prometheus::TextSerializer.
  std::vector<prometheus::MetricFamily> Collect() const;
  // The Prometheus text exposition format (version 0.0.4) of Collect().
  std::string Text() const;

  // Answers GET /metrics (and GET /) on 127.0.0.1:port from a background thread; port 0 picks a
  // free one. Returns the bound port. Throws std::runtime_error if the port cannot be bound, and
  // std::logic_error when already serving.
  int Serve(int port);
  // Stops answering (idempotent); the destructor calls it.
  void StopServing();

  // PUTs Text() to `url`/metrics/job/<job> (url = http://HOST[:PORT][/prefix]; https is not
  // supported), replacing the previous push of that job. `timeout` bounds connect + exchange.
  // Throws std::invalid_argument for a bad url or job, PushError for a failed push.
  void PushToGateway(const std::string& url, const std::string& job,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) const;

 private:
  class Listener;

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* info_;
  prometheus::Family<prometheus::Gauge>* phase_;
  prometheus::Family<prometheus::Counter>* requests_done_;
  prometheus::Family<prometheus::Gauge>* gate_result_;
  prometheus::Family<prometheus::Gauge>* gate_observed_;
  prometheus::Family<prometheus::Gauge>* gate_threshold_;
  prometheus::Family<prometheus::Gauge>* verdict_;

  mutable std::mutex mu_;  // guards the enum-like families' "exactly one is 1" updates
  std::string run_id_;
  std::vector<std::string> phases_;
  std::unique_ptr<Listener> listener_;
};

}  // namespace kvgate::suite
