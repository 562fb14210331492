#include "kvgate/failure_tests/runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "child_process.h"
#include "kvgate/filesystem/remove_tree.h"

namespace kvgate::failure_tests {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string JoinNames(const std::vector<ScenarioInfo>& scenarios) {
  std::string text;
  for (const ScenarioInfo& s : scenarios) text += (text.empty() ? "" : ", ") + std::string(s.name);
  return text;
}

std::filesystem::path MakeWorkRoot(const std::filesystem::path& requested) {
  if (!requested.empty()) {
    std::filesystem::create_directories(requested);
    return requested;
  }
  std::string pattern =
      (std::filesystem::temp_directory_path() / "kvgate-failures-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a work folder under " +
                             std::filesystem::temp_directory_path().string());
  }
  return pattern;
}

// Ends the process if the scenario list overruns its budget plus the grace period: a hung
// scenario must not hang CI. A scenario's own servers are stopped by its destructors, which never
// run if it hangs, so every process this one started (and theirs) is SIGKILLed first.
class Watchdog {
 public:
  Watchdog(std::chrono::duration<double> limit, const std::atomic<const char*>* current)
      : current_(current) {
    if (limit <= std::chrono::duration<double>::zero()) return;
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
    thread_ = std::thread([this, deadline, limit] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_until(lock, deadline, [this] { return done_; })) return;
      const char* name = current_->load();
      std::fprintf(stderr,
                   "error: failure scenarios overran their time budget (%.0f s with grace); "
                   "scenario '%s' is still running: stopping every process it started and "
                   "exiting 3\n",
                   limit.count(), name ? name : "?");
      for (const auto& process : Descendants(getpid())) KillIfAlive(process);
      std::_Exit(3);
    });
  }
  ~Watchdog() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  const std::atomic<const char*>* current_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

UnknownScenario::UnknownScenario(std::vector<std::string> unknown,
                                 const std::vector<ScenarioInfo>& known)
    : std::invalid_argument([&] {
        std::string names;
        for (const std::string& n : unknown) names += (names.empty() ? "'" : ", '") + n + "'";
        return "--only: no scenario named " + names + " (known: " + JoinNames(known) + ")";
      }()),
      unknown_(std::move(unknown)) {}

std::vector<ScenarioInfo> SelectScenarios(const std::vector<ScenarioInfo>& all,
                                          const std::vector<std::string>& names) {
  if (names.empty()) return all;
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    const bool found =
        std::any_of(all.begin(), all.end(), [&](const ScenarioInfo& s) { return s.name == name; });
    if (!found && std::find(unknown.begin(), unknown.end(), name) == unknown.end()) {
      unknown.push_back(name);
    }
  }
  if (!unknown.empty()) throw UnknownScenario(std::move(unknown), all);
  std::vector<ScenarioInfo> selected;
  for (const ScenarioInfo& s : all) {
    if (std::find(names.begin(), names.end(), s.name) != names.end()) selected.push_back(s);
  }
  return selected;
}

bool RunReport::all_passed() const {
  return std::all_of(results.begin(), results.end(), [](const auto& r) { return r.passed; });
}

int RunReport::passed_count() const {
  return static_cast<int>(
      std::count_if(results.begin(), results.end(), [](const auto& r) { return r.passed; }));
}

