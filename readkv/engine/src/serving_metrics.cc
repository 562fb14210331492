#include "readkv/engine/serving_metrics.h"

#include <prometheus/client_metric.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace readkv::engine {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

ClientMetric::Label MakeLabel(std::string name, std::string value) {
  ClientMetric::Label label;
  label.name = std::move(name);
  label.value = std::move(value);
  return label;
}

}  // namespace

std::vector<double> GeometricBuckets(double lo, double hi, int per_octave) {
  if (!(lo > 0.0) || !(hi > lo) || per_octave < 1) {
    throw std::invalid_argument("GeometricBuckets: need 0 < lo < hi and per_octave >= 1");
  }
  std::vector<double> bounds;
  for (int i = 0;; ++i) {
    // Computed from the index, not by repeated multiplication, so bounds print reproducibly.
    const double bound = lo * std::exp2(static_cast<double>(i) / per_octave);
    bounds.push_back(bound);
    if (bound >= hi) break;
  }
  return bounds;
}

ServingMetrics::ServingMetrics(std::string model_name, std::string kv_backend)
    : model_name_(std::move(model_name)),
      kv_backend_(std::move(kv_backend)),
      registry_(std::make_shared<prometheus::Registry>()) {
  const prometheus::Labels common = {{"model_name", model_name_}, {"kv_backend", kv_backend_}};
  auto gauge = [&](const char* name, const char* help) -> prometheus::Gauge& {
    return prometheus::BuildGauge()
        .Name(name)
        .Help(help)
        .Labels(common)
        .Register(*registry_)
        .Add({});
  };
  auto counter = [&](const char* name, const char* help) -> prometheus::Counter& {
    return prometheus::BuildCounter()
        .Name(name)
        .Help(help)
        .Labels(common)
        .Register(*registry_)
        .Add({});
  };
  auto histogram = [&](const char* name, const char* help,
                       std::vector<double> bounds) -> prometheus::Histogram& {
    return prometheus::BuildHistogram()
        .Name(name)
        .Help(help)
        .Labels(common)
        .Register(*registry_)
        .Add({}, std::move(bounds));
  };
  running_ = &gauge("vllm:num_requests_running", "Requests in the running batch.");
  waiting_ = &gauge("vllm:num_requests_waiting", "Requests accepted and waiting for the batch.");
  kv_usage_ = &gauge("vllm:kv_cache_usage_perc",
                     "KV-cache usage as a fraction of the backend's limit (1 = full; 0 if the "
                     "backend reports no limit).");
  // TTFT and E2E: 1 ms .. ~131 s; ITL: 0.1 ms .. ~13 s; 16 buckets per octave (see header).
  ttft_ = &histogram("vllm:time_to_first_token_seconds",
                     "Request arrival (read in full) to its first generated token, seconds.",
                     GeometricBuckets(0.001, 120.0, 16));
  itl_ = &histogram("vllm:inter_token_latency_seconds",
                    "Gap between successive generated tokens of one request, seconds.",
                    GeometricBuckets(0.0001, 10.0, 16));
  e2e_ = &histogram("vllm:e2e_request_latency_seconds",
                    "Request arrival to the last token of a finished request, seconds.",
                    GeometricBuckets(0.001, 120.0, 16));
  prompt_tokens_ = &counter("vllm:prompt_tokens_total", "Prompt tokens of admitted requests.");
  generation_tokens_ = &counter("vllm:generation_tokens_total", "Generated tokens.");
  finished_ = &prometheus::BuildCounter()
                   .Name("vllm:request_success_total")
                   .Help("Requests that ended without error, by finish reason (abort = cancelled).")
                   .Labels(common)
                   .Register(*registry_);
  errors_ = &prometheus::BuildCounter()
                 .Name("kvgate_request_errors_total")
                 .Help("Requests answered with an error or cancelled, by cause.")
                 .Labels(common)
                 .Register(*registry_);
  // Pre-create the finish reasons so a scrape shows zeros rather than absent series.
  for (FinishReason reason :
       {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled}) {
    finished_->Add({{"finished_reason", FinishReasonName(reason)}});
  }
  // Likewise one error cause, so error-rate rules and panels have a series before any error.
  errors_->Add({{"cause", ErrorKindName(ErrorKind::kInternal)}});
}

void ServingMetrics::SetRunning(int requests) { running_->Set(requests); }
void ServingMetrics::SetWaiting(int requests) { waiting_->Set(requests); }
void ServingMetrics::SetKvUsage(double fraction) { kv_usage_->Set(fraction); }
void ServingMetrics::ObserveTimeToFirstToken(double seconds) { ttft_->Observe(seconds); }
void ServingMetrics::ObserveInterTokenLatency(double seconds) { itl_->Observe(seconds); }
void ServingMetrics::ObserveEndToEndLatency(double seconds) { e2e_->Observe(seconds); }
void ServingMetrics::AddPromptTokens(int tokens) { prompt_tokens_->Increment(tokens); }
void ServingMetrics::AddGenerationTokens(int tokens) { generation_tokens_->Increment(tokens); }

void ServingMetrics::CountFinished(FinishReason reason) {
  finished_->Add({{"finished_reason", FinishReasonName(reason)}}).Increment();
}

void ServingMetrics::CountError(std::string_view cause) {
  errors_->Add({{"cause", std::string(cause)}}).Increment();
}

void ServingMetrics::CountCacheRejection(std::string_view reason) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  ++engine_rejections_[std::string(reason)];
}

