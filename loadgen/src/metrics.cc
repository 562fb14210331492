#include "kvgate/loadgen/metrics.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>

#include "kvgate/stats/percentile.h"

namespace kvgate::loadgen {
namespace {

std::string Fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

}  // namespace

LatencyStats ComputeLatencyStats(std::vector<double> samples_ms) {
  LatencyStats stats;
  if (samples_ms.empty()) return stats;
  std::sort(samples_ms.begin(), samples_ms.end());
  stats.count = static_cast<int64_t>(samples_ms.size());
  stats.mean_ms = std::accumulate(samples_ms.begin(), samples_ms.end(), 0.0) /
                  static_cast<double>(samples_ms.size());
  stats.min_ms = samples_ms.front();
  stats.max_ms = samples_ms.back();
  // The floor(n·p) rule lives in kvgate::stats; nothing here computes a percentile its own way.
  stats.p50_ms = *stats::PercentileOfSorted(samples_ms, 0.50);
  stats.p90_ms = *stats::PercentileOfSorted(samples_ms, 0.90);
  stats.p95_ms = *stats::PercentileOfSorted(samples_ms, 0.95);
  stats.p99_ms = *stats::PercentileOfSorted(samples_ms, 0.99);
  return stats;
}

bool MeetsSlo(const RequestRecord& record, const Slo& slo) {
  if (!record.ok()) return false;
  if (slo.ttft_ms) {
    auto ttft = record.TtftSeconds();
    if (!ttft || *ttft * 1e3 > *slo.ttft_ms) return false;
  }
  if (slo.tpot_ms && record.completion_tokens != 1) {
    // One output token has no decode phase, so no TPOT to bound. Without `usage` the TPOT is
    // unknown and cannot be shown to meet the bound.
    auto tpot = record.TpotSeconds();
    if (!tpot || *tpot * 1e3 > *slo.tpot_ms) return false;
  }
  if (slo.e2e_ms) {
    auto e2e = record.E2eSeconds();
    if (!e2e || *e2e * 1e3 > *slo.e2e_ms) return false;
  }
  return true;
}

double MeasuredDurationSeconds(std::span<const RequestRecord> records) {
  int64_t first = std::numeric_limits<int64_t>::max();
  int64_t last = std::numeric_limits<int64_t>::min();
  for (const RequestRecord& r : records) {
    if (r.warmup) continue;
    first = std::min(first, r.scheduled_ns);
    last = std::max(last, std::max(r.end_ns, r.scheduled_ns));
  }
  if (first > last) return 0.0;
  return static_cast<double>(last - first) * 1e-9;
}

LatencySamples MeasuredLatencies(std::span<const RequestRecord> records) {
  LatencySamples samples;
  for (const RequestRecord& r : records) {
    if (r.warmup || !r.ok()) continue;
    if (auto v = r.TtftSeconds()) samples.ttft.push_back(*v * 1e3);
    if (auto v = r.TpotSeconds()) samples.tpot.push_back(*v * 1e3);
    if (auto v = r.E2eSeconds()) samples.e2e.push_back(*v * 1e3);
    for (double gap : r.ItlSeconds()) samples.itl.push_back(gap * 1e3);
  }
  return samples;
}

Summary Summarize(std::span<const RequestRecord> records, const Slo& slo, double duration_s) {
  Summary s;
  s.duration_s = duration_s;
  for (const RequestRecord& r : records) {
    if (r.warmup) continue;
    ++s.requests;
    if (!r.ok()) {
      ++s.errored;
      ++s.errors_by_cause[r.error_cause];
      continue;
    }
    ++s.completed;
    if (MeetsSlo(r, slo)) ++s.good;
    if (r.completion_tokens < 0) ++s.missing_usage;
    if (r.prompt_tokens > 0) s.total_input_tokens += r.prompt_tokens;
    if (r.completion_tokens > 0) s.total_output_tokens += r.completion_tokens;
  }
  if (duration_s > 0) {
    s.request_throughput_rps = static_cast<double>(s.completed) / duration_s;
    s.input_token_throughput = static_cast<double>(s.total_input_tokens) / duration_s;
    s.output_token_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.goodput_rps = static_cast<double>(s.good) / duration_s;
  }
  s.slo_attainment = s.requests > 0 ? static_cast<double>(s.good) / s.requests : 0.0;
  LatencySamples samples = MeasuredLatencies(records);
  s.ttft = ComputeLatencyStats(std::move(samples.ttft));
  s.tpot = ComputeLatencyStats(std::move(samples.tpot));
  s.itl = ComputeLatencyStats(std::move(samples.itl));
  s.e2e = ComputeLatencyStats(std::move(samples.e2e));
  const bool multi_turn = std::any_of(records.begin(), records.end(),
                                      [](const RequestRecord& r) { return r.turn > 1; });
  if (multi_turn) {
    std::map<int, std::vector<double>> ttft_ms;
    for (const RequestRecord& r : records) {
      if (r.warmup || !r.ok()) continue;
      if (std::optional<double> ttft = r.TtftSeconds()) ttft_ms[r.turn].push_back(*ttft * 1e3);
    }
    for (auto& [turn, samples_ms] : ttft_ms) {
      s.ttft_by_turn[turn] = ComputeLatencyStats(std::move(samples_ms));
    }
  }
  return s;
}

Validity CheckValidity(std::span<const RequestRecord> records, LoadMode mode,
                       const ValidityThresholds& thresholds) {
  Validity v;
  std::vector<double> lag_ms;
  int64_t measured = 0;
  int64_t sched_first = std::numeric_limits<int64_t>::max(), sched_last = 0;
  int64_t sent_first = std::numeric_limits<int64_t>::max(), sent_last = 0;
  for (const RequestRecord& r : records) {
    if (r.warmup) continue;
    ++measured;
    sched_first = std::min(sched_first, r.scheduled_ns);
    sched_last = std::max(sched_last, r.scheduled_ns);
    // The generator acted on a request when it sent it, or when it tried to connect for it (a
    // refused connection is the server's failure, not a missed send).
    int64_t acted_ns = r.sent_ns >= 0 ? r.sent_ns : r.issued_ns;
    // Records stored without issued_ns (older history rows): a refused connection was still
    // attempted, at about its scheduled time.
    if (acted_ns < 0 && r.error_cause == "connect") acted_ns = r.scheduled_ns;
    if (acted_ns < 0) {
      ++v.unsent;
      continue;
    }
    sent_first = std::min(sent_first, acted_ns);
    sent_last = std::max(sent_last, acted_ns);
    if (r.sent_ns >= 0) lag_ms.push_back(static_cast<double>(r.sent_ns - r.scheduled_ns) * 1e-6);
  }
  const int64_t sent = measured - v.unsent;
  v.send_lag = ComputeLatencyStats(std::move(lag_ms));
  if (measured == 0) {
    v.valid = false;
    v.reasons.push_back("no measured requests");
    return v;
  }
  if (mode == LoadMode::kOpenLoop && v.send_lag.count > 0) {
    const LatencyStats ttft = ComputeLatencyStats(MeasuredLatencies(records).ttft);
    const double relative = ttft.count > 0 ? thresholds.max_send_lag_share * ttft.p99_ms : 0.0;
    const double bound = std::max(thresholds.max_send_lag_p99_ms, relative);
    if (v.send_lag.p99_ms > bound) {
      v.reasons.push_back(
          "P99 send lag " + Fixed(v.send_lag.p99_ms, 3) + " ms > " + Fixed(bound, 3) +
          " ms (the larger of " + Fixed(thresholds.max_send_lag_p99_ms, 3) + " ms and " +
          Fixed(100.0 * thresholds.max_send_lag_share, 1) + "% of the run's P99 TTFT " +
          Fixed(ttft.p99_ms, 1) +
          " ms): the generator did not send on schedule (CPU busy, or every connection was in "
          "use)");
    }
  }
  if (mode == LoadMode::kOpenLoop) {
    if (measured >= 2 && sched_last > sched_first) {
      v.scheduled_rate_rps =
          static_cast<double>(measured - 1) / ((sched_last - sched_first) * 1e-9);
      double achieved = 0.0;
      if (sent >= 2 && sent_last > sent_first) {
        achieved = static_cast<double>(sent - 1) / ((sent_last - sent_first) * 1e-9);
      }
      v.achieved_rate_rps = achieved;
      v.achieved_fraction = achieved / *v.scheduled_rate_rps;
      if (*v.achieved_fraction < thresholds.min_achieved_rate_fraction) {
        v.reasons.push_back("achieved send rate " + Fixed(achieved, 2) + " req/s is " +
                            Fixed(100.0 * *v.achieved_fraction, 1) + "% of the scheduled " +
                            Fixed(*v.scheduled_rate_rps, 2) + " req/s (< " +
                            Fixed(100.0 * thresholds.min_achieved_rate_fraction, 1) + "%)");
      }
    }
  } else if (sent == 0) {
    v.reasons.push_back("no request was sent");
  }
  if (v.unsent > 0) {
    v.reasons.push_back(std::to_string(v.unsent) +
                        " requests were never sent (they timed out waiting for a free "
                        "connection; raise max_connections or lower the load)");
  }
  v.valid = v.reasons.empty();
  return v;
}

std::string Validity::ResultLine() const {
  if (valid) return "Result is : VALID";
  std::string line = "Result is : INVALID (";
  for (size_t i = 0; i < reasons.size(); ++i) {
    if (i > 0) line += "; ";
    line += reasons[i];
  }
  return line + ")";
}

}  // namespace kvgate::loadgen
