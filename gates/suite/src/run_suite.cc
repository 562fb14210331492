#include "kvgate/suite/run_suite.h"

#include <chrono>
#include <optional>
#include <string>
#include <tuple>

#include "output_lock.h"
#include "suite_run.h"
#include "kvgate/secrets/redact.h"
#include "kvgate/suite/cpu_placement.h"
#include "kvgate/suite/stop_signals.h"

namespace kvgate::suite {

SuiteOutcome RunSuite(const policy::Policy& policy, const SuiteOptions& options) {
  SuiteOutcome outcome;
  // The output folder is this run's alone (server logs, reports) until it returns; a run that
  // cannot have it writes nothing, not even a history row.
  std::optional<OutputFolderLock> folder_lock;
  try {
    folder_lock.emplace(options.out_dir);
  } catch (const std::exception& e) {
    outcome.exit_code = 3;
    outcome.error = secrets::RedactText(e.what());
    return outcome;
  }
  // Where the local servers and this thread (and every thread it starts from here on: the load
  // generator, the quality clients) run, until this returns. Planned before anything is written:
  // a placement this machine cannot give is refused, as a bad resume is.
  std::optional<CpuPlacement> placement;
  std::optional<ScopedThreadAffinity> on_suite_cpus;
  if (policy.baseline.kind == policy::ServerSpec::Kind::kLocal ||
      policy.candidate.kind == policy::ServerSpec::Kind::kLocal) {
    try {
      placement = PlanPlacement(policy.placement, AllowedCpus());
      if (placement->pinned) on_suite_cpus.emplace(placement->suite);
    } catch (const std::exception& e) {
      outcome.exit_code = 3;
      outcome.error = e.what();
      return outcome;
    }
  }
  StopSignals signals;
  history::HistoryDb::Options open;
  open.create_if_missing = !options.resume_run_id;  // a run to resume is in an existing file
  history::HistoryDb db = history::HistoryDb::Open(options.db_path, open);
  SuiteRun run(policy, options, db, placement ? &*placement : nullptr);
  for (int64_t id : db.MarkInterruptedRuns()) {
    run.Say("history: run " + std::to_string(id) +
            " was left running by a dead process: marked interrupted");
  }
  if (options.resume_run_id) {
    try {
      outcome.run_id = run.Resume(*options.resume_run_id);
    } catch (const std::exception& e) {  // refused: the run is interrupted, as it was
      outcome.exit_code = 3;
      outcome.error = "cannot resume run " + std::to_string(*options.resume_run_id) + ": " +
                      secrets::RedactText(e.what());
      return outcome;
    }
  } else {
    outcome.run_id = run.Register();
  }
  try {
    run.StartServers();
    run.RunQualityChecks();
    run.RunLoadPairs();
    run.StoreLedgers();
    outcome.gates = run.DecideGates();
    outcome.verdict = gates::Decide(outcome.gates);
    outcome.exit_code = gates::ExitCode(outcome.verdict);
    run.StopServers(std::chrono::seconds(20));
    db.FinishRun(outcome.run_id, history::RunStatus::kComplete, gates::ToString(outcome.verdict),
                 outcome.exit_code);
  } catch (const std::exception& e) {
    outcome.exit_code = 3;
    outcome.error = secrets::RedactText(e.what());
    run.StopServers(std::chrono::seconds(5));
    // The history keeps one line (a start-up failure carries the server's output after it).
    std::string reason = outcome.error.substr(0, outcome.error.find('\n'));
    if (reason.size() > 500) reason = reason.substr(0, 497) + "...";
    db.FinishRun(outcome.run_id, history::RunStatus::kInterrupted, std::nullopt, 3, reason);
    run.Say("run " + std::to_string(outcome.run_id) + " could not complete: " + outcome.error);
  }
  run.Phase("report");
  std::tie(outcome.report_json, outcome.report_html) =
      WriteReports(db, outcome.run_id, options.out_dir);
  if (RunMetrics* metrics = options.metrics) {
    if (outcome.exit_code == 3) {
      metrics->SetPhase("failed");
    } else {
      metrics->SetVerdict(outcome.verdict == gates::Verdict::kGo     ? "go"
                          : outcome.verdict == gates::Verdict::kNoGo ? "no_go"
                                                                     : "inconclusive");
      metrics->SetPhase("done");
    }
  }
  return outcome;
}

}  // namespace kvgate::suite
