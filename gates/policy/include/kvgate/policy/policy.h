// The go/no-go policy: what `kvgate run` checks, against which servers, under which thresholds.
// Loaded from TOML (policies/*.toml) and validated in full before anything runs: an unknown key,
// a wrong type or an out-of-range value is a PolicyError "file:line: key: what is wrong".
// Every field has a default (policies/default.toml spells them out) and a unit in its name or
// comment. Plain values; copy freely.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvgate/http/endpoint.h"
#include "kvgate/loadgen/settings.h"

namespace kvgate::policy {

class PolicyError : public std::invalid_argument {
 public:
  PolicyError(const std::string& source, int line, const std::string& key, const std::string& what)
      : std::invalid_argument(source + ":" + std::to_string(line) + ": " + key + ": " + what),
        line_(line),
        key_(key) {}
  int line() const { return line_; }
  const std::string& key() const { return key_; }

 private:
  int line_;
  std::string key_;
};

// A server the suite compares: either one it starts itself (`kvgate serve` + args, on a free
// loopback port) or an external OpenAI-compatible endpoint it only talks to.
struct ServerSpec {
  enum class Kind { kLocal, kUrl };
  Kind kind = Kind::kLocal;
  std::vector<std::string> serve_args;  // kLocal: arguments after `kvgate serve`
  std::string url;                      // kUrl: base URL, e.g. http://127.0.0.1:8000
  double startup_timeout_s = 120.0;     // kLocal: until /health answers
  std::string model;                    // the `model` field sent in requests ("" = first listed)
  http::Endpoint endpoint = http::Endpoint::kCompletions;  // "completions" | "chat"
  // kUrl over https: trust only this PEM CA file ("" = the system's CAs), or skip verification.
  std::string cacert;
  bool insecure = false;
  // The environment variable holding the server's bearer key (the key itself never appears in a
  // policy, which is stored with every run). Unset: $OPENAI_API_KEY when set.
  std::string api_key_env = "OPENAI_API_KEY";
  // The server's optional ledger series are read from /metrics as <ledger_prefix><name>
  // (docs/contract.md, "Ledgers"). The default is the reference server's (`kvgate serve`).
  std::string ledger_prefix = "readkv_";
  // [<server>.extra_body]: merged into the JSON body of every request the suite sends this
  // server (quality checks and load), e.g. a compressed cache's per-request read policy.
  nlohmann::json extra_body = nlohmann::json::object();
};

// RETIRED: [candidate.read_policy], the reference server's `readkv` request object, is now
// written [candidate.extra_body.readkv]. Still parsed, so stored runs can be re-gated and
// reported; `kvgate run` refuses a policy that has it (RefuseRetiredKeys).
struct ReadPolicySpec {
  std::optional<double> read_bits;
  std::optional<std::string> reader;  // "flexible" | "constrained" | "tile"
  std::optional<double> key_bits;
  std::optional<double> value_bits;
  bool empty() const { return !read_bits && !reader && !key_bits && !value_bits; }
};

struct PasskeyWorkload {
  int items = 200;
  std::vector<int> lengths = {1024, 2048, 4096, 8192};  // context length in tokens (bytes here)
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // needle depth, share of context
  int key_digits = 5;
  int max_tokens = 8;
};

struct QaWorkload {
  int items = 100;
  std::vector<int> lengths = {1024, 4096, 8192};  // context length buckets (tokens)
  std::string dataset;  // optional JSONL file ({"id","context","question","answers","subset"})
  int max_tokens = 16;
};

struct LoadWorkload {
  int pairs = 5;                 // interleaved A/B pairs (ABAB...), each on the same schedule
  std::string arrival = "poisson";  // poisson | gamma | constant
  double rate_rps = 2.0;         // offered rate, requests per second (open loop)
  double burstiness = 1.0;       // gamma only
  int concurrency = 0;           // > 0: closed loop with this many in flight instead of a rate
  int requests = 40;             // per run, warm-up excluded
  int warmup = 2;                // per run, excluded from metrics
  double max_duration_s = 300.0; // hard bound of one run
  int prompt_words = 96;       // synthetic prompt length in words (the server counts tokens)
  int output_tokens = 32;
  double request_timeout_s = 120.0;
  // Multi-turn sessions (loadgen::WorkloadSettings::multi_turn, think_time_ms): 1 = single
  // requests; N > 1 = each request slot runs conversations of N turns.
  int multi_turn = 1;
  int think_time_ms = 0;
};

struct GateSpec {
  int passkey_required = 200;    // correct items needed (out of quality.passkey.items)
  double qa_max_f1_drop = 1.0;   // points, on every subset
  double p99_max_ratio = 1.05;   // candidate P99 / baseline P99, TTFT and TPOT each
  double goodput_min_ratio = 1.10;
  double confidence = 0.95;      // of every interval
  int bootstrap_resamples = 2000;
  double max_error_rate = 0.01;  // errored share of requests above which perf gates are INCONCLUSIVE
};

// [placement]: where `kvgate run` runs its local servers and itself, so that both servers serve
// on the same CPUs, apart from the load generator (kvgate/suite/cpu_placement.h; docs/gates.md).
struct PlacementSpec {
  enum class Mode { kSplit, kShared };
  // "split": the suite on its own CPUs, every local server on the same others; "shared": nothing
  // pinned (the user places the processes, e.g. with their own taskset or cgroup).
  Mode mode = Mode::kSplit;
  int suite_cpus = 0;  // split: CPUs for the suite and its load generator; 0 = max(1, N/4) of N
};

struct Policy {
  std::string name = "default";
  uint64_t seed = 20261129;
  ServerSpec baseline;
  ServerSpec candidate;
  ReadPolicySpec candidate_read_policy;  // retired; see ReadPolicySpec
  int candidate_read_policy_line = 0;    // > 0: the line of [candidate.read_policy]
  // [slo]: the SLO a request must meet to count as good (goodput), the load generator's own type.
  loadgen::Slo slo{2000.0, 200.0, std::nullopt};
  double slo_attainment = 0.90;  // [slo] attainment: share of requests meeting it, for capacity

  PasskeyWorkload passkey;
  QaWorkload qa;
  LoadWorkload load;
  GateSpec gates;
  PlacementSpec placement;

  std::string source;  // the file name it came from ("<string>" when parsed from text)
  std::string text;    // the exact TOML text, stored with every run
};

// The minimum number of interleaved pairs the perf gates accept (docs/gates.md: R >= 5). Fewer
// pairs run, but the perf gates are then INCONCLUSIVE.
inline constexpr int kMinPairs = 5;

Policy ParsePolicy(const std::string& text, const std::string& source = "<string>");
Policy LoadPolicyFile(const std::string& path);  // PolicyError(path, 0, "file", …) if unreadable

// Throws PolicyError naming a retired key the policy still uses ([candidate.read_policy]) and
// its replacement. `kvgate run` calls it before anything starts; reading a stored run does not.
void RefuseRetiredKeys(const Policy& policy);

}  // namespace kvgate::policy
