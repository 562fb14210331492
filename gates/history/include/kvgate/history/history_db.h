// The run history: every kvgate run and its raw evidence in one SQLite file (default
// ./kvgate.db), so that any gate can be recomputed later from the database alone
// (docs/product.md, "The run history").
//
// The file is in WAL mode with foreign keys on and a busy timeout; its schema is versioned
// (PRAGMA user_version, PRAGMA application_id marks it as a kvgate history) and upgraded on open
// by ordered migrations, each in one transaction. Every write below is one transaction: it
// lands whole or not at all. Evidence can only be added to a run whose status is `running`;
// once finished, a run's rows are closed, except that an interrupted run may be resumed as a new
// leg (ResumeRun) whose evidence joins what the earlier legs stored.
//
// Thread-safety: a HistoryDb is one SQLite connection; use one per thread (several connections,
// in one or many processes, may share the file). Movable, not copyable.
//
// Errors: problems with the file or the data it holds throw HistoryError (naming the file and
// what is wrong — never a silent re-creation); invalid arguments throw std::invalid_argument
// naming the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/history/process_identity.h"
#include "kvgate/loadgen/record.h"
#include "kvgate/loadgen/run_load.h"

namespace kvgate::history {

class HistoryError : public std::runtime_error {
 public:
  enum class Kind {
    kCannotOpen,         // missing file (when not creating), unreadable, directory missing, …
    kNotADatabase,       // the file is not an SQLite database (e.g. garbage bytes)
    kCorrupt,            // an SQLite database whose pages or rows are damaged
    kNotAKvgateHistory,  // a valid SQLite database of some other application: left untouched
    kNewerSchema,        // written by a newer kvgate; this one will not guess
    kBusy,               // another connection held a lock past the busy timeout
    kConstraint,         // a row broke a constraint (duplicate item, bad value); nothing written
    kNotFound,           // no such run / load run
    kWrongState,         // e.g. adding evidence to a finished run, finishing it twice
    kSql,                // any other SQLite failure
  };
  HistoryError(Kind kind, std::filesystem::path path, const std::string& message);
  Kind kind() const { return kind_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  Kind kind_;
  std::filesystem::path path_;
};

std::string_view ToString(HistoryError::Kind kind);

enum class RunStatus { kRunning, kComplete, kInterrupted };
std::string_view ToString(RunStatus status);      // "running", "complete", "interrupted"
RunStatus ParseRunStatus(std::string_view text);  // throws std::invalid_argument

// What a run is, recorded when it begins.
struct RunInfo {
  std::string kind = "run";   // the subcommand that made it: "run", "load", …; non-empty
  std::string policy_text;    // the policy TOML exactly as used
  std::string policy_digest;  // the caller's digest of policy_text (e.g. "sha256:…"); may be ""
  std::string git_commit;     // kvgate's commit
  nlohmann::json machine = nlohmann::json::object();         // host fingerprint (DescribeMachine())
  nlohmann::json device = nlohmann::json::object();          // accelerator fingerprint
  nlohmann::json server_commands = nlohmann::json::array();  // command lines of started servers
  // The quality items the run plans per check, e.g. {"passkey": 200, "qa": 15000}; {} when not
  // recorded (runs before schema version 4, kinds without quality checks).
  nlohmann::json planned = nlohmann::json::object();
  std::string notes;
  // The process that will finish the run; defaults to the calling process. MarkInterruptedRuns
  // uses it to tell a live run from an abandoned one.
  std::optional<ProcessIdentity> owner;
};

struct RunRow {
  int64_t id = 0;
  std::string started_at;               // ISO-8601 UTC, e.g. "2025-01-31T12:00:00.123Z"
  std::optional<std::string> ended_at;  // set by FinishRun; absent while running/interrupted
  RunStatus status = RunStatus::kRunning;
  std::string status_reason;           // why a run was marked interrupted; else ""
  RunInfo info;                        // info.owner is always set
  std::optional<std::string> verdict;  // "GO", "NO-GO", "INCONCLUSIVE"; absent if none
  std::optional<int> exit_code;
};

// One load-generator run (one member of an A/B pair, or a capacity-search step).
struct LoadRunMeta {
  std::string label;              // "baseline", "candidate", …; non-empty
  std::optional<int> pair_index;  // 0-based position in the ABAB… pairs; absent outside pairs
  std::string arrival;            // "poisson", "gamma", "constant", "closed", …; non-empty
  std::optional<double> offered_rate;  // requests/s; absent for closed loop
  uint64_t seed = 0;                   // schedule seed (stored bit-for-bit as a signed 64-bit int)
  double duration_s = 0.0;             // measured run duration, seconds, finite and >= 0
  bool valid = true;                   // false when the generator could not hold the schedule, …
  std::string invalid_reason;          // required (non-empty) when !valid
  nlohmann::json settings = nlohmann::json::object();  // the load settings as used
  nlohmann::json summary = nlohmann::json::object();   // the generator's summary of the run
  // Where the requests came from (loadgen::WorkloadSource; schema version 2, "" before it).
  std::string workload_kind;
  std::string workload_path;
  std::string workload_sha256;  // 64 hex digits or ""
};

struct LoadRunRow {
  int64_t id = 0;
  int64_t run_id = 0;
  LoadRunMeta meta;
  int64_t request_count = 0;
  int leg = 1;  // the leg of the run that measured it (RunLeg)
  // Set when a later leg measured its pair again (ResumeRun's `supersede`): kept as evidence of what
  // happened, read by no gate.
  std::optional<int> superseded_in_leg;
};

// One scored item of a quality check (passkey, QA, …) on one system.
struct QualityItem {
  std::string check;       // "passkey", "qa", …; non-empty
  std::string label;       // "baseline", "candidate", …; non-empty
  std::string item_id;     // unique per (run, check, label); pairs baseline with candidate
  std::string subset;      // key subset (e.g. "len=8k"); "" when none
  std::string prediction;  // the model's output
  nlohmann::json reference = nlohmann::json::array();  // gold answer(s) or key
  double score = 0.0;           // the check's per-item score, finite (its unit is the check's)
  std::optional<bool> correct;  // for checks with a right/wrong answer
  nlohmann::json extra = nlohmann::json::object();
  int leg = 1;  // the leg that measured it: set by the history when read, ignored when added

