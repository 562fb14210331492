// HistoryDb's writes of evidence into a running run (history_db.h): load runs with their raw
// requests, quality items, gate results, ledgers and check results, each one transaction.
#include <cmath>
#include <string>

#include "chunk_times.h"
#include "history_impl.h"
#include "kvgate/history/history_db.h"
#include "sqlite_connection.h"

namespace kvgate::history {

using nlohmann::json;
using Kind = HistoryError::Kind;

namespace {

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

int64_t HistoryDb::AddLoadRun(int64_t run_id, const LoadRunMeta& meta,
                              std::span<const loadgen::RequestRecord> records) {
  ValidateLoadRunMeta(meta);
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement run_stmt(
      c,
      "INSERT INTO load_runs (run_id, label, pair_index, arrival, offered_rate, seed, duration_s, "
      "valid, invalid_reason, settings_json, summary_json, request_count, workload_kind, "
      "workload_path, workload_sha256, leg) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
      .Bind(12, static_cast<int64_t>(records.size()))
      .Bind(13, meta.workload_kind)
      .Bind(14, meta.workload_path)
      .Bind(15, meta.workload_sha256)
      .Bind(16, impl_->CurrentLeg(run_id));
  run_stmt.Run();
  const int64_t load_run_id = sqlite3_last_insert_rowid(c.handle());

  sqlite::Statement stmt(
      c,
      "INSERT INTO load_requests (load_run_id, seq, record_index, warmup, scheduled_ns, "
      "issued_ns, sent_ns, first_token_ns, end_ns, chunk_ns, prompt_tokens, completion_tokens, "
      "max_tokens, http_status, error_cause, error_text, session, turn) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        .Bind(16, r.error_text)
        .Bind(17, r.session)
        .Bind(18, r.turn);
    stmt.Run();
  }
  transaction.Commit();
  return load_run_id;
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
                         "prediction, reference_json, score, correct, extra_json, leg) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         "insert quality item");
  const int leg = impl_->CurrentLeg(run_id);
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
    stmt.Bind(10, Dump(item.extra)).Bind(11, leg);
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

}  // namespace kvgate::history
