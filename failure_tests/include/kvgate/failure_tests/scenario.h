// One failure scenario (issue 6): something that starts real servers (child `kvgate serve`
// processes on loopback, through kvgate::suite::ServerProcess) and breaks things on purpose, then
// says whether nothing wrong was served and nothing recorded was lost. Scenarios talk to servers
// over HTTP only and never link readkv/ (docs/architecture.md: HTTP is the only door).
//
// Each scenario is a function registered under a stable name with KVGATE_REGISTER_SCENARIO in its
// own .cc file; `kvgate check failures` runs all of them (or those named) and stores the results
// in the history; a CTest runs each one alone. A scenario owns everything under its work_dir and
// stops every process it started before it returns (also on exceptions).
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvgate::failure_tests {

struct ScenarioContext {
  std::string kvgate_binary;  // absolute path of the kvgate executable (serve, run, ...)
  std::string model_dir;      // the built-in model's directory
  std::string work_dir;       // empty scratch folder owned by this scenario
  int threads = 1;            // torch threads each server may use
  // Called with one-line progress messages; may be empty.
  std::function<void(std::string_view)> progress;
};

struct ScenarioResult {
  std::string name;          // the registry's name (set by the runner)
  bool passed = false;
  std::string reason;        // one line: why it passed or, first thing first, why it failed
  nlohmann::json evidence;   // what was measured (counts, digests, counters, exit codes)
  double seconds = 0.0;      // wall time of the scenario (set by the runner)

  // Sets the outcome and returns a copy, for `return result.Done(false, "...")`. The runner sets
  // name and seconds itself, so a scenario need not.
  ScenarioResult Done(bool scenario_passed, std::string why) {
    passed = scenario_passed;
    reason = std::move(why);
    return *this;
  }
};

using ScenarioFunction = ScenarioResult (*)(const ScenarioContext& context);

struct ScenarioInfo {
  std::string_view name;     // "codebook_mismatch", "model_upgrade", "budget_change",
                             // "server_crash", "suite_crash"
  std::string_view summary;  // one sentence for --help and reports
  ScenarioFunction run;
};

// Registers at static-initialisation time (returns a dummy for the static variable).
bool RegisterScenario(ScenarioInfo info);
// Every registered scenario in name order.
std::vector<ScenarioInfo> Scenarios();

}  // namespace kvgate::failure_tests

#define KVGATE_FT_CONCAT_INNER(a, b) a##b
#define KVGATE_FT_CONCAT(a, b) KVGATE_FT_CONCAT_INNER(a, b)
#define KVGATE_REGISTER_SCENARIO(...)                                  \
  static const bool KVGATE_FT_CONCAT(kvgate_scenario_, __LINE__) = \
      ::kvgate::failure_tests::RegisterScenario(::kvgate::failure_tests::ScenarioInfo{__VA_ARGS__})
