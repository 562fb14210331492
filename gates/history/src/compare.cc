#include "kvgate/history/compare.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace kvgate::history {
namespace {

using nlohmann::json;

std::optional<double> Delta(std::optional<double> a, std::optional<double> b) {
  if (!a || !b) return std::nullopt;
  return *b - *a;
}

json Optional(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }

std::optional<GateResult> FindGate(const std::vector<GateResult>& gates, const std::string& name) {
  for (const GateResult& g : gates) {
    if (g.gate == name) return g;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> LineDiff(const std::string& a, const std::string& b) {
  auto split = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  const std::vector<std::string> x = split(a), y = split(b);
  std::vector<std::vector<int>> lcs(x.size() + 1, std::vector<int>(y.size() + 1, 0));
  for (size_t i = x.size(); i-- > 0;) {
    for (size_t j = y.size(); j-- > 0;) {
      lcs[i][j] = x[i] == y[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  std::vector<std::string> out;
  size_t i = 0, j = 0;
  while (i < x.size() || j < y.size()) {
    if (i < x.size() && j < y.size() && x[i] == y[j]) {
      ++i, ++j;
    } else if (j < y.size() && (i == x.size() || lcs[i][j + 1] >= lcs[i + 1][j])) {
      out.push_back("+ " + y[j++]);
    } else {
      out.push_back("- " + x[i++]);
    }
  }
  return out;
}

json ObjectChanges(const json& a, const json& b) {
  json changes = json::object();
  if (!a.is_object() || !b.is_object()) {
    if (a != b) changes["value"] = {{"a", a}, {"b", b}};
    return changes;
  }
  std::set<std::string> keys;
  for (const auto& [key, value] : a.items()) keys.insert(key);
  for (const auto& [key, value] : b.items()) keys.insert(key);
  for (const std::string& key : keys) {
    const json va = a.contains(key) ? a[key] : json(nullptr);
    const json vb = b.contains(key) ? b[key] : json(nullptr);
    if (va != vb) changes[key] = {{"a", va}, {"b", vb}};
  }
  return changes;
}

RunComparison CompareRuns(HistoryDb& db, int64_t run_a, int64_t run_b) {
  RunComparison c;
  c.a = db.GetRun(run_a);
  c.b = db.GetRun(run_b);
  const RunInfo& a = c.a.info;
  const RunInfo& b = c.b.info;
  if (a.git_commit != b.git_commit) {
    c.changed["git_commit"] = {{"a", a.git_commit}, {"b", b.git_commit}};
  }
  if (a.policy_text != b.policy_text) {
    c.changed["policy"] = {{"a_digest", a.policy_digest},
                           {"b_digest", b.policy_digest},
                           {"diff", LineDiff(a.policy_text, b.policy_text)}};
  }
  if (json m = ObjectChanges(a.machine, b.machine); !m.empty()) c.changed["machine"] = m;
  if (json d = ObjectChanges(a.device, b.device); !d.empty()) c.changed["device"] = d;
  if (a.server_commands != b.server_commands) {
    c.changed["server_commands"] = {{"a", a.server_commands}, {"b", b.server_commands}};
  }

  const std::vector<GateResult> gates_a = db.GateResults(run_a);
  const std::vector<GateResult> gates_b = db.GateResults(run_b);
  std::vector<std::string> names;
  for (const GateResult& g : gates_a) names.push_back(g.gate);
  for (const GateResult& g : gates_b) {
    if (std::find(names.begin(), names.end(), g.gate) == names.end()) names.push_back(g.gate);
  }
  for (const std::string& name : names) {
    GateComparison g;
    g.gate = name;
    g.a = FindGate(gates_a, name);
    g.b = FindGate(gates_b, name);
    g.observed_delta = Delta(g.a ? g.a->observed : std::nullopt, g.b ? g.b->observed : std::nullopt);
    c.gates.push_back(std::move(g));
  }

  std::map<std::pair<std::string, std::string>,
           std::pair<std::optional<double>, std::optional<double>>>
      ledgers;
  for (const Ledger& l : db.Ledgers(run_a)) ledgers[{l.label, l.name}].first = l.value;
  for (const Ledger& l : db.Ledgers(run_b)) ledgers[{l.label, l.name}].second = l.value;
  for (const auto& [key, values] : ledgers) {
    c.ledgers.push_back({key.first, key.second, values.first, values.second,
                         Delta(values.first, values.second)});
  }
  return c;
}

json ToJson(const RunComparison& c) {
  json out = {{"a", ToJson(c.a)}, {"b", ToJson(c.b)}, {"changed", c.changed}};
  out["a"].erase("policy_text");
  out["b"].erase("policy_text");
  out["gates"] = json::array();
  for (const GateComparison& g : c.gates) {
    out["gates"].push_back({{"gate", g.gate},
                            {"a", g.a ? ToJson(*g.a) : json(nullptr)},
                            {"b", g.b ? ToJson(*g.b) : json(nullptr)},
                            {"observed_delta", Optional(g.observed_delta)}});
  }
  out["ledgers"] = json::array();
  for (const LedgerComparison& l : c.ledgers) {
    out["ledgers"].push_back({{"label", l.label},
                              {"name", l.name},
                              {"a", Optional(l.a)},
                              {"b", Optional(l.b)},
                              {"delta", Optional(l.delta)}});
  }
  return out;
}

}  // namespace kvgate::history