  bool operator==(const QualityItem&) const = default;
};

struct GateResult {
  std::string gate;    // "passkey", "qa_f1/len=8k", "p99_ttft", "goodput", …; unique per run
  std::string status;  // "PASS", "FAIL" or "INCONCLUSIVE"
  std::optional<double> observed;  // absent (never NaN) when not computed
  std::optional<double> threshold;
  std::optional<double> interval_lo;
  std::optional<double> interval_hi;
  std::string reason;  // one line a person can act on; required for FAIL and INCONCLUSIVE
  nlohmann::json details = nlohmann::json::object();

  bool operator==(const GateResult&) const = default;
};

// One leg of a run: the run's start (leg 1) or one `kvgate run --resume` of it after it was
// interrupted. A leg's evidence is measured by one process on one machine; a run's legs share its
// policy and kvgate's commit (the suite refuses a resume otherwise) but not its machine.
struct RunLeg {
  int leg = 1;
  std::string started_at;
  std::optional<std::string> ended_at;  // absent while it runs, and for a leg whose process died
  std::string end_reason;               // why it stopped, for a leg that was interrupted
  std::string git_commit;
  nlohmann::json machine = nlohmann::json::object();
  // The systems it measured, as the suite found them: [{"label", "kind", "url", "model"}], URLs
  // redacted, and for a local server where it ran: "cpus" and "client_cpus" (the suite's), e.g.
  // "1" and "0" (absent before placement was recorded); [] until SetLegServers (and for leg 1 of
  // runs stored before schema version 4).
  nlohmann::json servers = nlohmann::json::array();

  bool operator==(const RunLeg&) const = default;
};

// Who resumes a run, and where (ResumeRun).
struct ResumeInfo {
  std::string git_commit;
  nlohmann::json machine = nlohmann::json::object();
  std::optional<ProcessIdentity> owner;  // defaults to the calling process
};

// One resource-ledger reading of one system (capacity, logical reads, …).
struct Ledger {
  std::string label;   // non-empty
  std::string name;    // unique per (run, label)
  double value = 0.0;  // not NaN

  bool operator==(const Ledger&) const = default;
};

// The outcome of a non-gate check, e.g. a failure scenario.
struct CheckResult {
  std::string name;    // unique per run
  std::string status;  // "PASS", "FAIL", "INCONCLUSIVE" or "SKIPPED"
  std::string reason;
  nlohmann::json details = nlohmann::json::object();

  bool operator==(const CheckResult&) const = default;
};

class HistoryDb {
 public:
  struct Options {
    bool create_if_missing = true;  // false: a missing file is kCannotOpen (e.g. for `list`)
    int busy_timeout_ms = 5000;
  };

  // Opens (creating if allowed) and migrates the history at `path`. Throws HistoryError.
  static HistoryDb Open(const std::filesystem::path& path, const Options& options);
  static HistoryDb Open(const std::filesystem::path& path) { return Open(path, Options{}); }

  HistoryDb(HistoryDb&&) noexcept;
  HistoryDb& operator=(HistoryDb&&) noexcept;
  ~HistoryDb();

  const std::filesystem::path& path() const;
  int SchemaVersion() const;
  static int LatestSchemaVersion();

