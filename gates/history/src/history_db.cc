#include "kvgate/history/history_db.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

#include "chunk_times.h"
#include "schema.h"
#include "sqlite_connection.h"

namespace kvgate::history {
namespace {

using nlohmann::json;
using Kind = HistoryError::Kind;

std::string NowUtc() {
  auto now = std::chrono::system_clock::now();
  auto seconds = std::chrono::system_clock::to_time_t(now);
  auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[40];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof(out), "%s.%03dZ", buffer, static_cast<int>(millis.count()));
  return out;
}

void RequireNonEmpty(const std::string& value, const std::string& field) {
  if (value.empty()) throw std::invalid_argument(field + " must not be empty");
}

void RequireOneOf(const std::string& value, std::initializer_list<const char*> allowed,
                  const std::string& field) {
  for (const char* a : allowed) {
    if (value == a) return;
  }
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  throw std::invalid_argument(field + " must be one of " + list + ", got '" + value + "'");
}

void RequireNotNan(const std::optional<double>& value, const std::string& field) {
  if (value && std::isnan(*value)) {
    throw std::invalid_argument(field + " is NaN; leave it empty when there is no value");
  }
}

std::string Dump(const json& value) { return value.dump(); }

json ParseJson(const std::string& text, const std::filesystem::path& path,
               const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw HistoryError(Kind::kCorrupt, path, where + " holds invalid JSON: " + e.what());
  }
}

// Seeds are uint64 but SQLite integers are int64: store the same 64 bits.
int64_t SeedToDb(uint64_t seed) {
  int64_t out;
  std::memcpy(&out, &seed, sizeof(out));
  return out;
}
uint64_t SeedFromDb(int64_t stored) {
  uint64_t out;
  std::memcpy(&out, &stored, sizeof(out));
  return out;
}

}  // namespace

HistoryError::HistoryError(Kind kind, std::filesystem::path path, const std::string& message)
    : std::runtime_error("history " + path.string() + ": " + message),
      kind_(kind),
      path_(std::move(path)) {}

std::string_view ToString(HistoryError::Kind kind) {
  switch (kind) {
    case Kind::kCannotOpen:
      return "cannot_open";
    case Kind::kNotADatabase:
      return "not_a_database";
    case Kind::kCorrupt:
      return "corrupt";
    case Kind::kNotAKvgateHistory:
      return "not_a_kvgate_history";
    case Kind::kNewerSchema:
      return "newer_schema";
    case Kind::kBusy:
      return "busy";
    case Kind::kConstraint:
      return "constraint";
    case Kind::kNotFound:
      return "not_found";
    case Kind::kWrongState:
      return "wrong_state";
    case Kind::kSql:
      return "sql";
  }
  return "unknown";
}

