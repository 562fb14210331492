// Internal to gates/history: the state a HistoryDb holds (its connection) and the helpers that its
// source files share (history_db.cc: open, run lifecycle, integrity; history_legs.cc: a run's
// legs and its resume; history_writes.cc: evidence added to a running run; history_reads.cc:
// reading rows back; history_json.cc: JSON forms and Export). Not installed, not for other
// targets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kvgate/history/history_db.h"
#include "sqlite_connection.h"

namespace kvgate::history {

struct HistoryDb::Impl {
  Impl(const std::filesystem::path& path, const Options& options)
      : connection(path, options.create_if_missing, options.busy_timeout_ms) {}

  sqlite::Connection connection;
  int schema_version = 0;

  const std::filesystem::path& path() const { return connection.path(); }

  [[noreturn]] void Throw(HistoryError::Kind kind, const std::string& message) const {
    throw HistoryError(kind, path(), message);
  }

  // Within a write transaction: the run must exist and still be running.
  void RequireRunning(int64_t run_id) {
    sqlite::Statement stmt(connection, "SELECT status FROM runs WHERE id = ?", "read run status");
    stmt.Bind(1, run_id);
    if (!stmt.Step()) Throw(HistoryError::Kind::kNotFound, "no run " + std::to_string(run_id));
    std::string status = stmt.Text(0);
    if (status != "running") {
      Throw(HistoryError::Kind::kWrongState, "run " + std::to_string(run_id) + " is " + status +
                                   "; evidence can only be added to a running run");
    }
  }

  // The run's latest leg (RunLeg): the one its evidence is added to while it runs.
  int CurrentLeg(int64_t run_id) {
    sqlite::Statement stmt(connection, "SELECT max(leg) FROM run_legs WHERE run_id = ?",
                           "read the run's leg");
    stmt.Bind(1, run_id);
    stmt.Step();  // an aggregate always yields one row
    const std::optional<int64_t> leg = stmt.OptionalInt(0);
    if (!leg) {
      Throw(HistoryError::Kind::kCorrupt, "run " + std::to_string(run_id) + " has no leg rows");
    }
    return static_cast<int>(*leg);
  }

  // Ends the run's current leg (FinishRun, MarkInterruptedRuns), inside their transaction;
  // ended_at stays absent for a leg whose process died (when is not known).
  void EndLeg(int64_t run_id, const std::optional<std::string>& ended_at,
              const std::string& reason) {
    sqlite::Statement stmt(connection,
                           "UPDATE run_legs SET ended_at = ?, end_reason = ? WHERE run_id = ? AND "
                           "leg = (SELECT max(leg) FROM run_legs WHERE run_id = ?)",
                           "end the run's leg");
    stmt.Bind(1, ended_at).Bind(2, reason).Bind(3, run_id).Bind(4, run_id);
    stmt.Run();
  }

  void RequireRunExists(int64_t run_id) {
    sqlite::Statement stmt(connection, "SELECT 1 FROM runs WHERE id = ?", "look up run");
    stmt.Bind(1, run_id);
    if (!stmt.Step()) Throw(HistoryError::Kind::kNotFound, "no run " + std::to_string(run_id));
  }
};

// The current time as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC), the form of every stored timestamp.
std::string NowUtc();

// Argument checks: each throws std::invalid_argument naming the field.
void RequireNonEmpty(const std::string& value, const std::string& field);
void RequireOneOf(const std::string& value, std::initializer_list<const char*> allowed,
                  const std::string& field);
void RequireNotNan(const std::optional<double>& value, const std::string& field);

inline std::string Dump(const nlohmann::json& value) { return value.dump(); }

// Parses a stored JSON column; a HistoryError (corrupt) naming `where` if it is not JSON.
nlohmann::json ParseJson(const std::string& text, const std::filesystem::path& path,
                         const std::string& where);

// Seeds are uint64 but SQLite integers are int64: store the same 64 bits.
int64_t SeedToDb(uint64_t seed);
uint64_t SeedFromDb(int64_t stored);

// One row of `runs`, selected with kRunColumns in that order.
inline constexpr const char* kRunColumns =
    "id, kind, started_at, ended_at, status, status_reason, policy_text, policy_digest, "
    "git_commit, machine_json, device_json, server_commands_json, verdict, exit_code, notes, "
    "owner_host, owner_pid, owner_start_token, planned_json";
RunRow ReadRunRow(sqlite::Statement& stmt, const std::filesystem::path& path);

}  // namespace kvgate::history
