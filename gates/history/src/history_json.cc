// The history's JSON forms (history_db.h): one per row type, and Export, a whole run in one
// read transaction. A request record's form is the load generator's own (loadgen/report.h).
#include <sqlite3.h>

#include "history_impl.h"
#include "kvgate/history/history_db.h"
#include "kvgate/loadgen/report.h"
#include "sqlite_connection.h"

namespace kvgate::history {

using nlohmann::json;

json HistoryDb::Export(int64_t run_id) {
  // One read transaction, so the export is a consistent snapshot even while a run is writing.
  auto& c = impl_->connection;
  c.Exec("BEGIN", "begin read");
  try {
    json out;
    out["schema_version"] = impl_->schema_version;
    out["run"] = ToJson(GetRun(run_id));
    out["legs"] = json::array();
    for (const RunLeg& leg : Legs(run_id)) out["legs"].push_back(ToJson(leg));
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
              {"notes", run.info.notes},
              {"planned", run.info.planned}};
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
          {"request_count", load_run.request_count},
          {"workload_source",
           {{"kind", m.workload_kind}, {"path", m.workload_path}, {"sha256", m.workload_sha256}}},
          {"leg", load_run.leg},
          {"superseded_in_leg",
           load_run.superseded_in_leg ? json(*load_run.superseded_in_leg) : json(nullptr)}};
}

json ToJson(const loadgen::RequestRecord& r) { return loadgen::RecordToJson(r); }

json ToJson(const QualityItem& item) {
  return {{"check", item.check},
          {"label", item.label},
          {"item_id", item.item_id},
          {"subset", item.subset},
          {"prediction", item.prediction},
          {"reference", item.reference},
          {"score", item.score},
          {"correct", item.correct ? json(*item.correct) : json(nullptr)},
          {"extra", item.extra},
          {"leg", item.leg}};
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


LoadRunMeta LoadRunMetaOf(const loadgen::LoadResult& result, std::string label,
                          std::optional<int> pair_index) {
  LoadRunMeta meta;
  meta.label = std::move(label);
  meta.pair_index = pair_index;
  const loadgen::LoadSettings& settings = result.settings;
  const bool open = settings.mode == loadgen::LoadMode::kOpenLoop;
  meta.arrival = open ? std::string(loadgen::ArrivalName(settings.arrival)) : "closed";
  if (open) meta.offered_rate = settings.rate_rps;
  meta.seed = settings.seed;
  meta.duration_s = result.summary.duration_s;
  meta.valid = result.validity.valid;
  for (const std::string& reason : result.validity.reasons) {
    meta.invalid_reason += (meta.invalid_reason.empty() ? "" : "; ") + reason;
  }
  meta.settings = loadgen::SettingsToJson(settings);
  meta.settings["url"] = result.url;  // redacted by the generator
  meta.settings["model"] = result.model;
  meta.settings["endpoint"] = result.endpoint;
  meta.settings["connection"] = result.connection;  // how it connected: http, or TLS and its checks
  meta.settings["tls_verification_off"] = result.tls_verification_off;
  meta.summary = loadgen::SummaryToJson(result.summary);
  meta.summary["validity"] = loadgen::ValidityToJson(result.validity);
  // Cut by a stop request (SIGINT/SIGTERM) before its schedule ended: a resumed run measures
  // its pair again.
  meta.summary["stopped"] = result.stopped;
  meta.workload_kind = result.workload_source.kind;
  meta.workload_path = result.workload_source.path;
  meta.workload_sha256 = result.workload_source.sha256;
  return meta;
}

}  // namespace kvgate::history
