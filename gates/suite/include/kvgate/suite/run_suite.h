// `kvgate run`: the go/no-go suite end to end (docs/architecture.md, walk 2). It opens the
// history, starts the servers the policy names (or reaches external ones), runs the quality
// checks on both, then the interleaved A/B load pairs, stores every raw record, decides the gates
// FROM THE STORED ROWS (the same code path as `kvgate history regate`), and writes report.json
// and report.html into the output folder.
//
// One call at a time per process (it installs SIGINT/SIGTERM handlers for its duration so a
// Ctrl-C ends the run as `interrupted` with its data kept and its servers stopped). Quality
// items are stored as they are answered, so a run cut inside a check keeps what it measured, and
// an interrupted run can be resumed (SuiteOptions::resume_run_id).
//
// With a local server and the policy's placement "split" (cpu_placement.h), the calling thread
// runs on the suite's CPUs for the call (the threads it starts inherit them; threads started
// before keep theirs) and gets its own CPUs back when the call returns; the local servers run on
// the others. Each leg records where its local servers ran (RunLeg::servers).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvgate/gates/gates.h"
#include "kvgate/history/history_db.h"
#include "kvgate/policy/policy.h"
#include "kvgate/suite/run_metrics.h"

namespace kvgate::suite {

struct SuiteOptions {
  std::filesystem::path db_path = "kvgate.db";
  // report.json, report.html, server logs. Held by one run at a time (a lock file inside it): a
  // run given a folder another run holds is refused (exit_code 3, run_id 0, nothing written).
  std::filesystem::path out_dir = "kvgate-out";
  std::string kvgate_binary;  // runs local servers as `<kvgate_binary> serve <args>`
  std::string version;        // of the running kvgate, recorded with the run
  std::string git_commit;
  std::function<void(const std::string& line)> progress;  // one line per event; may be empty
  RunMetrics* metrics = nullptr;  // live progress for Prometheus (--metrics-port); may be null
  // Resume this interrupted run as its next leg instead of beginning a new one (`kvgate run
  // --resume`, docs/product.md "Runs in legs"): under the policy it began with, by kvgate of its
  // commit, against the same systems; what its legs stored is kept and only the rest measured.
  std::optional<int64_t> resume_run_id;
};

struct SuiteOutcome {
  int64_t run_id = 0;
  gates::Verdict verdict = gates::Verdict::kInconclusive;
  int exit_code = 3;  // 0 GO, 1 NO-GO, 2 INCONCLUSIVE, 3 the suite could not run
  std::vector<gates::GateResult> gates;
  std::string error;  // why the suite could not run (exit_code 3)
  std::filesystem::path report_json, report_html;
};

// Never throws for problems of the run itself (servers failing, bad answers): those end as
// exit_code 3 with `error` set and the run row marked interrupted. A resume that is refused
// (another policy or commit, a run that is not interrupted), and a placement this machine cannot
// give (placement.suite_cpus leaving no CPU for the servers), end as exit_code 3 with run_id 0
// and nothing changed. Text that leaves the run
// (progress lines, errors, the stored policy text and server commands) has its secrets redacted
// (secrets/). Throws history::HistoryError
// only when the history cannot be opened at all.
SuiteOutcome RunSuite(const policy::Policy& policy, const SuiteOptions& options);

// Decides every gate of a stored run from its rows alone, under the policy stored with it.
std::vector<gates::GateResult> RegateRun(history::HistoryDb& db, int64_t run_id);

// `kvgate history regate`: a stored run's recorded gate rows beside the same gates decided anew
// from its raw rows (RegateRun), in the recorded order, then any gate only one side has.
struct RegateComparison {
  struct Row {
    std::string gate;
    std::optional<history::GateResult> recorded;    // absent: the run recorded no such gate
    std::optional<history::GateResult> recomputed;  // absent: no longer decided
    std::vector<std::string> differences;  // fields that differ: "status", "observed", ...
  };
  std::vector<Row> rows;
  gates::Verdict verdict = gates::Verdict::kInconclusive;  // of the recomputed gates
  std::optional<std::string> recorded_verdict;             // as the run stored it
  bool identical = false;  // every gate present on both sides with no differences
};
RegateComparison CompareRegate(history::HistoryDb& db, int64_t run_id);

// The report document of a stored run (what report.json holds; report.html draws it).
nlohmann::json BuildReportJson(history::HistoryDb& db, int64_t run_id);

// Writes report.json and report.html of a stored run into `out_dir`; returns their paths.
std::pair<std::filesystem::path, std::filesystem::path> WriteReports(
    history::HistoryDb& db, int64_t run_id, const std::filesystem::path& out_dir);

}  // namespace kvgate::suite
