// Turning stored history rows into gate evidence and back: the one place that knows how quality
// items and load runs are labelled in the history, shared by a live run and by regate.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "kvgate/checks/check_runner.h"
#include "kvgate/gates/gates.h"
#include "kvgate/history/history_db.h"
#include "kvgate/loadgen/settings.h"
#include "kvgate/policy/policy.h"

namespace kvgate::suite {

inline constexpr const char* kBaseline = "baseline";
inline constexpr const char* kCandidate = "candidate";

history::QualityItem ToHistoryItem(const checks::QualityRecord& record, const std::string& label);
history::GateResult ToHistoryGate(const gates::GateResult& result);
gates::GateResult FromHistoryGate(const history::GateResult& row);

// The key subsets a stored quality item names (extra["subsets"]; none when absent).
std::vector<std::string> SubsetsOf(const history::QualityItem& item);

// The quality evidence item by item, for the report: per check, how many items both systems
// answered, on how many their scores differ and who scored higher; and every such item
// (subsets, reference, both predictions and scores), so a reader sees what a drop or an
// INCONCLUSIVE is made of.
nlohmann::json QualityDisagreements(const std::vector<history::QualityItem>& items);

// The gates of a run, decided from its stored rows under `policy`.
std::vector<gates::GateResult> DecideFromRows(history::HistoryDb& db, int64_t run_id,
                                              const policy::Policy& policy);

}  // namespace kvgate::suite
