// Output forms of a run: the human summary table (ending with MLPerf's one-line
// "Result is : VALID" / "Result is : INVALID (reason)") and JSON (summary, validity, settings and
// every per-request record). RecordFromJson() reads a record back, so JSON files and the history
// hold the same facts.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvgate/loadgen/metrics.h"
#include "kvgate/loadgen/record.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen {

std::string FormatSummary(const LoadResult& result);
std::string FormatCapacity(const CapacityResult& result);

nlohmann::json RecordToJson(const RequestRecord& record);
// Throws nlohmann::json::exception on a missing or mistyped field.
RequestRecord RecordFromJson(const nlohmann::json& json);

nlohmann::json LatencyStatsToJson(const LatencyStats& stats);
nlohmann::json SummaryToJson(const Summary& summary);
nlohmann::json ValidityToJson(const Validity& validity);
nlohmann::json SettingsToJson(const LoadSettings& settings);
// {"url", "model", "start_unix_ms", "settings", "summary", "validity", "result",
//  "records": [...]} — records only when `with_records`.
nlohmann::json LoadResultToJson(const LoadResult& result, bool with_records = true);
nlohmann::json CapacityToJson(const CapacityResult& result, bool with_records = true);

}  // namespace kvgate::loadgen
