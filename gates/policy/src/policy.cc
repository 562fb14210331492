#include "kvgate/policy/policy.h"

#include <cctype>

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <string_view>

#include "kvgate/http/client_config.h"

namespace kvgate::policy {
namespace {

constexpr int kMaxCpus = 8192;  // Linux's largest NR_CPUS

// Walks one TOML table: every accessor marks its key as known, and Finish() rejects whatever
// key was never asked for, so a misspelt threshold cannot be silently ignored.
class TableReader {
 public:
  TableReader(const toml::table* table, std::string path, const std::string& source)
      : table_(table), path_(std::move(path)), source_(source) {}

  TableReader Sub(std::string_view key) {
    known_.insert(std::string(key));
    const toml::node* node = Find(key);
    if (node != nullptr && !node->is_table()) Fail(key, *node, "must be a table");
    return TableReader(node ? node->as_table() : nullptr, Name(key), source_);
  }

  void Get(std::string_view key, double& out, double lo, double hi, bool lo_open = false) {
    const toml::node* node = Mark(key);
    if (!node) return;
    std::optional<double> value;
    if (auto i = node->value_exact<int64_t>()) value = static_cast<double>(*i);
    if (auto f = node->value_exact<double>()) value = *f;
    if (!value) Fail(key, *node, "must be a number");
    CheckRange(key, *node, *value, lo, hi, lo_open);
    out = *value;
  }

  void Get(std::string_view key, int& out, int64_t lo, int64_t hi) {
    const toml::node* node = Mark(key);
    if (!node) return;
    auto value = node->value_exact<int64_t>();
    if (!value) Fail(key, *node, "must be an integer");
    CheckRange(key, *node, static_cast<double>(*value), static_cast<double>(lo),
               static_cast<double>(hi), false);
    out = static_cast<int>(*value);
  }

  void Get(std::string_view key, bool& out) {
    const toml::node* node = Mark(key);
    if (!node) return;
    auto value = node->value_exact<bool>();
    if (!value) Fail(key, *node, "must be true or false");
    out = *value;
  }

  void Get(std::string_view key, uint64_t& out) {
    const toml::node* node = Mark(key);
    if (!node) return;
    auto value = node->value_exact<int64_t>();
    if (!value || *value < 0) Fail(key, *node, "must be a non-negative integer");
    out = static_cast<uint64_t>(*value);
  }

  void Get(std::string_view key, std::string& out, const std::set<std::string>& allowed = {}) {
    const toml::node* node = Mark(key);
    if (!node) return;
    auto value = node->value_exact<std::string>();
    if (!value) Fail(key, *node, "must be a string");
    if (!allowed.empty() && !allowed.count(*value)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      Fail(key, *node, "must be one of " + list + ", got '" + *value + "'");
    }
    out = *value;
  }

  void Get(std::string_view key, std::optional<double>& out, double lo, double hi) {
    if (!Find(key)) {
      known_.insert(std::string(key));
      return;
    }
    double value = 0;
    Get(key, value, lo, hi);
    out = value;
  }

  void Get(std::string_view key, std::optional<std::string>& out,
           const std::set<std::string>& allowed) {
    if (!Find(key)) {
      known_.insert(std::string(key));
      return;
    }
    std::string value;
    Get(key, value, allowed);
    out = value;
  }

  void Get(std::string_view key, std::vector<std::string>& out) {
    const toml::node* node = Mark(key);
    if (!node) return;
    const toml::array* array = node->as_array();
    if (!array) Fail(key, *node, "must be an array of strings");
    out.clear();
    for (const toml::node& element : *array) {
      auto value = element.value_exact<std::string>();
      if (!value) Fail(key, element, "must be an array of strings");
      out.push_back(*value);
    }
  }

  // A table of any keys, as JSON: integers stay integers, tables objects, arrays arrays; dates,
  // times, inf and nan become strings (toml++'s JSON formatter).
  void Get(std::string_view key, nlohmann::json& out) {
    const toml::node* node = Mark(key);
    if (!node) return;
    const toml::table* table = node->as_table();
    if (!table) Fail(key, *node, "must be a table (its keys are merged into every request body)");
    std::ostringstream text;
    text << toml::json_formatter{*table};
    try {
      out = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::exception&) {
      Fail(key, *node, "cannot be written as JSON");
    }
  }

