// Runs failure scenarios (scenario.h) one after another, each in its own fresh work folder under
// one temporary root, and stores their results in the run history like any other check: one
// history run of kind "failures" with one check_results row per scenario (status PASS/FAIL, the
// reason, details {"evidence", "seconds"}), so `kvgate history list/show` shows them.
//
// A scenario that throws becomes a failed result whose reason is the exception's message. The
// list runs under a total time budget: a scenario that would start after the budget is spent is
// failed with "not run: ..." instead, and a watchdog ends the whole process (after SIGKILLing
// every process it started) if one scenario overruns the budget by the grace period, so nothing
// can hang CI.
//
// Not thread-safe: one RunScenarios at a time per process (the watchdog acts on the process).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/failure_tests/scenario.h"
#include "kvgate/history/history_db.h"

namespace kvgate::failure_tests {

// `--only` named scenarios that are not registered. names() lists them.
class UnknownScenario : public std::invalid_argument {
 public:
  UnknownScenario(std::vector<std::string> unknown, const std::vector<ScenarioInfo>& known);
  const std::vector<std::string>& names() const { return unknown_; }

 private:
  std::vector<std::string> unknown_;
};

// The scenarios named, in the order of `all` (every one when `names` is empty). Duplicates are
// ignored. Throws UnknownScenario naming every unknown name and listing the known ones.
std::vector<ScenarioInfo> SelectScenarios(const std::vector<ScenarioInfo>& all,
                                          const std::vector<std::string>& names);

struct RunnerOptions {
  std::string kvgate_binary;  // absolute path of kvgate; passed on in ScenarioContext
  std::string model_dir;      // the built-in model's folder; passed on
  int threads = 1;            // torch threads per server; passed on
  // Where the per-scenario work folders go: <work_root>/<name>. Empty: a fresh
  // kvgate-failures-XXXXXX folder under the system temp directory.
  std::filesystem::path work_root;
  // Keep the work folders (server logs, databases) after the run; otherwise each is removed when
  // its scenario passed and kept when it failed, so a failure can be looked into.
  bool keep_work_dirs = false;
  // Wall-time bound on the whole list; see the header comment.
  std::chrono::duration<double> budget = std::chrono::minutes(10);
  // After the budget, how long a running scenario may still take before the watchdog ends the
  // process with exit status 3. Zero disables the watchdog (unit tests).
  std::chrono::duration<double> watchdog_grace = std::chrono::seconds(60);
  // One line per event (scenario start/end, the scenarios' own progress); may be empty.
  std::function<void(std::string_view)> progress;
};

struct RunReport {
  std::vector<ScenarioResult> results;  // in the order run; every selected scenario has one
  std::filesystem::path work_root;
  double seconds = 0.0;

  bool all_passed() const;
  int passed_count() const;
};

RunReport RunScenarios(const std::vector<ScenarioInfo>& scenarios, const RunnerOptions& options);

// Stores the report as one history run of kind "failures" (status complete; verdict GO when
// every scenario passed, NO-GO otherwise; exit_code as `kvgate check failures` returns it: 0/1)
// and returns its id. `notes` goes to the run's notes (e.g. the command line).
int64_t StoreInHistory(history::HistoryDb& db, const RunReport& report, const std::string& notes,
                       const std::string& git_commit);

nlohmann::json ToJson(const ScenarioResult& result);
// {"passed": bool, "passed_count", "failed_count", "seconds", "work_root", "results": [...]}
nlohmann::json ToJson(const RunReport& report);

}  // namespace kvgate::failure_tests
