// Metrics of a run, computed from per-request records only, so the gates can recompute them from
// stored records (gates/history) exactly as the generator did. Definitions:
// docs/definitions.md — latency from the scheduled send time, percentiles by the floor(n·p) rule
// of kvgate::stats (the only percentile implementation), goodput per vLLM/AIPerf.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvgate/loadgen/record.h"
#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen {

// Distribution of one latency, in milliseconds. count == 0 means no samples (other fields 0).
struct LatencyStats {
  int64_t count = 0;
  double mean_ms = 0, min_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
};

// Computes count, mean, min, max and the percentiles via kvgate::stats::PercentileOfSorted.
LatencyStats ComputeLatencyStats(std::vector<double> samples_ms);

struct Summary {
  int64_t requests = 0;   // measured requests (warmup excluded)
  int64_t completed = 0;  // measured requests that succeeded
  int64_t errored = 0;
  std::map<std::string, int64_t> errors_by_cause;  // RequestRecord::error_cause -> count
  int64_t missing_usage = 0;  // completed requests whose server sent no `usage`

  double duration_s = 0;              // the denominator of every rate below
  double request_throughput_rps = 0;  // completed / duration
  int64_t total_input_tokens = 0;     // from `usage`, completed requests
  int64_t total_output_tokens = 0;
  double input_token_throughput = 0;   // tokens/s
  double output_token_throughput = 0;  // tokens/s

  // Goodput = completed requests meeting every SLO bound / duration. With an empty SLO every
  // completed request is good. Attainment = good / measured requests (errors count as not good).
  int64_t good = 0;
  double goodput_rps = 0;
  double slo_attainment = 0;

  // Over completed measured requests. TPOT needs >= 2 output tokens; ITL pools the gaps between
  // successive token chunks of every completed request.
  LatencyStats ttft, tpot, itl, e2e;
  // Multi-turn runs only (some record has turn > 1; empty otherwise): TTFT of the completed
  // measured requests by their turn in the session (RequestRecord::turn). Turn 1 sends a fresh
  // prompt; later turns resend the conversation, which a prefix cache may already hold.
  std::map<int, LatencyStats> ttft_by_turn;
};

// True when `record` completed and meets every bound set in `slo`.
bool MeetsSlo(const RequestRecord& record, const Slo& slo);

// The measurement window of the non-warmup records: earliest scheduled time to latest end (or
// latest scheduled time, for requests that never ended), in seconds; 0 when there are none.
double MeasuredDurationSeconds(std::span<const RequestRecord> records);

// The latency samples (milliseconds, in record order) of the completed non-warmup records: what
// Summarize's LatencyStats are computed from, and what anything resampling a run's latencies
// (the P99 gate's noise estimate) must pool.
struct LatencySamples {
  std::vector<double> ttft, tpot, itl, e2e;
};
LatencySamples MeasuredLatencies(std::span<const RequestRecord> records);

// Summary of the non-warmup records in `records` with rates over `duration_s` (> 0; pass
// MeasuredDurationSeconds(records) for the generator's own definition).
Summary Summarize(std::span<const RequestRecord> records, const Slo& slo, double duration_s);

// Did the generator hold its schedule? MLPerf-style: a bool plus every reason it failed.
struct Validity {
  bool valid = true;
  std::vector<std::string> reasons;  // one actionable line per failed check; empty when valid
  LatencyStats send_lag;             // sent - scheduled, ms, over measured requests that were sent
  int64_t unsent = 0;  // measured requests the generator never acted on (issued_ns < 0)
  // Open loop only (nullopt for closed loop): sends per second the schedule asked for and
  // what was achieved, both over the measured requests: (N - 1) / (span of scheduled times) and
  // (acted - 1) / (span of the times it acted: sent_ns, or issued_ns for a failed connect);
  // fraction = achieved / scheduled.
  std::optional<double> scheduled_rate_rps;
  std::optional<double> achieved_rate_rps;
  std::optional<double> achieved_fraction;

  // "Result is : VALID" or "Result is : INVALID (reason; reason)".
  std::string ResultLine() const;
};

Validity CheckValidity(std::span<const RequestRecord> records, LoadMode mode,
                       const ValidityThresholds& thresholds);

}  // namespace kvgate::loadgen
