#include "kvgate/history/history_db.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

#include "history_impl.h"
#include "schema.h"
#include "sqlite_connection.h"

namespace kvgate::history {

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

json ParseJson(const std::string& text, const std::filesystem::path& path,
               const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw HistoryError(Kind::kCorrupt, path, where + " holds invalid JSON: " + e.what());
  }
}

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
  row.info.planned = ParseJson(stmt.Text(18), path, where + " planned_json");
  return row;
}

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
  if (!info.planned.is_object()) throw std::invalid_argument("run planned must be a JSON object");
  ProcessIdentity owner = info.owner.value_or(ProcessIdentity::Current());
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  sqlite::Statement stmt(c,
                         "INSERT INTO runs (kind, started_at, status, policy_text, policy_digest, "
                         "git_commit, machine_json, device_json, server_commands_json, notes, "
                         "owner_host, owner_pid, owner_start_token, planned_json) "
                         "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
      .Bind(12, owner.start_token)
      .Bind(13, Dump(info.planned));
  stmt.Run();
  int64_t id = sqlite3_last_insert_rowid(c.handle());
  sqlite::Statement leg(c,
                        "INSERT INTO run_legs (run_id, leg, started_at, git_commit, machine_json) "
                        "SELECT id, 1, started_at, git_commit, machine_json FROM runs WHERE id = ?",
                        "insert the run's first leg");
  leg.Bind(1, id);
  leg.Run();
  transaction.Commit();
  return id;
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
  const std::string now = NowUtc();
  impl_->EndLeg(run_id, now, status_reason);
  sqlite::Statement stmt(
      c,
      "UPDATE runs SET status = ?, ended_at = ?, verdict = ?, exit_code = ?, status_reason = ? "
      "WHERE id = ?",
      "finish run");
  stmt.Bind(1, ToString(status))
      .Bind(2, now)
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
    impl_->EndLeg(candidate.id, std::nullopt, reason);
    marked.push_back(candidate.id);
  }
  transaction.Commit();
  return marked;
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

}  // namespace kvgate::history
