// The report of a stored run: report.json built from the history alone, and report.html drawn
// from it (run_suite.h).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>

#include "evidence.h"
#include "kvgate/loadgen/metrics.h"
#include "kvgate/report/report.h"
#include "kvgate/suite/run_suite.h"

namespace kvgate::suite {
namespace {

std::string NowIso() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buffer;
}

}  // namespace

nlohmann::json BuildReportJson(history::HistoryDb& db, int64_t run_id) {
  history::RunRow run = db.GetRun(run_id);
  nlohmann::json report;
  report["kvgate_report_version"] = 1;
  report["generated_at"] = NowIso();
  report["run"] = history::ToJson(run);
  // Who measured what: one leg, or several when the run was resumed (each its machine, commit
  // and servers; the evidence rows name their leg).
  report["legs"] = nlohmann::json::array();
  for (const history::RunLeg& leg : db.Legs(run_id)) report["legs"].push_back(history::ToJson(leg));
  std::optional<policy::Policy> policy;
  try {
    policy = policy::ParsePolicy(run.info.policy_text, "run " + std::to_string(run_id));
    report["run"]["policy_name"] = policy->name;
  } catch (const std::exception& e) {
    report["run"]["policy_error"] = e.what();
  }
  report["verdict"] = run.verdict ? nlohmann::json(*run.verdict) : nlohmann::json(nullptr);
  report["exit_code"] = run.exit_code ? nlohmann::json(*run.exit_code) : nlohmann::json(nullptr);
  report["gates"] = nlohmann::json::array();
  std::optional<gates::GateResult> goodput, qa;
  for (const auto& row : db.GateResults(run_id)) {
    gates::GateResult g = FromHistoryGate(row);
    report["gates"].push_back(gates::ToJson(g));
    if (g.gate == "goodput") goodput = g;
    if (g.gate == "qa_f1") qa = g;
  }

  // Quality: passkey tallies and per-subset F1 per label.
  std::map<std::string, std::pair<int, int>> passkey;  // label -> (correct, items)
  std::map<std::string, std::map<std::string, std::pair<double, int>>> f1;  // subset -> label -> sum, n
  const std::vector<history::QualityItem> quality_items = db.QualityItems(run_id);
  for (const auto& item : quality_items) {
    if (item.check == "passkey") {
      auto& tally = passkey[item.label];
      tally.first += item.correct.value_or(false);
      tally.second += 1;
    } else if (item.check == "qa") {
      std::vector<std::string> names = SubsetsOf(item);
      names.insert(names.begin(), "all");
      for (const auto& name : names) {
        auto& cell = f1[name][item.label];
        cell.first += item.score;
        cell.second += 1;
      }
    }
  }
  nlohmann::json quality;
  for (const auto& [label, tally] : passkey) {
    quality["passkey"][label] = {{"correct", tally.first}, {"items", tally.second}};
  }
  quality["qa"]["subsets"] = nlohmann::json::array();
  for (const auto& [subset, by_label] : f1) {
    nlohmann::json entry = {{"subset", subset}};
    for (const auto& [label, cell] : by_label) {
      entry[label + "_f1"] = cell.second ? cell.first / cell.second : 0.0;
    }
    if (qa) {
      for (const auto& s : qa->details.value("subsets", nlohmann::json::array())) {
        if (s.value("subset", "") == subset) entry["drop"] = s["drop"];
      }
    }
    quality["qa"]["subsets"].push_back(entry);
  }
  quality["disagreements"] = QualityDisagreements(quality_items);
  report["quality"] = quality;

  // Load: per-pair summaries (recomputed from records) and the latency samples for the CDFs.
  nlohmann::json load;
  load["pairs"] = nlohmann::json::array();
  std::map<int, nlohmann::json> pairs;
  const loadgen::Slo slo = policy ? policy->slo : loadgen::Slo{};
  std::map<std::string, std::vector<double>> ttft, tpot;
  for (const auto& load_run : db.LoadRuns(run_id)) {
    if (load_run.superseded_in_leg) continue;  // measured again whole by a later leg
    std::vector<loadgen::RequestRecord> records = db.LoadRecords(load_run.id);
    loadgen::Summary summary =
        loadgen::Summarize(records, slo, loadgen::MeasuredDurationSeconds(records));
    const std::string& label = load_run.meta.label;
    for (const auto& r : records) {
      if (r.warmup) continue;
      if (auto t = r.TtftSeconds(); t && r.ok()) ttft[label].push_back(*t);
      if (auto t = r.TpotSeconds()) tpot[label].push_back(*t);
    }
    if (!load_run.meta.pair_index) continue;
    nlohmann::json& pair = pairs[*load_run.meta.pair_index];
    pair["pair_index"] = *load_run.meta.pair_index;
    pair[label] = {{"goodput_rps", summary.goodput_rps},
                   {"p99_ttft_s", summary.ttft.p99_ms / 1000},
                   {"p99_tpot_s", summary.tpot.p99_ms / 1000},
                   {"requests", summary.requests},
                   {"errored", summary.errored},
                   {"valid", load_run.meta.valid},
                   {"invalid_reason", load_run.meta.invalid_reason}};
  }
  for (auto& [index, pair] : pairs) load["pairs"].push_back(pair);
  if (goodput && goodput->interval) {
    load["goodput_ratio"] = {{"estimate", goodput->interval->estimate},
                             {"lo", goodput->interval->lo},
                             {"hi", goodput->interval->hi}};
  }
  // At most 2000 evenly spaced order statistics per curve keep the report small.
  auto thin = [](std::vector<double> xs) {
    std::sort(xs.begin(), xs.end());
    if (xs.size() <= 2000) return xs;
    std::vector<double> out;
    for (size_t i = 0; i < 2000; ++i) out.push_back(xs[i * (xs.size() - 1) / 1999]);
    return out;
  };
  for (auto& [label, xs] : ttft) load["cdf"][label]["ttft_s"] = thin(xs);
  for (auto& [label, xs] : tpot) load["cdf"][label]["tpot_s"] = thin(xs);
  report["load"] = load;

  nlohmann::json ledgers = nlohmann::json::object();
  for (const auto& ledger : db.Ledgers(run_id)) ledgers[ledger.label][ledger.name] = ledger.value;
  report["ledgers"] = ledgers;
  return report;
}

std::pair<std::filesystem::path, std::filesystem::path> WriteReports(
    history::HistoryDb& db, int64_t run_id, const std::filesystem::path& out_dir) {
  std::filesystem::create_directories(out_dir);
  nlohmann::json report = BuildReportJson(db, run_id);
  std::filesystem::path json_path = out_dir / "report.json";
  std::filesystem::path html_path = out_dir / "report.html";
  // Write to a temporary name and rename, so a reader never sees half a report.
  for (auto [path, text] : {std::pair{json_path, report.dump(2, ' ', false,
                                                            nlohmann::json::error_handler_t::replace)},
                            std::pair{html_path, report::RenderHtml(report)}}) {
    std::filesystem::path tmp = path;
    tmp += ".tmp";
    std::ofstream(tmp, std::ios::binary | std::ios::trunc) << text;
    std::filesystem::rename(tmp, path);
  }
  return {json_path, html_path};
}

}  // namespace kvgate::suite