  template <typename T>
  void GetList(std::string_view key, std::vector<T>& out, double lo, double hi) {
    const toml::node* node = Mark(key);
    if (!node) return;
    const toml::array* array = node->as_array();
    if (!array || array->empty()) Fail(key, *node, "must be a non-empty array of numbers");
    out.clear();
    for (const toml::node& element : *array) {
      std::optional<double> value;
      if (auto i = element.value_exact<int64_t>()) value = static_cast<double>(*i);
      if constexpr (std::is_floating_point_v<T>) {
        if (auto f = element.value_exact<double>()) value = *f;
      }
      if (!value) {
        Fail(key, element, std::is_floating_point_v<T> ? "must hold numbers" : "must hold integers");
      }
      CheckRange(key, element, *value, lo, hi, false);
      out.push_back(static_cast<T>(*value));
    }
  }

  // Rejects keys nobody asked for. Call after every Get of this table.
  void Finish() const {
    if (!table_) return;
    for (const auto& [key, node] : *table_) {
      if (!known_.count(std::string(key.str()))) {
        throw PolicyError(source_, static_cast<int>(key.source().begin.line),
                          Name(key.str()), "unknown key");
      }
    }
  }

  [[noreturn]] void Fail(std::string_view key, const toml::node& node, const std::string& what) const {
    throw PolicyError(source_, static_cast<int>(node.source().begin.line), Name(key), what);
  }

  int Line() const { return table_ ? static_cast<int>(table_->source().begin.line) : 0; }
  std::string Name(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

 private:
  const toml::node* Find(std::string_view key) const {
    return table_ ? table_->get(key) : nullptr;
  }
  const toml::node* Mark(std::string_view key) {
    known_.insert(std::string(key));
    return Find(key);
  }
  void CheckRange(std::string_view key, const toml::node& node, double value, double lo, double hi,
                  bool lo_open) const {
    bool ok = std::isfinite(value) && value <= hi && (lo_open ? value > lo : value >= lo);
    if (!ok) {
      std::ostringstream what;
      what << "must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "], got " << value;
      Fail(key, node, what.str());
    }
  }

  const toml::table* table_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> known_;
};

// One [baseline] or [candidate] table: how the server is started or reached, and what the suite
// reads from it and adds to its requests. The caller calls reader.Finish().
void ParseServer(TableReader& reader, ServerSpec* server, const std::string& source) {
  std::string kind = "local";
  reader.Get("kind", kind, {"local", "url"});
  server->kind = kind == "local" ? ServerSpec::Kind::kLocal : ServerSpec::Kind::kUrl;
  reader.Get("args", server->serve_args);
  reader.Get("url", server->url);
  reader.Get("startup_timeout_s", server->startup_timeout_s, 0.0, 3600.0, true);
  reader.Get("model", server->model);
  std::string endpoint = "completions";
  reader.Get("endpoint", endpoint, {"completions", "chat"});
  server->endpoint = http::ParseEndpoint(endpoint);
  reader.Get("cacert", server->cacert);
  reader.Get("insecure", server->insecure);
  reader.Get("api_key_env", server->api_key_env);
  reader.Get("ledger_prefix", server->ledger_prefix);
  reader.Get("extra_body", server->extra_body);
  if (const std::string field = loadgen::ReservedRequestField(server->extra_body);
      !field.empty()) {
    throw PolicyError(source, reader.Line(), reader.Name("extra_body"),
                      "may not set '" + field +
                          "': the suite sets it on every request, and overriding it on one side "
                          "would change what the gates compare");
  }
  if (server->kind == ServerSpec::Kind::kUrl) {
    try {
      if (server->url.empty()) throw http::ConfigError("url", "missing");
      http::Url::Parse(server->url);
    } catch (const http::ConfigError& e) {
      throw PolicyError(source, reader.Line(), reader.Name("url"),
                        std::string(e.what()) +
                            "; kind = \"url\" needs url = \"http[s]://host:port[/prefix]\"");
    }
  }
  if (server->insecure && !server->cacert.empty()) {
    throw PolicyError(source, reader.Line(), reader.Name("insecure"),
                      "cannot be combined with cacert (which trust do you mean?)");
  }
  if (server->kind == ServerSpec::Kind::kLocal && (server->insecure || !server->cacert.empty())) {
    throw PolicyError(source, reader.Line(),
                      reader.Name(server->insecure ? "insecure" : "cacert"),
                      "only for kind = \"url\" (a local server speaks plain http)");
  }
  for (char c : server->api_key_env) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      throw PolicyError(source, reader.Line(), reader.Name("api_key_env"),
                        "must name an environment variable (letters, digits, _), got '" +
                            server->api_key_env + "'");
    }
  }
  if (server->kind == ServerSpec::Kind::kLocal && !server->url.empty()) {
    throw PolicyError(source, reader.Line(), reader.Name("url"),
                      "only for kind = \"url\"; a local server gets a free port");
  }
  const std::string& prefix = server->ledger_prefix;
  const bool metric_name =
      !prefix.empty() && !std::isdigit(static_cast<unsigned char>(prefix[0])) &&
      std::all_of(prefix.begin(), prefix.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
      });
  if (!metric_name) {
    throw PolicyError(source, reader.Line(), reader.Name("ledger_prefix"),
                      "must start a Prometheus metric name ([A-Za-z_:][A-Za-z0-9_:]*), got '" +
                          prefix + "'");
  }
}