  // --- writes (each one transaction) ---
  // Starts a run with status `running`; returns its id.
  int64_t BeginRun(const RunInfo& info);
  // Stores a load run and all its records (in order); returns the load run's id.
  int64_t AddLoadRun(int64_t run_id, const LoadRunMeta& meta,
                     std::span<const loadgen::RequestRecord> records);
  void AddQualityItems(int64_t run_id, std::span<const QualityItem> items);
  void AddGateResults(int64_t run_id, std::span<const GateResult> results);
  void AddLedgers(int64_t run_id, std::span<const Ledger> ledgers);
  void AddCheckResult(int64_t run_id, const CheckResult& result);
  // Ends a running run: status kComplete or kInterrupted, verdict "GO"/"NO-GO"/"INCONCLUSIVE"
  // or none, the process exit code, and (for kInterrupted) why it stopped, one line a person can
  // act on ("candidate server died: killed by signal 9"). Throws kWrongState if the run is not
  // running.
  void FinishRun(int64_t run_id, RunStatus status, std::optional<std::string> verdict,
                 std::optional<int> exit_code, const std::string& status_reason = "");
  // Marks every `running` run whose owner process is gone as `interrupted` (with a reason);
  // runs of live owners and of other hosts are left alone. Returns the ids it marked.
  std::vector<int64_t> MarkInterruptedRuns();
  // Resumes an interrupted run as its next leg: the run is `running` again under the caller (its
  // ended_at, verdict, exit code and status reason cleared; the reason stays with the leg it
  // ended), and evidence added from now on belongs to the new leg; the load runs `supersede`
  // names are marked superseded by it (their pair is measured again). One transaction: refused,
  // it changes nothing. Returns the leg's number. Throws kNotFound (also for a load run that is
  // not this run's), or kWrongState for a run that is running or complete, that already holds
  // gate results (regate it instead), or a load run already superseded.
  int ResumeRun(int64_t run_id, const ResumeInfo& info,
                std::span<const int64_t> supersede = {});
  // Records the systems the current leg of a running run measures (RunLeg::servers).
  void SetLegServers(int64_t run_id, const nlohmann::json& servers);

  // --- reads ---
  std::vector<RunRow> ListRuns(int limit = 50);  // newest first
  RunRow GetRun(int64_t run_id);                 // throws kNotFound
  std::optional<int64_t> LatestRunId();
  std::vector<LoadRunRow> LoadRuns(int64_t run_id);  // in insertion order
  // The records exactly as they were added (same order, every field). Throws kNotFound.
  std::vector<loadgen::RequestRecord> LoadRecords(int64_t load_run_id);
  std::vector<QualityItem> QualityItems(int64_t run_id);  // in insertion order
  std::vector<GateResult> GateResults(int64_t run_id);
  std::vector<Ledger> Ledgers(int64_t run_id);
  std::vector<CheckResult> CheckResults(int64_t run_id);
  std::vector<RunLeg> Legs(int64_t run_id);  // leg 1 first
  // Everything about one run as JSON: {"schema_version", "run", "legs", "load_runs" (each with
  // its "requests"), "quality_items", "gate_results", "ledgers", "check_results"}.
  nlohmann::json Export(int64_t run_id);

  // PRAGMA integrity_check + foreign_key_check: the problems found, empty when the file is sound.
  std::vector<std::string> CheckIntegrity();

 private:
  struct Impl;
  explicit HistoryDb(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// JSON forms used by Export (and by `kvgate history`).
nlohmann::json ToJson(const RunRow& run);
nlohmann::json ToJson(const LoadRunRow& load_run);
nlohmann::json ToJson(const loadgen::RequestRecord& record);
nlohmann::json ToJson(const QualityItem& item);
nlohmann::json ToJson(const GateResult& result);
nlohmann::json ToJson(const Ledger& ledger);
nlohmann::json ToJson(const CheckResult& result);
nlohmann::json ToJson(const RunLeg& leg);

// The metadata of a load run as the generator measured it (arrival, offered rate for an open
// loop, seed, duration, validity and its reasons joined by "; ", the settings with the target's
// URL and model, the summary with its validity): the one place a LoadResult becomes a row.
LoadRunMeta LoadRunMetaOf(const loadgen::LoadResult& result, std::string label,
                          std::optional<int> pair_index = std::nullopt);

// A fingerprint of this machine for RunInfo::machine: host name, OS (uname), CPU model, logical
// cores, total memory, and "gpus" (ListNvidiaGpus) where there are any. Best effort: fields it
// cannot read are left out.
nlohmann::json DescribeMachine();

// How the hardware of machine fingerprint `now` differs from `before` (DescribeMachine's): its
// CPU model, logical cores and GPUs, as "gpus [\"A\"] -> [\"B\"]; ..." in that order, or "" when
// they are the same (host name, OS and memory are not compared: a rented machine of the same
// kind differs in those). A resumed run says it when a leg runs on other hardware.
std::string HardwareChange(const nlohmann::json& before, const nlohmann::json& now);

// The model names of the GPUs the NVIDIA driver lists under `driver_dir` (a folder per GPU, each
// with an "information" file holding a "Model:" line), sorted; empty without that driver.
std::vector<std::string> ListNvidiaGpus(
    const std::filesystem::path& driver_dir = "/proc/driver/nvidia/gpus");

}  // namespace kvgate::history
