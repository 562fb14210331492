// Two recorded runs side by side (`kvgate history compare A B`): what changed between them
// (commit, policy text as a line diff, machine, device, server commands) and each gate's and
// ledger's values with their deltas (B - A). The CLI prints it as text or as ToJson's form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvgate/history/history_db.h"

namespace kvgate::history {

struct GateComparison {
  std::string gate;
  std::optional<GateResult> a, b;        // absent where that run has no such gate
  std::optional<double> observed_delta;  // b.observed - a.observed, when both have one
};

struct LedgerComparison {
  std::string label, name;
  std::optional<double> a, b, delta;
};

struct RunComparison {
  RunRow a, b;
  // Keys present only for what differs: "git_commit" {a, b}; "policy" {a_digest, b_digest, diff};
  // "machine" / "device" {key: {a, b}} over their top-level keys; "server_commands" {a, b}.
  nlohmann::json changed = nlohmann::json::object();
  std::vector<GateComparison> gates;      // A's order, then the gates only B has
  std::vector<LedgerComparison> ledgers;  // by (label, name)
};

// Reads both runs (HistoryError not_found for a missing one) and compares them.
RunComparison CompareRuns(HistoryDb& db, int64_t run_a, int64_t run_b);

// {a, b (runs without their policy text), changed, gates: [{gate, a, b, observed_delta}],
//  ledgers: [{label, name, a, b, delta}]}
nlohmann::json ToJson(const RunComparison& comparison);

// Lines only in `a` ("- line") or only in `b` ("+ line"), in order, from a longest common
// subsequence (quadratic: meant for policies, a few hundred lines at most).
std::vector<std::string> LineDiff(const std::string& a, const std::string& b);

// Top-level keys whose values differ between two JSON objects: {key: {a, b}}; a missing key
// counts as null. Non-objects compare whole, under the key "value".
nlohmann::json ObjectChanges(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace kvgate::history
