#include "schema.h"

#include <string>

namespace kvgate::history::schema {
namespace {

// Version 1. Conventions: times are ISO-8601 UTC text; JSON columns are text checked with
// json_valid(); booleans are 0/1; nanosecond times are relative to the load run's start.
constexpr const char* kVersion1 = R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL CHECK (kind <> ''),
  started_at TEXT NOT NULL,
  ended_at TEXT,
  status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'interrupted')),
  status_reason TEXT NOT NULL DEFAULT '',
  policy_text TEXT NOT NULL DEFAULT '',
  policy_digest TEXT NOT NULL DEFAULT '',
  git_commit TEXT NOT NULL DEFAULT '',
  machine_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(machine_json)),
  device_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(device_json)),
  server_commands_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(server_commands_json)),
  verdict TEXT CHECK (verdict IS NULL OR verdict IN ('GO', 'NO-GO', 'INCONCLUSIVE')),
  exit_code INTEGER,
  notes TEXT NOT NULL DEFAULT '',
  owner_host TEXT NOT NULL,
  owner_pid INTEGER NOT NULL,
  owner_start_token TEXT NOT NULL DEFAULT ''
);
CREATE INDEX runs_by_status ON runs (status);

CREATE TABLE load_runs (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  label TEXT NOT NULL CHECK (label <> ''),
  pair_index INTEGER CHECK (pair_index IS NULL OR pair_index >= 0),
  arrival TEXT NOT NULL CHECK (arrival <> ''),
  offered_rate REAL CHECK (offered_rate IS NULL OR offered_rate >= 0),
  seed INTEGER NOT NULL,
  duration_s REAL NOT NULL CHECK (duration_s >= 0),
  valid INTEGER NOT NULL CHECK (valid IN (0, 1)),
  invalid_reason TEXT NOT NULL DEFAULT '',
  settings_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(settings_json)),
  summary_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(summary_json)),
  request_count INTEGER NOT NULL CHECK (request_count >= 0),
  CHECK (valid = 1 OR invalid_reason <> '')
);
CREATE INDEX load_runs_by_run ON load_runs (run_id);

-- One row per loadgen::RequestRecord, in the order given (seq). chunk_ns is the compact
-- encoding of gates/history/src/chunk_times.h.
CREATE TABLE load_requests (
  load_run_id INTEGER NOT NULL REFERENCES load_runs (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL CHECK (seq >= 0),
  record_index INTEGER NOT NULL,
  warmup INTEGER NOT NULL CHECK (warmup IN (0, 1)),
  scheduled_ns INTEGER NOT NULL,
  issued_ns INTEGER NOT NULL CHECK (issued_ns >= -1),
  sent_ns INTEGER NOT NULL CHECK (sent_ns >= -1),
  first_token_ns INTEGER NOT NULL CHECK (first_token_ns >= -1),
  end_ns INTEGER NOT NULL CHECK (end_ns >= -1),
  chunk_ns BLOB NOT NULL,
  prompt_tokens INTEGER NOT NULL CHECK (prompt_tokens >= -1),
  completion_tokens INTEGER NOT NULL CHECK (completion_tokens >= -1),
  max_tokens INTEGER NOT NULL CHECK (max_tokens >= 0),
  http_status INTEGER NOT NULL CHECK (http_status BETWEEN 0 AND 999),
  error_cause TEXT NOT NULL DEFAULT '',
  error_text TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (load_run_id, seq)
) WITHOUT ROWID;

CREATE TABLE quality_items (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  check_name TEXT NOT NULL CHECK (check_name <> ''),
  label TEXT NOT NULL CHECK (label <> ''),
  item_id TEXT NOT NULL,
  subset TEXT NOT NULL DEFAULT '',
  prediction TEXT NOT NULL,
  reference_json TEXT NOT NULL CHECK (json_valid(reference_json)),
  score REAL NOT NULL,
  correct INTEGER CHECK (correct IS NULL OR correct IN (0, 1)),
  extra_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(extra_json)),
  UNIQUE (run_id, check_name, label, item_id)
);

CREATE TABLE gate_results (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  gate TEXT NOT NULL CHECK (gate <> ''),
  status TEXT NOT NULL CHECK (status IN ('PASS', 'FAIL', 'INCONCLUSIVE')),
  observed REAL,
  threshold REAL,
  interval_lo REAL,
  interval_hi REAL,
  reason TEXT NOT NULL DEFAULT '',
  details_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(details_json)),
  UNIQUE (run_id, gate),
  CHECK (status = 'PASS' OR reason <> '')
);

CREATE TABLE ledgers (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  label TEXT NOT NULL CHECK (label <> ''),
  name TEXT NOT NULL CHECK (name <> ''),
  value REAL NOT NULL,
  UNIQUE (run_id, label, name)
);

