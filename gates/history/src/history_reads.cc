// HistoryDb's reads (history_db.h): runs, load runs with their raw requests, quality items, gate
// results, ledgers and check results, as stored.
#include <string>

#include "chunk_times.h"
#include "history_impl.h"
#include "kvgate/history/history_db.h"
#include "sqlite_connection.h"

namespace kvgate::history {

using nlohmann::json;
using Kind = HistoryError::Kind;

std::vector<loadgen::RequestRecord> HistoryDb::LoadRecords(int64_t load_run_id) {
  auto& c = impl_->connection;
  sqlite::Statement exists(c, "SELECT 1 FROM load_runs WHERE id = ?", "look up load run");
  exists.Bind(1, load_run_id);
  if (!exists.Step()) impl_->Throw(Kind::kNotFound, "no load run " + std::to_string(load_run_id));
  sqlite::Statement stmt(
      c,
      "SELECT seq, record_index, warmup, scheduled_ns, issued_ns, sent_ns, first_token_ns, "
      "end_ns, chunk_ns, prompt_tokens, completion_tokens, max_tokens, http_status, error_cause, "
      "error_text, COALESCE(session, record_index), turn FROM load_requests "
      "WHERE load_run_id = ? ORDER BY seq",
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
    r.session = stmt.Int(15);
    r.turn = static_cast<int>(stmt.Int(16));
    records.push_back(std::move(r));
  }
  return records;
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
      "invalid_reason, settings_json, summary_json, request_count, workload_kind, "
      "workload_path, workload_sha256, leg, superseded_in_leg FROM load_runs "
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
    row.meta.workload_kind = stmt.Text(13);
    row.meta.workload_path = stmt.Text(14);
    row.meta.workload_sha256 = stmt.Text(15);
    row.leg = static_cast<int>(stmt.Int(16));
    if (auto later = stmt.OptionalInt(17)) row.superseded_in_leg = static_cast<int>(*later);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<QualityItem> HistoryDb::QualityItems(int64_t run_id) {
  impl_->RequireRunExists(run_id);
  sqlite::Statement stmt(impl_->connection,
                         "SELECT check_name, label, item_id, subset, prediction, reference_json, "
                         "score, correct, extra_json, id, leg FROM quality_items WHERE run_id = ? "
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
    item.leg = static_cast<int>(stmt.Int(10));
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

}  // namespace kvgate::history