void ServingMetrics::PublishLedgers(const KvLedgers& ledgers) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  ledgers_ = ledgers;
}

double ServingMetrics::ErrorCount(std::string_view cause) const {
  const prometheus::Labels labels = {{"cause", std::string(cause)}};
  if (!errors_->Has(labels)) return 0.0;
  return errors_->Add(labels).Value();
}

double ServingMetrics::FinishedCount(FinishReason reason) const {
  return finished_->Add({{"finished_reason", FinishReasonName(reason)}}).Value();
}

std::vector<MetricFamily> ServingMetrics::CollectLedgers() const {
  KvLedgers ledgers;
  std::map<std::string, int64_t> rejections;
  {
    std::lock_guard<std::mutex> lock(ledger_mu_);
    ledgers = ledgers_;
    rejections = engine_rejections_;
  }
  for (const auto& [reason, count] : ledgers.cache_rejections) rejections[reason] += count;
  // Always present (as 0), so an alert on rejections and its dashboard panel see a series from
  // the first scrape instead of "no data" until the first rejection.
  rejections.try_emplace(std::string(kInvalidPolicyRejection), 0);

  const std::vector<ClientMetric::Label> common = {MakeLabel("kv_backend", kv_backend_),
                                                   MakeLabel("model_name", model_name_)};
  auto scalar = [&](const char* name, const char* help, MetricType type, double value) {
    MetricFamily family{name, help, type, {}};
    ClientMetric metric;
    metric.label = common;
    if (type == MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
    return family;
  };

  std::vector<MetricFamily> families;
  families.push_back(scalar("readkv_capacity_bytes",
                            "Persistent KV bytes now: payload + metadata + residual window.",
                            MetricType::Gauge, static_cast<double>(ledgers.capacity_bytes)));
  families.push_back(scalar("readkv_logical_read_bytes_total",
                            "Payload bytes the readers chose, summed over decode steps.",
                            MetricType::Counter, static_cast<double>(ledgers.logical_read_bytes)));
  families.push_back(scalar("readkv_outlier_read_bytes_total",
                            "Of the logical reads, ReadKV outlier lists (0 when off).",
                            MetricType::Counter, static_cast<double>(ledgers.outlier_read_bytes)));
  families.push_back(scalar("readkv_physical_traffic_bytes_total",
                            "All bytes moved through memory by attention, summed over steps.",
                            MetricType::Counter,
                            static_cast<double>(ledgers.physical_traffic_bytes)));
  families.push_back(scalar("readkv_workspace_peak_bytes",
                            "Peak temporary bytes alive during one attention call.",
                            MetricType::Gauge, static_cast<double>(ledgers.workspace_peak_bytes)));
  families.push_back(scalar("readkv_encode_seconds_total", "Time spent encoding K/V, seconds.",
                            MetricType::Counter, ledgers.encode_seconds));
  families.push_back(scalar("readkv_attention_seconds_total",
                            "Time spent in decode attention calls, seconds.", MetricType::Counter,
                            ledgers.attention_seconds));

  // The read depth histogram: depth d falls in the bucket le="d"; the sum is total depth read.
  MetricFamily depth{"readkv_read_depth",
                     "Read depths the ReadKV reader chose (0..W).",
                     MetricType::Histogram,
                     {}};
  ClientMetric depth_metric;
  depth_metric.label = common;
  uint64_t cumulative = 0;
  double sum = 0.0;
  for (size_t d = 0; d < ledgers.read_depth_counts.size(); ++d) {
    const auto count = static_cast<uint64_t>(std::max<int64_t>(0, ledgers.read_depth_counts[d]));
    cumulative += count;
    sum += static_cast<double>(d) * static_cast<double>(count);
    depth_metric.histogram.bucket.push_back({cumulative, static_cast<double>(d)});
  }
  depth_metric.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  depth_metric.histogram.sample_count = cumulative;
  depth_metric.histogram.sample_sum = sum;
  depth.metric.push_back(std::move(depth_metric));
  families.push_back(std::move(depth));

  // A counter per key of `counts`, labelled `label` = key.
  auto labelled = [&](const char* name, const char* help, const char* label,
                      const std::map<std::string, int64_t>& counts) {
    MetricFamily family{name, help, MetricType::Counter, {}};
    for (const auto& [key, count] : counts) {
      ClientMetric metric;
      metric.label = common;
      metric.label.push_back(MakeLabel(label, key));
      metric.counter.value = static_cast<double>(count);
      family.metric.push_back(std::move(metric));
    }
    return family;
  };
  families.push_back(labelled("readkv_cache_rejections_total",
                              "Cache objects or read policies the KV backend refused, by reason.",
                              "reason", rejections));
  if (!ledgers.prefix_cache_objects.empty()) {
    families.push_back(labelled("readkv_prefix_cache_objects_total",
                                "Objects of the persistent prefix cache by outcome: hit (loaded "
                                "and accepted), miss, stored, evicted, write_failed.",
                                "result", ledgers.prefix_cache_objects));
  }
  return families;
}

std::vector<MetricFamily> ServingMetrics::Collect() const {
  std::vector<MetricFamily> families = registry_->Collect();
  std::vector<MetricFamily> ledgers = CollectLedgers();
  families.insert(families.end(), std::make_move_iterator(ledgers.begin()),
                  std::make_move_iterator(ledgers.end()));
  return families;
}

}  // namespace readkv::engine
