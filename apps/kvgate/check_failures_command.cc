// `kvgate check failures`: the failure scenarios of issue 6 (failure_tests/), each starting real
// servers and breaking something on purpose, with their results stored in the history as one run
// of kind "failures" (`kvgate history show` lists each scenario with its reason).
//
//   kvgate check failures [--only NAME,...] [--json FILE|-] [--db PATH] [--threads N]
//                         [--model DIR] [--budget SECONDS] [--keep-work-dir] [--list]
//
// Exit status: 0 every scenario passed; 1 some failed; 2 bad arguments (e.g. an unknown name);
// 3 the scenarios could not run (no kvgate-serve beside kvgate, history unusable, time budget
// overrun).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvgate/command.h"
#include "kvgate/serve_binary.h"
#include "kvgate/failure_tests/runner.h"
#include "kvgate/failure_tests/scenario.h"
#include "kvgate/history/history_db.h"
#include "kvgate/version.h"

namespace kvgate {
namespace {

struct FailureOptions {
  std::vector<std::string> only;
  std::string json_file;
  std::string db = "kvgate.db";
  std::string model_dir;
  int threads = 1;
  double budget_s = 600;
  bool keep_work_dir = false;
  bool list = false;
};

// The reference server's built-in model, as `kvgate serve` finds it (readkv::model::
// DefaultModelDirectory, which kvgate does not link): $KVGATE_MODEL_DIR, else the source tree's.
std::string DefaultModelDirectory() {
  if (const char* env = std::getenv("KVGATE_MODEL_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return KVGATE_DEFAULT_MODEL_DIR;
}

int RunFailures(const FailureOptions& o) {
  const std::vector<failure_tests::ScenarioInfo> all = failure_tests::Scenarios();
  if (o.list) {
    for (const auto& s : all) std::cout << s.name << "  " << s.summary << "\n";
    return 0;
  }
  std::vector<failure_tests::ScenarioInfo> selected;
  try {
    selected = failure_tests::SelectScenarios(all, o.only);
  } catch (const failure_tests::UnknownScenario& e) {
    throw UsageError(e.what());
  }
  if (selected.empty()) throw UsageError("no failure scenarios are registered in this kvgate");
  if (o.threads < 1) throw UsageError("--threads must be >= 1, got " + std::to_string(o.threads));
  if (!(o.budget_s > 0)) throw UsageError("--budget must be > 0 seconds");
  const std::string model_dir =
      o.model_dir.empty() ? DefaultModelDirectory() : o.model_dir;
  if (!std::filesystem::is_directory(model_dir)) {
    throw UsageError("--model: '" + model_dir + "' is not a directory");
  }
  // Every scenario starts `kvgate serve`: without kvgate-serve none could run.
  if (!std::filesystem::exists(ServeBinaryPath())) {
    std::cerr << "error: " << MissingServeMessage("check failures", ServeBinaryPath()) << "\n";
    return 3;
  }
  // Opened (and any dead run marked) before the scenarios spend minutes: a bad --db fails fast.
  history::HistoryDb db = history::HistoryDb::Open(o.db);
  db.MarkInterruptedRuns();

  failure_tests::RunnerOptions options;
  options.kvgate_binary = SelfPath();
  options.model_dir = std::filesystem::absolute(model_dir).string();
  options.threads = o.threads;
  options.keep_work_dirs = o.keep_work_dir;
  options.budget = std::chrono::duration<double>(o.budget_s);
  options.progress = [](std::string_view line) {
    std::fprintf(stderr, "[failures] %.*s\n", static_cast<int>(line.size()), line.data());
  };
  failure_tests::RunReport report = failure_tests::RunScenarios(selected, options);

  std::string notes = "kvgate check failures";
  for (const auto& s : selected)
    notes += (&s == &selected.front() ? " --only " : ",") + std::string(s.name);
  const int64_t run_id = failure_tests::StoreInHistory(db, report, notes, kGitCommit);

  std::ostream& out = o.json_file == "-" ? std::cerr : std::cout;
  for (const auto& r : report.results) {
    char line[64];
    std::snprintf(line, sizeof(line), "%-18s %-4s %7.1f s  ", r.name.c_str(),
                  r.passed ? "PASS" : "FAIL", r.seconds);
    out << line << r.reason << "\n";
  }
  out << report.passed_count() << "/" << report.results.size() << " failure scenarios passed; "
      << "history run " << run_id << " in " << o.db << "\n";
  if (o.keep_work_dir || !report.all_passed()) {
    out << "work folders: " << report.work_root.string() << "\n";
  }
  if (!o.json_file.empty()) {
    nlohmann::json json = failure_tests::ToJson(report);
    json["run_id"] = run_id;
    const std::string text = json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    if (o.json_file == "-") {
      std::cout << text << "\n";
    } else {
      std::ofstream file(o.json_file, std::ios::binary | std::ios::trunc);
      file << text << "\n";
      if (!file) throw std::runtime_error("cannot write --json file '" + o.json_file + "'");
    }
  }
  return report.all_passed() ? 0 : 1;
}

void AddCheckFailuresCommand(CLI::App& app, CommandContext& context) {
  // `check` is added by check_command.cc (order 300); this joins it as one more subcommand.
  CLI::App* check = app.get_subcommand("check");
  auto* cmd = check->add_subcommand(
      "failures",
      "Failure scenarios (codebook mismatch, model upgrade, budget change, server and "
      "suite crash recovery) on real local servers; results stored in the history");
  auto o = std::make_shared<FailureOptions>();
  cmd->add_option("--only", o->only, "Run only these scenarios (comma-separated names)")
      ->delimiter(',');
  cmd->add_option("--json", o->json_file, "Also write the results as JSON to FILE (- = stdout)");
  cmd->add_option("--db", o->db, "Run history (SQLite) to store the results in")
      ->capture_default_str();
  cmd->add_option("--model", o->model_dir, "Model directory for the servers (default: built-in)");
  cmd->add_option("--threads", o->threads, "Torch threads per server (default 1)");
  cmd->add_option("--budget", o->budget_s,
                  "Seconds the whole list may take; later scenarios fail as not run (default 600)");
  cmd->add_flag("--keep-work-dir", o->keep_work_dir,
                "Keep every scenario's work folder (logs, databases); failed ones are always kept");
  cmd->add_flag("--list", o->list, "List the scenarios and exit");
  cmd->callback([o, &context] { context.exit_code = RunFailures(*o); });
}

KVGATE_REGISTER_COMMAND(301, AddCheckFailuresCommand);

}  // namespace
}  // namespace kvgate
