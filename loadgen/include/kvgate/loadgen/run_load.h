// The entry points: RunLoad() runs one load test against an OpenAI-compatible server and returns
// every per-request record with the summary and the run's validity; RunRates() sweeps a list of
// offered rates; FindCapacity() searches for the highest rate that meets an SLO.
//
// The loadgen knows HTTP, SSE and the OpenAI completions API; it knows nothing about models,
// KV caches or quality (checks/), and nothing about gates or verdicts (gates/).
//
// Thread-safety: each call runs its own event loop on the calling thread and blocks until the
// run ends (every request finished, failed, or timed out; a run always ends by itself), or until
// its `stop` flag is set (from any thread or a signal handler): then within kStopLatency it stops
// sending, ends every unfinished request with cause "cancelled" and returns (LoadResult::stopped,
// INVALID). Independent calls may run concurrently on different threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvgate/http/client_config.h"
#include "kvgate/http/endpoint.h"
#include "kvgate/loadgen/metrics.h"
#include "kvgate/loadgen/record.h"
#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen {

// Where to send: an http:// or https:// base URL (kvgate/http/client_config.h: a trailing "/v1"
// is dropped), the model name to put in every request (empty: discovered from GET
// {url}/v1/models, the first entry), how to connect (TLS trust, bearer key, extra headers; the
// key is never recorded) and which generation endpoint to speak.
struct Target {
  Target(std::string url_in = "", std::string model_in = "", http::ClientConfig client_in = {},
         http::Endpoint endpoint_in = http::Endpoint::kCompletions)
      : url(std::move(url_in)),
        model(std::move(model_in)),
        client(std::move(client_in)),
        endpoint(endpoint_in) {}
  std::string url;
  std::string model;
  http::ClientConfig client;
  http::Endpoint endpoint = http::Endpoint::kCompletions;
};

// The target could not be used at all (bad URL, name does not resolve, model discovery failed).
// Individual request failures are never thrown; they are records with an error cause.
class TargetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Live progress, written by the run's thread and readable from any thread (e.g. a progress bar).
struct LiveCounters {
  std::atomic<int64_t> total{0};  // requests in the run (known once the schedule is built)
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> finished{0};  // completed + errored
  std::atomic<int64_t> errored{0};
};

// How soon a run notices its stop flag.
inline constexpr std::chrono::milliseconds kStopLatency{50};

// Where a run's requests came from: the workload kind and, for a file (prompt file, ShareGPT,
// trace), its path and the SHA-256 of its bytes when the run started, so two runs can be shown
// to have replayed the same data.
struct WorkloadSource {
  std::string kind;    // WorkloadName(): "synthetic", "passkey", "file", "sharegpt", "trace"
  std::string path;    // "" for generated workloads
  std::string sha256;  // lower-case hex; "" for generated workloads
};

struct LoadResult {
  LoadSettings settings;  // as run: bounds resolved (requests set when the default applied)
  std::string url;       // redacted
  std::string model;
  std::string endpoint;  // "completions" | "chat"
  // How the client connected, for every report (http::Describe: TLS and its verification,
  // "bearer key set", extra header names; never a secret).
  std::string connection;
  bool tls_verification_off = false;  // https with --insecure: reports say so
  // What the prompt lengths count and whether they are exact, e.g. "words (approximate)",
  // "tokens, exact for 100/100 prompts (server /tokenize)", or "words (approximate): the server
  // has no POST /tokenize" when tokens were asked for and could not be had.
  std::string input_lengths = "words (approximate)";
  bool input_tokens_exact = false;
  WorkloadSource workload_source;
  // Whether the outputs had the asked-for length: "exact for 98/100 completed requests
  // (usage.completion_tokens == max_tokens)"; "unknown: ..." when no completed request had usage.
  std::string output_lengths;
  bool output_tokens_exact = false;  // every completed request with usage had exactly max_tokens
  int64_t start_unix_ms = 0;  // wall-clock time of the schedule's time zero
  // The same instant on std::chrono::steady_clock (ns since its epoch), to line records up with
  // other timestamps taken in this process or on this machine's monotonic clock.
  int64_t start_steady_ns = 0;
  std::vector<RequestRecord> records;  // in schedule order; warmup first
  Summary summary;    // Summarize(records, settings.slo, MeasuredDurationSeconds(records))
  Validity validity;  // CheckValidity(records, settings.mode, settings.validity)
  bool stopped = false;  // cut short by its stop flag (then INVALID, saying so)
};

// Runs one load test. Throws SettingsError for bad settings and TargetError when the target is
// unusable before the run starts.
LoadResult RunLoad(const LoadSettings& settings, const Target& target,
                   LiveCounters* counters = nullptr, const std::atomic<bool>* stop = nullptr);

// One open-loop run per offered rate, in the given order (settings.rate_rps is replaced); a
// stopped run is the last.
std::vector<LoadResult> RunRates(const LoadSettings& settings, const Target& target,
                                 const std::vector<double>& rates_rps,
                                 LiveCounters* counters = nullptr,
                                 const std::atomic<bool>* stop = nullptr);

// Capacity at an SLO (DistServe's definition): the highest offered rate at which at least
// `attainment` of the measured requests meet the SLO (errors count as misses). Bracketing from
// rate_min upward by doubling, then geometric bisection until the bracket is within `tolerance`
// (relative) or `max_probes` runs were made. Every probe uses the open-loop settings given to
// FindCapacity, with its own rate.
struct CapacitySearch {
  Slo slo;                  // must set at least one bound
  double attainment = 0.9;  // share of requests meeting the SLO, in (0, 1]
  double rate_min_rps = 1.0;
  double rate_max_rps = 1000.0;
  double tolerance = 0.05;  // stop when hi / lo <= 1 + tolerance
  int max_probes = 12;
};

struct CapacityProbe {
  double rate_rps = 0;
  double attainment = 0;
  bool passed = false;  // attainment >= target and the run was VALID
  LoadResult result;
};

struct CapacityResult {
  // The highest passing rate probed; nullopt when even rate_min failed.
  std::optional<double> capacity_rps;
  // The lowest failing rate probed (nullopt when rate_max passed).
  std::optional<double> first_failing_rps;
  // Why the search stopped and how to read the number, e.g. "bracket 8.0–8.4 req/s within
  // tolerance" or "rate_max passed: capacity is at least 1000 req/s".
  std::string reason;
  // True when a failing probe failed because the generator could not hold the rate (INVALID),
  // so the number bounds the generator, not the server.
  bool limited_by_generator = false;
  std::vector<CapacityProbe> probes;  // in the order run
  bool stopped = false;  // the search was cut short by its stop flag
};

// A stopped probe ends the search (reason says so; the probe is kept, not counted as passed).
CapacityResult FindCapacity(const LoadSettings& settings, const Target& target,
                            const CapacitySearch& search, LiveCounters* counters = nullptr,
                            const std::atomic<bool>* stop = nullptr);

// GET {url}/v1/models and return the first model id; throws TargetError.
std::string DiscoverModel(const Target& target, double timeout_s = 10.0);

}  // namespace kvgate::loadgen