CREATE TABLE check_results (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  name TEXT NOT NULL CHECK (name <> ''),
  status TEXT NOT NULL CHECK (status IN ('PASS', 'FAIL', 'INCONCLUSIVE', 'SKIPPED')),
  reason TEXT NOT NULL DEFAULT '',
  details_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(details_json)),
  UNIQUE (run_id, name)
);
)sql";

// Version 2: where a load run's requests came from (loadgen::WorkloadSource); '' for runs
// recorded before it and for generated workloads' path and digest.
constexpr const char* kVersion2 = R"sql(
ALTER TABLE load_runs ADD COLUMN workload_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE load_runs ADD COLUMN workload_path TEXT NOT NULL DEFAULT '';
ALTER TABLE load_runs ADD COLUMN workload_sha256 TEXT NOT NULL DEFAULT ''
  CHECK (workload_sha256 = '' OR length(workload_sha256) = 64);
)sql";

// Version 3: a request's multi-turn session and its turn in it (loadgen::RequestRecord). Rows
// recorded before it were single-turn requests: a NULL session reads as the row's own
// record_index, and the turn is 1.
constexpr const char* kVersion3 = R"sql(
ALTER TABLE load_requests ADD COLUMN session INTEGER CHECK (session IS NULL OR session >= 0);
ALTER TABLE load_requests ADD COLUMN turn INTEGER NOT NULL DEFAULT 1 CHECK (turn >= 1);
)sql";

// Version 4: a run measured in legs (`kvgate run --resume`). Leg 1 is the run's start; each
// resume of an interrupted run adds the next, with the commit, machine and servers that measured
// it and why the leg before it ended. Every quality item and load run names its leg; a load run
// a later leg measured again (a pair cut by the stop) keeps its rows, marked superseded, and no
// gate reads it. Runs stored before it get their leg 1 from their own row.
constexpr const char* kVersion4 = R"sql(
CREATE TABLE run_legs (
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  leg INTEGER NOT NULL CHECK (leg >= 1),
  started_at TEXT NOT NULL,
  ended_at TEXT,
  end_reason TEXT NOT NULL DEFAULT '',
  git_commit TEXT NOT NULL DEFAULT '',
  machine_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(machine_json)),
  servers_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(servers_json)),
  PRIMARY KEY (run_id, leg)
) WITHOUT ROWID;
INSERT INTO run_legs (run_id, leg, started_at, ended_at, end_reason, git_commit, machine_json)
  SELECT id, 1, started_at, ended_at, status_reason, git_commit, machine_json FROM runs;
ALTER TABLE load_runs ADD COLUMN leg INTEGER NOT NULL DEFAULT 1 CHECK (leg >= 1);
ALTER TABLE load_runs ADD COLUMN superseded_in_leg INTEGER
  CHECK (superseded_in_leg IS NULL OR superseded_in_leg > leg);
ALTER TABLE quality_items ADD COLUMN leg INTEGER NOT NULL DEFAULT 1 CHECK (leg >= 1);
)sql";

// Version 5: the quality items a run plans per check (RunInfo::planned), so that its gates can
// tell a run cut short from a complete one whatever its policy names; '{}' for runs before it.
constexpr const char* kVersion5 = R"sql(
ALTER TABLE runs ADD COLUMN planned_json TEXT NOT NULL DEFAULT '{}'
  CHECK (json_valid(planned_json));
)sql";

constexpr Migration kMigrations[] = {
    {1, kVersion1},
    {2, kVersion2},
    {3, kVersion3},
    {4, kVersion4},
    {5, kVersion5},
};

}  // namespace

std::span<const Migration> Migrations() { return kMigrations; }

int Migrate(sqlite::Connection& connection, std::span<const Migration> migrations) {
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  auto read_version = [&connection] {
    return static_cast<int>(
        connection.QueryInt("PRAGMA user_version", "read schema version").value_or(0));
  };
  int version = read_version();
  if (version > latest) {
    throw HistoryError(HistoryError::Kind::kNewerSchema, connection.path(),
                       "schema version " + std::to_string(version) +
                           " is newer than this kvgate understands (" + std::to_string(latest) +
                           "); use a newer kvgate");
  }
  for (const Migration& migration : migrations) {
    if (migration.version <= version) continue;
    sqlite::Transaction transaction(connection);
    version = read_version();  // another process may have migrated meanwhile
    if (migration.version <= version) continue;
    const std::string context = "migration to schema version " + std::to_string(migration.version);
    connection.Exec(migration.sql, context);
    // Both pragmas write the database header inside this transaction, so they commit or roll
    // back with the migration.
    connection.Exec("PRAGMA application_id = " + std::to_string(kApplicationId), context);
    connection.Exec("PRAGMA user_version = " + std::to_string(migration.version), context);
    transaction.Commit();
    version = migration.version;
  }
  return version;
}

}  // namespace kvgate::history::schema