// [candidate.read_policy]: retired (ReadPolicySpec), still read so stored runs re-gate.
void ParseRetiredReadPolicy(TableReader& reader, Policy& policy, const std::string& source) {
  if (!reader.Has("read_policy")) return;
  TableReader read = reader.Sub("read_policy");
  ReadPolicySpec& rp = policy.candidate_read_policy;
  read.Get("read_bits", rp.read_bits, 0.0, 8.0);
  read.Get("reader", rp.reader, {"flexible", "constrained", "tile"});
  read.Get("key_bits", rp.key_bits, 0.0, 8.0);
  read.Get("value_bits", rp.value_bits, 0.0, 8.0);
  read.Finish();
  policy.candidate_read_policy_line = std::max(read.Line(), 1);
  if (rp.key_bits.has_value() != rp.value_bits.has_value()) {
    throw PolicyError(source, read.Line(), reader.Name("read_policy"),
                      "key_bits and value_bits must be given together");
  }
}

}  // namespace

Policy ParsePolicy(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw PolicyError(source, static_cast<int>(e.source().begin.line), "toml",
                      std::string(e.description()));
  }
  Policy policy;
  policy.source = source;
  policy.text = text;
  TableReader top(&root, "", source);
  top.Get("name", policy.name);
  top.Get("seed", policy.seed);

  for (auto [key, server] : {std::pair{"baseline", &policy.baseline},
                             std::pair{"candidate", &policy.candidate}}) {
    if (!top.Has(key)) {
      throw PolicyError(source, 0, key, "missing table: say which server to start or reach");
    }
    TableReader reader = top.Sub(key);
    ParseServer(reader, server, source);
    if (std::string_view(key) == "candidate") ParseRetiredReadPolicy(reader, policy, source);
    reader.Finish();
  }

  {
    TableReader slo = top.Sub("slo");
    // Each bound is optional in the SLO type; a policy that names none keeps the defaults.
    for (auto [key, bound] : {std::pair{"ttft_ms", &policy.slo.ttft_ms},
                              std::pair{"tpot_ms", &policy.slo.tpot_ms},
                              std::pair{"e2e_ms", &policy.slo.e2e_ms}}) {
      double value = bound->value_or(0.0);
      slo.Get(key, value, 0.0, 3.6e6, true);
      if (value > 0.0) *bound = value;
    }
    slo.Get("attainment", policy.slo_attainment, 0.0, 1.0, true);
    slo.Finish();
  }
  int passkey_line = 0;
  {
    TableReader quality = top.Sub("quality");
    TableReader passkey = quality.Sub("passkey");
    PasskeyWorkload& pk = policy.passkey;
    passkey.Get("items", pk.items, 1, 100000);
    passkey.GetList("lengths", pk.lengths, 16, 1 << 24);
    passkey.GetList("depths", pk.depths, 0.0, 1.0);
    passkey.Get("key_digits", pk.key_digits, 1, 18);
    passkey.Get("max_tokens", pk.max_tokens, 1, 4096);
    passkey.Finish();
    passkey_line = passkey.Line();
    TableReader qa = quality.Sub("qa");
    QaWorkload& q = policy.qa;
    qa.Get("items", q.items, 1, 100000);
    qa.GetList("lengths", q.lengths, 16, 1 << 24);
    qa.Get("dataset", q.dataset);
    qa.Get("max_tokens", q.max_tokens, 1, 4096);
    qa.Finish();
    quality.Finish();
  }
  {
    TableReader load = top.Sub("load");
    LoadWorkload& l = policy.load;
    load.Get("pairs", l.pairs, 1, 1000);
    load.Get("arrival", l.arrival, {"poisson", "gamma", "constant"});
    load.Get("rate_rps", l.rate_rps, 0.0, 1e6, true);
    load.Get("burstiness", l.burstiness, 0.0, 100.0, true);
    load.Get("concurrency", l.concurrency, 0, 100000);
    load.Get("requests", l.requests, 1, 10000000);
    load.Get("warmup", l.warmup, 0, 1000000);
    load.Get("max_duration_s", l.max_duration_s, 0.0, 86400.0, true);
    load.Get("prompt_words", l.prompt_words, 1, 1 << 24);
    load.Get("output_tokens", l.output_tokens, 1, 1 << 20);
    load.Get("request_timeout_s", l.request_timeout_s, 0.0, 86400.0, true);
    load.Get("multi_turn", l.multi_turn, 1, loadgen::kMaxMultiTurn);
    load.Get("think_time_ms", l.think_time_ms, 0, loadgen::kMaxThinkTimeMs);
    load.Finish();
    if (l.think_time_ms > 0 && l.multi_turn == 1) {
      throw PolicyError(source, load.Line(), "load.think_time_ms",
                        "is the pause between a session's turns: it needs multi_turn > 1");
    }
  }
  {
    TableReader gates = top.Sub("gates");
    GateSpec& g = policy.gates;
    gates.Get("passkey_required", g.passkey_required, 0, 100000);
    gates.Get("qa_max_f1_drop", g.qa_max_f1_drop, 0.0, 100.0);
    gates.Get("p99_max_ratio", g.p99_max_ratio, 0.0, 100.0, true);
    gates.Get("goodput_min_ratio", g.goodput_min_ratio, 0.0, 100.0, true);
    gates.Get("confidence", g.confidence, 0.5, 0.9999);
    gates.Get("bootstrap_resamples", g.bootstrap_resamples, 100, 1000000);
    gates.Get("max_error_rate", g.max_error_rate, 0.0, 1.0);
    gates.Finish();
    if (g.passkey_required > policy.passkey.items) {
      throw PolicyError(source, gates.Has("passkey_required") ? gates.Line() : passkey_line,
                        "gates.passkey_required",
                        "asks for " + std::to_string(g.passkey_required) +
                            " correct passkeys but quality.passkey.items is " +
                            std::to_string(policy.passkey.items));
    }
  }
  {
    TableReader placement = top.Sub("placement");
    PlacementSpec& pl = policy.placement;
    std::string mode = "split";
    placement.Get("mode", mode, {"split", "shared"});
    pl.mode = mode == "split" ? PlacementSpec::Mode::kSplit : PlacementSpec::Mode::kShared;
    placement.Get("suite_cpus", pl.suite_cpus, 0, kMaxCpus);
    placement.Finish();
    if (pl.mode == PlacementSpec::Mode::kShared && pl.suite_cpus > 0) {
      throw PolicyError(source, placement.Line(), "placement.suite_cpus",
                        "only for mode = \"split\" (\"shared\" pins nothing)");
    }
  }
  top.Finish();
  return policy;
}

void RefuseRetiredKeys(const Policy& policy) {
  if (policy.candidate_read_policy_line > 0) {
    throw PolicyError(policy.source, policy.candidate_read_policy_line, "candidate.read_policy",
                      "retired: write the same keys under [candidate.extra_body.readkv] (extra_body "
                      "is merged into every request body sent to that server)");
  }
}

Policy LoadPolicyFile(const std::string& path) {
  // An ifstream opens a directory and reads nothing from it, which would then be reported as a
  // policy without tables: say what the path is instead.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw PolicyError(path, 0, "file", "does not exist");
  }
  if (std::filesystem::is_directory(status)) {
    throw PolicyError(path, 0, "file",
                      "is a directory, not a policy file (e.g. policies/default.toml)");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw PolicyError(path, 0, "file", "is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PolicyError(path, 0, "file", "cannot be opened for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw PolicyError(path, 0, "file", "read failed");
  return ParsePolicy(text.str(), path);
}

}  // namespace kvgate::policy
