#include "kvgate/history/export_csv.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace kvgate::history {
namespace {

using nlohmann::json;

void WriteRow(std::ostream& out, const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << CsvField(fields[i]);
  out << "\r\n";
}

std::string Number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

std::string Optional(const std::optional<double>& value) { return value ? Number(*value) : ""; }

std::string Ms(const std::optional<double>& seconds) {
  return seconds ? Number(*seconds * 1e3) : "";
}

// A JSON value as one field: strings as they are, numbers and booleans as JSON writes them,
// null as empty, arrays and objects as JSON text.
std::string Scalar(const json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

// Nested objects flattened to dotted keys, in the JSON's (sorted) key order.
void Flatten(const json& value, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      Flatten(item, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  out.emplace_back(prefix, Scalar(value));
}

void Requests(HistoryDb& db, int64_t run_id, std::ostream& out) {
  WriteRow(out, {"load_run_id", "label", "pair_index", "index", "warmup", "session", "turn",
                 "scheduled_ns",
                 "issued_ns", "sent_ns", "first_token_ns", "end_ns", "chunks", "prompt_tokens",
                 "completion_tokens", "max_tokens", "http_status", "error_cause", "error_text",
                 "ttft_ms", "tpot_ms", "e2e_ms"});
  for (const LoadRunRow& lr : db.LoadRuns(run_id)) {
    const std::string pair = lr.meta.pair_index ? std::to_string(*lr.meta.pair_index) : "";
    for (const loadgen::RequestRecord& r : db.LoadRecords(lr.id)) {
      WriteRow(out, {std::to_string(lr.id), lr.meta.label, pair, std::to_string(r.index),
                     r.warmup ? "1" : "0", std::to_string(r.session), std::to_string(r.turn),
                     std::to_string(r.scheduled_ns),
                     std::to_string(r.issued_ns), std::to_string(r.sent_ns),
                     std::to_string(r.first_token_ns), std::to_string(r.end_ns),
                     std::to_string(r.chunk_ns.size()), std::to_string(r.prompt_tokens),
                     std::to_string(r.completion_tokens), std::to_string(r.max_tokens),
                     std::to_string(r.http_status), r.error_cause, r.error_text,
                     Ms(r.TtftSeconds()), Ms(r.TpotSeconds()), Ms(r.E2eSeconds())});
    }
  }
}

void LoadRuns(HistoryDb& db, int64_t run_id, std::ostream& out) {
  const std::vector<LoadRunRow> rows = db.LoadRuns(run_id);
  // The summary's keys, as the union over the runs (a run that errored may lack some).
  std::vector<std::string> keys;
  std::vector<std::vector<std::pair<std::string, std::string>>> flat(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    Flatten(rows[i].meta.summary, "", flat[i]);
    for (const auto& [key, value] : flat[i]) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  std::vector<std::string> header = {"load_run_id", "label",   "pair_index",     "arrival",
                                     "offered_rate", "seed",   "duration_s",     "valid",
                                     "invalid_reason", "request_count"};
  for (const std::string& key : keys) header.push_back("summary." + key);
  WriteRow(out, header);
  for (size_t i = 0; i < rows.size(); ++i) {
    const LoadRunMeta& m = rows[i].meta;
    std::vector<std::string> row = {std::to_string(rows[i].id),
                                    m.label,
                                    m.pair_index ? std::to_string(*m.pair_index) : "",
                                    m.arrival,
                                    Optional(m.offered_rate),
                                    std::to_string(m.seed),
                                    Number(m.duration_s),
                                    m.valid ? "1" : "0",
                                    m.invalid_reason,
                                    std::to_string(rows[i].request_count)};
    for (const std::string& key : keys) {
      std::string value;
      for (const auto& [k, v] : flat[i]) {
        if (k == key) value = v;
      }
      row.push_back(value);
    }
    WriteRow(out, row);
  }
}

void Quality(HistoryDb& db, int64_t run_id, std::ostream& out) {
  WriteRow(out, {"check", "label", "item_id", "subset", "prediction", "reference", "score",
                 "correct", "extra"});
  for (const QualityItem& q : db.QualityItems(run_id)) {
    WriteRow(out, {q.check, q.label, q.item_id, q.subset, q.prediction, q.reference.dump(),
                   Number(q.score), q.correct ? (*q.correct ? "1" : "0") : "", q.extra.dump()});
  }
}

void Gates(HistoryDb& db, int64_t run_id, std::ostream& out) {
  WriteRow(out, {"gate", "status", "observed", "threshold", "interval_lo", "interval_hi",
                 "reason", "details"});
  for (const GateResult& g : db.GateResults(run_id)) {
    WriteRow(out, {g.gate, g.status, Optional(g.observed), Optional(g.threshold),
                   Optional(g.interval_lo), Optional(g.interval_hi), g.reason, g.details.dump()});
  }
}

}  // namespace

CsvTable ParseCsvTable(std::string_view name) {
  if (name == "requests") return CsvTable::kRequests;
  if (name == "load_runs") return CsvTable::kLoadRuns;
  if (name == "quality") return CsvTable::kQuality;
  if (name == "gates") return CsvTable::kGates;
  throw std::invalid_argument("CSV table must be requests, load_runs, quality or gates, got '" +
                              std::string(name) + "'");
}

std::string_view ToString(CsvTable table) {
  switch (table) {
    case CsvTable::kRequests:
      return "requests";
    case CsvTable::kLoadRuns:
      return "load_runs";
    case CsvTable::kQuality:
      return "quality";
    case CsvTable::kGates:
      return "gates";
  }
  return "unknown";
}

std::string CsvField(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

void WriteCsv(HistoryDb& db, int64_t run_id, CsvTable table, std::ostream& out) {
  db.GetRun(run_id);  // not_found before any header is written
  switch (table) {
    case CsvTable::kRequests:
      return Requests(db, run_id, out);
    case CsvTable::kLoadRuns:
      return LoadRuns(db, run_id, out);
    case CsvTable::kQuality:
      return Quality(db, run_id, out);
    case CsvTable::kGates:
      return Gates(db, run_id, out);
  }
}

}  // namespace kvgate::history
