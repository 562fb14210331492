// The Prometheus series of one serving process, named as vLLM names them so that dashboards
// and the suite's ledger scraping work against vLLM and kvgate alike.
//
// vLLM series (every one labelled model_name and kv_backend):
//   vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (0..1)
//   vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
//   vllm:e2e_request_latency_seconds (histograms)
//   vllm:prompt_tokens_total, vllm:generation_tokens_total,
//   vllm:request_success_total{finished_reason="stop"|"length"|"abort"}
// kvgate series:
//   kvgate_request_errors_total{cause}: every request that failed, by cause (bad input, queue
//   full, cancellation, model failure, ...); cause="internal" is always exported, from 0.
// ReadKV ledgers (DecodeModel::ledgers(), docs/ledgers.md), published by the worker:
//   readkv_capacity_bytes, readkv_workspace_peak_bytes (gauges), readkv_logical_read_bytes_total,
//   readkv_outlier_read_bytes_total (its outlier-list part), readkv_physical_traffic_bytes_total,
//   readkv_encode_seconds_total, readkv_attention_seconds_total (counters),
//   readkv_read_depth (histogram over depths 0..W, from read_depth_counts),
//   readkv_cache_rejections_total{reason} (reason="invalid_policy" is always exported, from 0),
//   readkv_prefix_cache_objects_total{result="hit"|"miss"|"stored"|"evicted"|"write_failed"}
//   (only when the model has a prefix cache).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "readkv/engine/decode_model.h"
#include "readkv/engine/request.h"

namespace readkv::engine {

// Bucket bounds lo, lo·2^(1/per_octave), ... up to and including the first bound >= hi. With 16
// per octave adjacent bounds differ by 4.4%, so a P99 read off the histogram is within a few
// percent -- fine enough to see a 5% P99 regression on a dashboard (the gates themselves use the
// load generator's raw samples, not these buckets).
std::vector<double> GeometricBuckets(double lo, double hi, int per_octave);

// The engine's rejection reason for a request whose read policy the KV backend refused.
inline constexpr std::string_view kInvalidPolicyRejection = "invalid_policy";

// Thread-safe: every method may be called from any thread.
class ServingMetrics {
 public:
  ServingMetrics(std::string model_name, std::string kv_backend);

  void SetRunning(int requests);
  void SetWaiting(int requests);
  void SetKvUsage(double fraction);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveEndToEndLatency(double seconds);
  void AddPromptTokens(int tokens);
  void AddGenerationTokens(int tokens);
  void CountFinished(FinishReason reason);  // stop, length, abort (not errors)
  void CountError(std::string_view cause);
  void CountCacheRejection(std::string_view reason);  // seen by the engine (e.g. invalid_policy)
  // Replaces the ledger snapshot served at the next scrape.
  void PublishLedgers(const KvLedgers& ledgers);

  // Every family, ready for prometheus::TextSerializer.
  std::vector<prometheus::MetricFamily> Collect() const;
  // Current value of one error cause (tests and logs).
  double ErrorCount(std::string_view cause) const;
  double FinishedCount(FinishReason reason) const;

 private:
  std::vector<prometheus::MetricFamily> CollectLedgers() const;

  std::string model_name_;
  std::string kv_backend_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Family<prometheus::Counter>* errors_;

  mutable std::mutex ledger_mu_;
  KvLedgers ledgers_;
  std::map<std::string, int64_t> engine_rejections_;
};

}  // namespace readkv::engine