std::string_view ToString(RunStatus status) {
  switch (status) {
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kComplete:
      return "complete";
    case RunStatus::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

RunStatus ParseRunStatus(std::string_view text) {
  if (text == "running") return RunStatus::kRunning;
  if (text == "complete") return RunStatus::kComplete;
  if (text == "interrupted") return RunStatus::kInterrupted;
  throw std::invalid_argument("run status must be running, complete or interrupted, got '" +
                              std::string(text) + "'");
}

struct HistoryDb::Impl {
  Impl(const std::filesystem::path& path, const Options& options)
      : connection(path, options.create_if_missing, options.busy_timeout_ms) {}

  sqlite::Connection connection;
  int schema_version = 0;

  const std::filesystem::path& path() const { return connection.path(); }

  [[noreturn]] void Throw(Kind kind, const std::string& message) const {
    throw HistoryError(kind, path(), message);
  }

  // Within a write transaction: the run must exist and still be running.
  void RequireRunning(int64_t run_id) {
    sqlite::Statement stmt(connection, "SELECT status FROM runs WHERE id = ?", "read run status");
    stmt.Bind(1, run_id);
    if (!stmt.Step()) Throw(Kind::kNotFound, "no run " + std::to_string(run_id));
    std::string status = stmt.Text(0);
    if (status != "running") {
      Throw(Kind::kWrongState, "run " + std::to_string(run_id) + " is " + status +
                                   "; evidence can only be added to a running run");
    }
  }

  void RequireRunExists(int64_t run_id) {
    sqlite::Statement stmt(connection, "SELECT 1 FROM runs WHERE id = ?", "look up run");
    stmt.Bind(1, run_id);
    if (!stmt.Step()) Throw(Kind::kNotFound, "no run " + std::to_string(run_id));
  }
};

namespace {

// Refuses a file that is a valid SQLite database of some other application, before anything is
// written to it. Reading the header is also where a non-database file is first noticed.
void ClassifyFile(sqlite::Connection& connection) {
  auto application_id =
      connection.QueryInt("PRAGMA application_id", "read file header").value_or(0);
  auto user_version = connection.QueryInt("PRAGMA user_version", "read file header").value_or(0);
  auto objects =
      connection.QueryInt("SELECT count(*) FROM sqlite_master", "read schema").value_or(0);
  if (application_id == schema::kApplicationId) return;
  if (application_id == 0 && user_version == 0 && objects == 0) return;  // new, empty file
  char id[16];
  std::snprintf(id, sizeof(id), "0x%08llx", static_cast<unsigned long long>(application_id));
  throw HistoryError(Kind::kNotAKvgateHistory, connection.path(),
                     "an SQLite database of another application (application_id " +
                         std::string(id) + ", user_version " + std::to_string(user_version) + ", " +
                         std::to_string(objects) + " schema objects); refusing to modify it");
}

void ConfigureConnection(sqlite::Connection& connection) {
  auto mode = connection.QueryText("PRAGMA journal_mode = WAL", "enable WAL");
  if (!mode || *mode != "wal") {
    throw HistoryError(Kind::kCannotOpen, connection.path(),
                       "cannot enable WAL mode (journal_mode is " + mode.value_or("?") +
                           "); is the file on a network file system?");
  }
  // NORMAL is durable against a crash of the process in WAL mode (only a power loss can undo
  // the last commits) and much cheaper than FULL for the many small writes of a run.
  connection.Exec("PRAGMA synchronous = NORMAL", "set synchronous");
  connection.Exec("PRAGMA foreign_keys = ON", "enable foreign keys");
  if (connection.QueryInt("PRAGMA foreign_keys", "read foreign_keys").value_or(0) != 1) {
    throw HistoryError(Kind::kSql, connection.path(), "this SQLite cannot enforce foreign keys");
  }
}

RunRow ReadRunRow(sqlite::Statement& stmt, const std::filesystem::path& path) {
  RunRow row;
  row.id = stmt.Int(0);
  row.info.kind = stmt.Text(1);
  row.started_at = stmt.Text(2);
  row.ended_at = stmt.OptionalText(3);
  row.status = ParseRunStatus(stmt.Text(4));
  row.status_reason = stmt.Text(5);
  row.info.policy_text = stmt.Text(6);
  row.info.policy_digest = stmt.Text(7);
  row.info.git_commit = stmt.Text(8);
  const std::string where = "run " + std::to_string(row.id);
  row.info.machine = ParseJson(stmt.Text(9), path, where + " machine_json");
  row.info.device = ParseJson(stmt.Text(10), path, where + " device_json");
  row.info.server_commands = ParseJson(stmt.Text(11), path, where + " server_commands_json");
  row.verdict = stmt.OptionalText(12);
  if (auto code = stmt.OptionalInt(13)) row.exit_code = static_cast<int>(*code);
  row.info.notes = stmt.Text(14);
  row.info.owner = ProcessIdentity{stmt.Text(15), stmt.Int(16), stmt.Text(17)};
  return row;
}

constexpr const char* kRunColumns =
    "id, kind, started_at, ended_at, status, status_reason, policy_text, policy_digest, "
    "git_commit, machine_json, device_json, server_commands_json, verdict, exit_code, notes, "
    "owner_host, owner_pid, owner_start_token";

void ValidateLoadRunMeta(const LoadRunMeta& meta) {
  RequireNonEmpty(meta.label, "load run label");
  RequireNonEmpty(meta.arrival, "load run arrival");
  if (meta.pair_index && *meta.pair_index < 0) {
    throw std::invalid_argument("load run pair_index must be >= 0, got " +
                                std::to_string(*meta.pair_index));
  }
  if (meta.offered_rate && !(std::isfinite(*meta.offered_rate) && *meta.offered_rate >= 0)) {
    throw std::invalid_argument("load run offered_rate must be finite and >= 0");
  }
  if (!(std::isfinite(meta.duration_s) && meta.duration_s >= 0)) {
    throw std::invalid_argument("load run duration_s must be finite and >= 0, got " +
                                std::to_string(meta.duration_s));
  }
  if (!meta.valid && meta.invalid_reason.empty()) {
    throw std::invalid_argument("load run invalid_reason must say why a run is not valid");
  }
}

}  // namespace

HistoryDb::HistoryDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HistoryDb::HistoryDb(HistoryDb&&) noexcept = default;
HistoryDb& HistoryDb::operator=(HistoryDb&&) noexcept = default;
HistoryDb::~HistoryDb() = default;

HistoryDb HistoryDb::Open(const std::filesystem::path& path, const Options& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw HistoryError(Kind::kCannotOpen, path, "is a directory, not a history file");
  }
  if (!options.create_if_missing && !std::filesystem::exists(path, ec)) {
    throw HistoryError(Kind::kCannotOpen, path, "no such file (no run has been recorded here)");
  }
  auto impl = std::make_unique<Impl>(path, options);
  ClassifyFile(impl->connection);
  ConfigureConnection(impl->connection);
  impl->schema_version = schema::Migrate(impl->connection, schema::Migrations());
  return HistoryDb(std::move(impl));
}

const std::filesystem::path& HistoryDb::path() const { return impl_->path(); }
int HistoryDb::SchemaVersion() const { return impl_->schema_version; }
int HistoryDb::LatestSchemaVersion() { return schema::Migrations().back().version; }

int64_t HistoryDb::BeginRun(const RunInfo& info) {
  RequireNonEmpty(info.kind, "run kind");
  if (!info.server_commands.is_array()) {
    throw std::invalid_argument("run server_commands must be a JSON array");
  }
  ProcessIdentity owner = info.owner.value_or(ProcessIdentity::Current());
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  sqlite::Statement stmt(c,
                         "INSERT INTO runs (kind, started_at, status, policy_text, policy_digest, "
                         "git_commit, machine_json, device_json, server_commands_json, notes, "
                         "owner_host, owner_pid, owner_start_token) "
                         "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         "insert run");
  stmt.Bind(1, info.kind)
      .Bind(2, NowUtc())
      .Bind(3, info.policy_text)
      .Bind(4, info.policy_digest)
      .Bind(5, info.git_commit)
      .Bind(6, Dump(info.machine))
      .Bind(7, Dump(info.device))
      .Bind(8, Dump(info.server_commands))
      .Bind(9, info.notes)
      .Bind(10, owner.host)
      .Bind(11, owner.pid)
      .Bind(12, owner.start_token);
  stmt.Run();
  int64_t id = sqlite3_last_insert_rowid(c.handle());
  transaction.Commit();
  return id;
}

int64_t HistoryDb::AddLoadRun(int64_t run_id, const LoadRunMeta& meta,
                              std::span<const loadgen::RequestRecord> records) {
  ValidateLoadRunMeta(meta);
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement run_stmt(
      c,
      "INSERT INTO load_runs (run_id, label, pair_index, arrival, offered_rate, seed, duration_s, "
      "valid, invalid_reason, settings_json, summary_json, request_count) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      "insert load run");
  run_stmt.Bind(1, run_id)
      .Bind(2, meta.label)
      .Bind(3, meta.pair_index)
      .Bind(4, meta.arrival)
      .Bind(5, meta.offered_rate)
      .Bind(6, SeedToDb(meta.seed))
      .Bind(7, meta.duration_s)
      .Bind(8, meta.valid ? 1 : 0)
      .Bind(9, meta.invalid_reason)
      .Bind(10, Dump(meta.settings))
      .Bind(11, Dump(meta.summary))
      .Bind(12, static_cast<int64_t>(records.size()));
  run_stmt.Run();
  const int64_t load_run_id = sqlite3_last_insert_rowid(c.handle());

  sqlite::Statement stmt(
      c,
      "INSERT INTO load_requests (load_run_id, seq, record_index, warmup, scheduled_ns, "
      "issued_ns, sent_ns, first_token_ns, end_ns, chunk_ns, prompt_tokens, completion_tokens, "
      "max_tokens, http_status, error_cause, error_text) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      "insert load request");
  for (size_t seq = 0; seq < records.size(); ++seq) {
    const loadgen::RequestRecord& r = records[seq];
    stmt.SetRowContext("record " + std::to_string(seq) + ", index " + std::to_string(r.index));
    stmt.Bind(1, load_run_id)
        .Bind(2, static_cast<int64_t>(seq))
        .Bind(3, r.index)
        .Bind(4, r.warmup ? 1 : 0)
        .Bind(5, r.scheduled_ns)
        .Bind(6, r.issued_ns)
        .Bind(7, r.sent_ns)
        .Bind(8, r.first_token_ns)
        .Bind(9, r.end_ns)
        .BindBlob(10, chunk_times::Encode(r.chunk_ns))
        .Bind(11, r.prompt_tokens)
        .Bind(12, r.completion_tokens)
        .Bind(13, r.max_tokens)
        .Bind(14, r.http_status)
        .Bind(15, r.error_cause)
        .Bind(16, r.error_text);
    stmt.Run();
  }
  transaction.Commit();
  return load_run_id;
}

std::vector<loadgen::RequestRecord> HistoryDb::LoadRecords(int64_t load_run_id) {
  auto& c = impl_->connection;
  sqlite::Statement exists(c, "SELECT 1 FROM load_runs WHERE id = ?", "look up load run");
  exists.Bind(1, load_run_id);
  if (!exists.Step()) impl_->Throw(Kind::kNotFound, "no load run " + std::to_string(load_run_id));
  sqlite::Statement stmt(
      c,
      "SELECT seq, record_index, warmup, scheduled_ns, issued_ns, sent_ns, first_token_ns, "
      "end_ns, chunk_ns, prompt_tokens, completion_tokens, max_tokens, http_status, error_cause, "
      "error_text FROM load_requests WHERE load_run_id = ? ORDER BY seq",
      "read load requests");
  stmt.Bind(1, load_run_id);
  std::vector<loadgen::RequestRecord> records;
  while (stmt.Step()) {
    loadgen::RequestRecord r;
    r.index = stmt.Int(1);
    r.warmup = stmt.Int(2) != 0;
    r.scheduled_ns = stmt.Int(3);
    r.issued_ns = stmt.Int(4);
    r.sent_ns = stmt.Int(5);
    r.first_token_ns = stmt.Int(6);
    r.end_ns = stmt.Int(7);
    auto chunks = chunk_times::Decode(stmt.Blob(8));
    if (!chunks) {
      impl_->Throw(Kind::kCorrupt, "load run " + std::to_string(load_run_id) + " record " +
                                       std::to_string(stmt.Int(0)) +
                                       ": chunk_ns is not a valid chunk-time encoding");
    }
    r.chunk_ns = std::move(*chunks);
    r.prompt_tokens = static_cast<int>(stmt.Int(9));
    r.completion_tokens = static_cast<int>(stmt.Int(10));
    r.max_tokens = static_cast<int>(stmt.Int(11));
    r.http_status = static_cast<int>(stmt.Int(12));
    r.error_cause = stmt.Text(13);
    r.error_text = stmt.Text(14);
    records.push_back(std::move(r));
  }
  return records;
}

void HistoryDb::AddQualityItems(int64_t run_id, std::span<const QualityItem> items) {
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string field = "quality item " + std::to_string(i);
    RequireNonEmpty(items[i].check, field + " check");
    RequireNonEmpty(items[i].label, field + " label");
    if (!std::isfinite(items[i].score)) {
      throw std::invalid_argument(field + " (" + items[i].item_id + ") score must be finite");
    }
  }
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement stmt(c,
                         "INSERT INTO quality_items (run_id, check_name, label, item_id, subset, "
                         "prediction, reference_json, score, correct, extra_json) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         "insert quality item");
  for (size_t i = 0; i < items.size(); ++i) {
    const QualityItem& item = items[i];
    stmt.SetRowContext("item " + std::to_string(i) + ": " + item.check + "/" + item.label + "/" +
                       item.item_id);
    stmt.Bind(1, run_id)
        .Bind(2, item.check)
        .Bind(3, item.label)
        .Bind(4, item.item_id)
        .Bind(5, item.subset)
        .Bind(6, item.prediction)
        .Bind(7, Dump(item.reference))
        .Bind(8, item.score);
    if (item.correct) {
      stmt.Bind(9, *item.correct ? 1 : 0);
    } else {
      stmt.BindNull(9);
    }
    stmt.Bind(10, Dump(item.extra));
    stmt.Run();
  }
  transaction.Commit();
}

void HistoryDb::AddGateResults(int64_t run_id, std::span<const GateResult> results) {
  for (const GateResult& g : results) {
    RequireNonEmpty(g.gate, "gate name");
    RequireOneOf(g.status, {"PASS", "FAIL", "INCONCLUSIVE"}, "gate " + g.gate + " status");
    if (g.status != "PASS" && g.reason.empty()) {
      throw std::invalid_argument("gate " + g.gate + " is " + g.status +
                                  " and needs a reason a person can act on");
    }
    RequireNotNan(g.observed, "gate " + g.gate + " observed");
    RequireNotNan(g.threshold, "gate " + g.gate + " threshold");
    RequireNotNan(g.interval_lo, "gate " + g.gate + " interval_lo");
    RequireNotNan(g.interval_hi, "gate " + g.gate + " interval_hi");
  }
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement stmt(c,
                         "INSERT INTO gate_results (run_id, gate, status, observed, threshold, "
                         "interval_lo, interval_hi, reason, details_json) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         "insert gate result");
  for (const GateResult& g : results) {
    stmt.SetRowContext("gate " + g.gate);
    stmt.Bind(1, run_id)
        .Bind(2, g.gate)
        .Bind(3, g.status)
        .Bind(4, g.observed)
        .Bind(5, g.threshold)
        .Bind(6, g.interval_lo)
        .Bind(7, g.interval_hi)
        .Bind(8, g.reason)
        .Bind(9, Dump(g.details));
    stmt.Run();
  }
  transaction.Commit();
}

void HistoryDb::AddLedgers(int64_t run_id, std::span<const Ledger> ledgers) {
  for (const Ledger& l : ledgers) {
    RequireNonEmpty(l.label, "ledger label");
    RequireNonEmpty(l.name, "ledger name");
    RequireNotNan(l.value, "ledger " + l.label + "/" + l.name + " value");
  }
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement stmt(c, "INSERT INTO ledgers (run_id, label, name, value) VALUES (?, ?, ?, ?)",
                         "insert ledger");
  for (const Ledger& l : ledgers) {
    stmt.SetRowContext("ledger " + l.label + "/" + l.name);
    stmt.Bind(1, run_id).Bind(2, l.label).Bind(3, l.name).Bind(4, l.value);
    stmt.Run();
  }
  transaction.Commit();
}

void HistoryDb::AddCheckResult(int64_t run_id, const CheckResult& result) {
  RequireNonEmpty(result.name, "check result name");
  RequireOneOf(result.status, {"PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"},
               "check " + result.name + " status");
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement stmt(c,
                         "INSERT INTO check_results (run_id, name, status, reason, details_json) "
                         "VALUES (?, ?, ?, ?, ?)",
                         "insert check result");
  stmt.SetRowContext("check " + result.name);
  stmt.Bind(1, run_id)
      .Bind(2, result.name)
      .Bind(3, result.status)
      .Bind(4, result.reason)
      .Bind(5, Dump(result.details));
  stmt.Run();
  transaction.Commit();
}

void HistoryDb::FinishRun(int64_t run_id, RunStatus status, std::optional<std::string> verdict,
                          std::optional<int> exit_code, const std::string& status_reason) {
  if (status == RunStatus::kRunning) {
    throw std::invalid_argument("FinishRun status must be complete or interrupted");
  }
  if (verdict) RequireOneOf(*verdict, {"GO", "NO-GO", "INCONCLUSIVE"}, "run verdict");
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement stmt(
      c,
      "UPDATE runs SET status = ?, ended_at = ?, verdict = ?, exit_code = ?, status_reason = ? "
      "WHERE id = ?",
      "finish run");
  stmt.Bind(1, ToString(status))
      .Bind(2, NowUtc())
      .Bind(3, verdict)
      .Bind(4, exit_code)
      .Bind(5, status_reason)
      .Bind(6, run_id);
  stmt.Run();
  transaction.Commit();
}

std::vector<int64_t> HistoryDb::MarkInterruptedRuns() {
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  struct Candidate {
    int64_t id;
    ProcessIdentity owner;
  };
  std::vector<Candidate> candidates;
  {
    sqlite::Statement stmt(c,
                           "SELECT id, owner_host, owner_pid, owner_start_token FROM runs "
                           "WHERE status = 'running' ORDER BY id",
                           "find running runs");
    while (stmt.Step()) {
      candidates.push_back({stmt.Int(0), ProcessIdentity{stmt.Text(1), stmt.Int(2), stmt.Text(3)}});
    }
  }
  std::vector<int64_t> marked;
  sqlite::Statement update(c,
                           "UPDATE runs SET status = 'interrupted', status_reason = ? WHERE id = ? "
                           "AND status = 'running'",
                           "mark run interrupted");
  for (const Candidate& candidate : candidates) {
    if (CheckLiveness(candidate.owner) != Liveness::kGone) continue;
    std::string reason = "owner process " + std::to_string(candidate.owner.pid) + " on " +
                         candidate.owner.host + " ended without finishing the run (noticed " +
                         NowUtc() + ")";
    update.Bind(1, reason).Bind(2, candidate.id);
    update.Run();
    marked.push_back(candidate.id);
  }
  transaction.Commit();
  return marked;
}

std::vector<RunRow> HistoryDb::ListRuns(int limit) {
  if (limit <= 0) throw std::invalid_argument("ListRuns limit must be > 0");
  sqlite::Statement stmt(
      impl_->connection,
      std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY id DESC LIMIT ?", "list runs");
  stmt.Bind(1, limit);
  std::vector<RunRow> rows;
  while (stmt.Step()) rows.push_back(ReadRunRow(stmt, path()));
  return rows;
}

RunRow HistoryDb::GetRun(int64_t run_id) {
  sqlite::Statement stmt(impl_->connection,
                         std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?",
                         "read run");
  stmt.Bind(1, run_id);
  if (!stmt.Step()) impl_->Throw(Kind::kNotFound, "no run " + std::to_string(run_id));
  return ReadRunRow(stmt, path());
}

std::optional<int64_t> HistoryDb::LatestRunId() {
  sqlite::Statement stmt(impl_->connection, "SELECT max(id) FROM runs", "find latest run");
  stmt.Step();  // an aggregate always yields one row; NULL when there are no runs
  return stmt.OptionalInt(0);
}

std::vector<LoadRunRow> HistoryDb::LoadRuns(int64_t run_id) {
  impl_->RequireRunExists(run_id);
  sqlite::Statement stmt(
      impl_->connection,
      "SELECT id, run_id, label, pair_index, arrival, offered_rate, seed, duration_s, valid, "
      "invalid_reason, settings_json, summary_json, request_count FROM load_runs "
      "WHERE run_id = ? ORDER BY id",
      "read load runs");
  stmt.Bind(1, run_id);
  std::vector<LoadRunRow> rows;
  while (stmt.Step()) {
    LoadRunRow row;
    row.id = stmt.Int(0);
    row.run_id = stmt.Int(1);
    row.meta.label = stmt.Text(2);
    if (auto pair = stmt.OptionalInt(3)) row.meta.pair_index = static_cast<int>(*pair);
    row.meta.arrival = stmt.Text(4);
    row.meta.offered_rate = stmt.OptionalDouble(5);
    row.meta.seed = SeedFromDb(stmt.Int(6));
    row.meta.duration_s = stmt.Double(7);
    row.meta.valid = stmt.Int(8) != 0;
    row.meta.invalid_reason = stmt.Text(9);
    const std::string where = "load run " + std::to_string(row.id);
    row.meta.settings = ParseJson(stmt.Text(10), path(), where + " settings_json");
    row.meta.summary = ParseJson(stmt.Text(11), path(), where + " summary_json");
    row.request_count = stmt.Int(12);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<QualityItem> HistoryDb::QualityItems(int64_t run_id) {
  impl_->RequireRunExists(run_id);
  sqlite::Statement stmt(impl_->connection,
                         "SELECT check_name, label, item_id, subset, prediction, reference_json, "
                         "score, correct, extra_json, id FROM quality_items WHERE run_id = ? "
                         "ORDER BY id",
                         "read quality items");
  stmt.Bind(1, run_id);
  std::vector<QualityItem> items;
  while (stmt.Step()) {
    QualityItem item;
    item.check = stmt.Text(0);
    item.label = stmt.Text(1);
    item.item_id = stmt.Text(2);
    item.subset = stmt.Text(3);
    item.prediction = stmt.Text(4);
    const std::string where = "quality item row " + std::to_string(stmt.Int(9));
    item.reference = ParseJson(stmt.Text(5), path(), where + " reference_json");
    item.score = stmt.Double(6);
    if (auto correct = stmt.OptionalInt(7)) item.correct = *correct != 0;
    item.extra = ParseJson(stmt.Text(8), path(), where + " extra_json");
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<GateResult> HistoryDb::GateResults(int64_t run_id) {
  impl_->RequireRunExists(run_id);
  sqlite::Statement stmt(impl_->connection,
                         "SELECT gate, status, observed, threshold, interval_lo, interval_hi, "
                         "reason, details_json FROM gate_results WHERE run_id = ? ORDER BY id",
                         "read gate results");
  stmt.Bind(1, run_id);
  std::vector<GateResult> results;
  while (stmt.Step()) {
    GateResult g;
    g.gate = stmt.Text(0);
    g.status = stmt.Text(1);
    g.observed = stmt.OptionalDouble(2);
    g.threshold = stmt.OptionalDouble(3);
    g.interval_lo = stmt.OptionalDouble(4);
    g.interval_hi = stmt.OptionalDouble(5);
    g.reason = stmt.Text(6);
    g.details = ParseJson(stmt.Text(7), path(), "gate " + g.gate + " details_json");
    results.push_back(std::move(g));
  }
  return results;
}

std::vector<Ledger> HistoryDb::Ledgers(int64_t run_id) {
  impl_->RequireRunExists(run_id);
  sqlite::Statement stmt(impl_->connection,
                         "SELECT label, name, value FROM ledgers WHERE run_id = ? ORDER BY id",
                         "read ledgers");
  stmt.Bind(1, run_id);
  std::vector<Ledger> ledgers;
  while (stmt.Step()) ledgers.push_back({stmt.Text(0), stmt.Text(1), stmt.Double(2)});
  return ledgers;
}

std::vector<CheckResult> HistoryDb::CheckResults(int64_t run_id) {
  impl_->RequireRunExists(run_id);
  sqlite::Statement stmt(impl_->connection,
                         "SELECT name, status, reason, details_json FROM check_results "
                         "WHERE run_id = ? ORDER BY id",
                         "read check results");
  stmt.Bind(1, run_id);
  std::vector<CheckResult> results;
  while (stmt.Step()) {
    CheckResult r;
    r.name = stmt.Text(0);
    r.status = stmt.Text(1);
    r.reason = stmt.Text(2);
    r.details = ParseJson(stmt.Text(3), path(), "check " + r.name + " details_json");
    results.push_back(std::move(r));
  }
  return results;
}

json HistoryDb::Export(int64_t run_id) {
  // One read transaction, so the export is a consistent snapshot even while a run is writing.
  auto& c = impl_->connection;
  c.Exec("BEGIN", "begin read");
  try {
    json out;
    out["schema_version"] = impl_->schema_version;
    out["run"] = ToJson(GetRun(run_id));
    out["load_runs"] = json::array();
    for (const LoadRunRow& load_run : LoadRuns(run_id)) {
      json entry = ToJson(load_run);
      entry["requests"] = json::array();
      for (const auto& record : LoadRecords(load_run.id))
        entry["requests"].push_back(ToJson(record));
      out["load_runs"].push_back(std::move(entry));
    }
    out["quality_items"] = json::array();
    for (const auto& item : QualityItems(run_id)) out["quality_items"].push_back(ToJson(item));
    out["gate_results"] = json::array();
    for (const auto& g : GateResults(run_id)) out["gate_results"].push_back(ToJson(g));
    out["ledgers"] = json::array();
    for (const auto& l : Ledgers(run_id)) out["ledgers"].push_back(ToJson(l));
    out["check_results"] = json::array();
    for (const auto& r : CheckResults(run_id)) out["check_results"].push_back(ToJson(r));
    c.Exec("COMMIT", "end read");
    return out;
  } catch (...) {
    sqlite3_exec(c.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<std::string> HistoryDb::CheckIntegrity() {
  std::vector<std::string> problems;
  {
    sqlite::Statement stmt(impl_->connection, "PRAGMA integrity_check", "integrity check");
    while (stmt.Step()) {
      std::string line = stmt.Text(0);
      if (line != "ok") problems.push_back(line);
    }
  }
  sqlite::Statement fk(impl_->connection, "PRAGMA foreign_key_check", "foreign key check");
  while (fk.Step()) {
    problems.push_back("foreign key: table " + fk.Text(0) + " row " + fk.Text(1) +
                       " refers to a missing row of " + fk.Text(2));
  }
  return problems;
}

json ToJson(const RunRow& run) {
  json out = {{"id", run.id},
              {"kind", run.info.kind},
              {"started_at", run.started_at},
              {"ended_at", run.ended_at ? json(*run.ended_at) : json(nullptr)},
              {"status", ToString(run.status)},
              {"status_reason", run.status_reason},
              {"policy_text", run.info.policy_text},
              {"policy_digest", run.info.policy_digest},
              {"git_commit", run.info.git_commit},
              {"machine", run.info.machine},
              {"device", run.info.device},
              {"server_commands", run.info.server_commands},
              {"verdict", run.verdict ? json(*run.verdict) : json(nullptr)},
              {"exit_code", run.exit_code ? json(*run.exit_code) : json(nullptr)},
              {"notes", run.info.notes}};
  if (run.info.owner) {
    out["owner"] = {{"host", run.info.owner->host},
                    {"pid", run.info.owner->pid},
                    {"start_token", run.info.owner->start_token}};
  }
  return out;
}

json ToJson(const LoadRunRow& load_run) {
  const LoadRunMeta& m = load_run.meta;
  return {{"id", load_run.id},
          {"run_id", load_run.run_id},
          {"label", m.label},
          {"pair_index", m.pair_index ? json(*m.pair_index) : json(nullptr)},
          {"arrival", m.arrival},
          {"offered_rate", m.offered_rate ? json(*m.offered_rate) : json(nullptr)},
          {"seed", m.seed},
          {"duration_s", m.duration_s},
          {"valid", m.valid},
          {"invalid_reason", m.invalid_reason},
          {"settings", m.settings},
          {"summary", m.summary},
          {"request_count", load_run.request_count}};
}

json ToJson(const loadgen::RequestRecord& r) {
  return {{"index", r.index},
          {"warmup", r.warmup},
          {"scheduled_ns", r.scheduled_ns},
          {"issued_ns", r.issued_ns},
          {"sent_ns", r.sent_ns},
          {"first_token_ns", r.first_token_ns},
          {"end_ns", r.end_ns},
          {"chunk_ns", r.chunk_ns},
          {"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"max_tokens", r.max_tokens},
          {"http_status", r.http_status},
          {"error_cause", r.error_cause},
          {"error_text", r.error_text}};
}

json ToJson(const QualityItem& item) {
  return {{"check", item.check},
          {"label", item.label},
          {"item_id", item.item_id},
          {"subset", item.subset},
          {"prediction", item.prediction},
          {"reference", item.reference},
          {"score", item.score},
          {"correct", item.correct ? json(*item.correct) : json(nullptr)},
          {"extra", item.extra}};
}

json ToJson(const GateResult& g) {
  auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  return {{"gate", g.gate},
          {"status", g.status},
          {"observed", optional(g.observed)},
          {"threshold", optional(g.threshold)},
          {"interval_lo", optional(g.interval_lo)},
          {"interval_hi", optional(g.interval_hi)},
          {"reason", g.reason},
          {"details", g.details}};
}

json ToJson(const Ledger& ledger) {
  return {{"label", ledger.label}, {"name", ledger.name}, {"value", ledger.value}};
}

json ToJson(const CheckResult& r) {
  return {{"name", r.name}, {"status", r.status}, {"reason", r.reason}, {"details", r.details}};
}

}  // namespace kvgate::history
