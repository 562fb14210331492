// `kvgate history regate`: a stored run's gates decided again from its rows alone, beside what
// the run recorded (run_suite.h).
#include <algorithm>
#include <optional>

#include "evidence.h"
#include "kvgate/suite/run_suite.h"

namespace kvgate::suite {

std::vector<gates::GateResult> RegateRun(history::HistoryDb& db, int64_t run_id) {
  history::RunRow run = db.GetRun(run_id);
  policy::Policy policy = policy::ParsePolicy(run.info.policy_text, "run " + std::to_string(run_id));
  return DecideFromRows(db, run_id, policy);
}

RegateComparison CompareRegate(history::HistoryDb& db, int64_t run_id) {
  RegateComparison out;
  const std::vector<gates::GateResult> recomputed = RegateRun(db, run_id);
  out.verdict = gates::Decide(recomputed);
  out.recorded_verdict = db.GetRun(run_id).verdict;
  std::vector<history::GateResult> fresh;
  for (const auto& g : recomputed) fresh.push_back(ToHistoryGate(g));
  auto take_fresh = [&fresh](const std::string& gate) -> std::optional<history::GateResult> {
    auto it = std::find_if(fresh.begin(), fresh.end(), [&](const auto& g) { return g.gate == gate; });
    if (it == fresh.end()) return std::nullopt;
    history::GateResult found = *it;
    fresh.erase(it);
    return found;
  };
  for (const history::GateResult& recorded : db.GateResults(run_id)) {
    RegateComparison::Row row{recorded.gate, recorded, take_fresh(recorded.gate), {}};
    if (row.recomputed) {
      const history::GateResult& now = *row.recomputed;
      if (now.status != recorded.status) row.differences.push_back("status");
      if (now.observed != recorded.observed) row.differences.push_back("observed");
      if (now.threshold != recorded.threshold) row.differences.push_back("threshold");
      if (now.interval_lo != recorded.interval_lo || now.interval_hi != recorded.interval_hi) {
        row.differences.push_back("interval");
      }
      if (now.reason != recorded.reason) row.differences.push_back("reason");
    } else {
      row.differences.push_back("not decided any more");
    }
    out.rows.push_back(std::move(row));
  }
  for (history::GateResult& extra : fresh) {
    out.rows.push_back({extra.gate, std::nullopt, std::move(extra), {"not recorded"}});
  }
  out.identical = !out.rows.empty() &&
                  std::all_of(out.rows.begin(), out.rows.end(),
                              [](const auto& row) { return row.differences.empty(); });
  return out;
}

}  // namespace kvgate::suite