RunReport RunScenarios(const std::vector<ScenarioInfo>& scenarios, const RunnerOptions& options) {
  auto say = [&options](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  RunReport report;
  report.work_root = MakeWorkRoot(options.work_root);
  const Clock::time_point start = Clock::now();
  std::atomic<const char*> current{nullptr};
  std::vector<std::string> names;  // stable storage for `current`
  for (const ScenarioInfo& s : scenarios) names.emplace_back(s.name);
  Watchdog watchdog(options.watchdog_grace > std::chrono::duration<double>::zero()
                        ? options.budget + options.watchdog_grace
                        : std::chrono::duration<double>::zero(),
                    &current);

  for (size_t i = 0; i < scenarios.size(); ++i) {
    const ScenarioInfo& info = scenarios[i];
    ScenarioResult result;
    const std::string name(info.name);
    const std::filesystem::path work_dir = report.work_root / name;
    if (Clock::now() - start >= options.budget) {
      result.name = name;
      result.reason = "not run: the time budget of " +
                      std::to_string(static_cast<int>(options.budget.count())) +
                      " s was spent by the scenarios before it";
      say(name + ": " + result.reason);
      report.results.push_back(std::move(result));
      continue;
    }
    current.store(names[i].c_str());
    say(name + ": " + std::string(info.summary));
    const Clock::time_point scenario_start = Clock::now();
    try {
      // A fresh folder even when a kept work root from an earlier run holds one of this name.
      RemoveTree(work_dir);
      std::filesystem::create_directories(work_dir);
      ScenarioContext context;
      context.kvgate_binary = options.kvgate_binary;
      context.model_dir = options.model_dir;
      context.work_dir = work_dir.string();
      context.threads = options.threads;
      context.progress = [&say, &name](std::string_view line) {
        say("  " + name + ": " + std::string(line));
      };
      result = info.run(context);
    } catch (const std::exception& e) {
      result = ScenarioResult{};
      result.passed = false;
      result.reason = std::string("the scenario threw: ") + e.what();
    } catch (...) {
      result = ScenarioResult{};
      result.passed = false;
      result.reason = "the scenario threw a non-standard exception";
    }
    result.name = name;  // the registry's name is the one stored, whatever the scenario set
    result.seconds = SecondsSince(scenario_start);
    if (result.reason.empty())
      result.reason = result.passed ? "passed" : "failed (no reason given)";
    if (result.evidence.is_null()) result.evidence = nlohmann::json::object();
    current.store(nullptr);
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.1f s", result.seconds);
    say(name + ": " + (result.passed ? "PASS" : "FAIL") + " (" + seconds + ") " + result.reason);
    if (result.passed && !options.keep_work_dirs) {
      std::error_code ignored;
      RemoveTree(work_dir, ignored);
    } else if (!result.passed) {
      say(name + ": work folder kept: " + work_dir.string());
    }
    report.results.push_back(std::move(result));
  }
  report.seconds = SecondsSince(start);
  if (options.work_root.empty() && !options.keep_work_dirs && report.all_passed()) {
    std::error_code ignored;
    RemoveTree(report.work_root, ignored);
  }
  return report;
}

int64_t StoreInHistory(history::HistoryDb& db, const RunReport& report, const std::string& notes,
                       const std::string& git_commit) {
  history::RunInfo info;
  info.kind = "failures";
  info.git_commit = git_commit;
  info.machine = history::DescribeMachine();
  info.notes = notes;
  const int64_t run_id = db.BeginRun(info);
  try {
    for (const ScenarioResult& r : report.results) {
      history::CheckResult row;
      row.name = r.name;
      row.status = r.passed ? "PASS" : "FAIL";
      row.reason = r.reason;
      row.details = {{"evidence", r.evidence}, {"seconds", r.seconds}};
      db.AddCheckResult(run_id, row);
    }
  } catch (...) {
    db.FinishRun(run_id, history::RunStatus::kInterrupted, std::nullopt, 3);
    throw;
  }
  const bool passed = report.all_passed();
  db.FinishRun(run_id, history::RunStatus::kComplete, passed ? "GO" : "NO-GO", passed ? 0 : 1);
  return run_id;
}

nlohmann::json ToJson(const ScenarioResult& r) {
  return {{"name", r.name},
          {"passed", r.passed},
          {"reason", r.reason},
          {"evidence", r.evidence},
          {"seconds", r.seconds}};
}

nlohmann::json ToJson(const RunReport& report) {
  nlohmann::json results = nlohmann::json::array();
  for (const ScenarioResult& r : report.results) results.push_back(ToJson(r));
  const int passed = report.passed_count();
  return {{"passed", report.all_passed()},
          {"passed_count", passed},
          {"failed_count", static_cast<int>(report.results.size()) - passed},
          {"seconds", report.seconds},
          {"work_root", report.work_root.string()},
          {"results", std::move(results)}};
}

}  // namespace kvgate::failure_tests
