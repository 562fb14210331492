#include "evidence.h"

#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "kvgate/loadgen/metrics.h"
#include "kvgate/stats/percentile.h"
#include "kvgate/stats/student_t.h"

namespace kvgate::suite {
namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ",") + part;
  return out;
}

// The P99 gate's interval from sampling alone (gates::P99SamplingNoise): each side's pool
// resampled into runs of 1, 2, 4 and 8 times `requests`, the spread of their P99 combined over
// both sides and `pairs` pairs as the gate's t-interval of the mean log-ratio would combine it.
// `baseline` and `candidate`: each side's measured TTFT and TPOT (loadgen::MeasuredLatencies),
// pooled over its load runs.
std::optional<gates::P99SamplingNoise> P99Noise(const loadgen::LatencySamples& baseline,
                                                const loadgen::LatencySamples& candidate,
                                                int requests,
                                                int pairs, double confidence, uint64_t seed) {
  if (requests < 1 || pairs < 2 || baseline.tpot.empty() || candidate.tpot.empty() ||
      baseline.ttft.empty() || candidate.ttft.empty()) {
    return std::nullopt;
  }
  constexpr int kResamples = 200;
  const double t = stats::StudentTQuantile(0.5 + confidence / 2, pairs - 1);
  stats::SeededRng rng(seed);
  const auto half_width = [&](const std::vector<double>& b, const std::vector<double>& c, int n) {
    const double cv_b = stats::PercentileSpread(b, static_cast<size_t>(n), 0.99, kResamples, rng);
    const double cv_c = stats::PercentileSpread(c, static_cast<size_t>(n), 0.99, kResamples, rng);
    return std::exp(t * std::sqrt(cv_b * cv_b + cv_c * cv_c) / std::sqrt(pairs)) - 1;
  };
  gates::P99SamplingNoise noise;
  for (int factor : {1, 2, 4, 8}) {
    const int n = requests * factor;
    noise.requests.push_back(n);
    noise.ttft_half_width.push_back(half_width(baseline.ttft, candidate.ttft, n));
    noise.tpot_half_width.push_back(half_width(baseline.tpot, candidate.tpot, n));
  }
  return noise;
}

}  // namespace

std::vector<std::string> SubsetsOf(const history::QualityItem& item) {
  if (item.extra.contains("subsets")) return item.extra["subsets"].get<std::vector<std::string>>();
  return {};
}

nlohmann::json QualityDisagreements(const std::vector<history::QualityItem>& items) {
  // check -> item_id -> (baseline, candidate)
  using Pair = std::pair<const history::QualityItem*, const history::QualityItem*>;
  std::map<std::string, std::map<std::string, Pair>> paired;
  for (const auto& item : items) {
    Pair& slot = paired[item.check][item.item_id];
    if (item.label == kBaseline) slot.first = &item;
    if (item.label == kCandidate) slot.second = &item;
  }
  nlohmann::json out = {{"checks", nlohmann::json::object()}, {"items", nlohmann::json::array()}};
  for (const auto& [check, by_id] : paired) {
    int both = 0, differ = 0, candidate_better = 0;
    for (const auto& [id, pair] : by_id) {
      const auto& [b, c] = pair;
      if (b == nullptr || c == nullptr) continue;
      ++both;
      if (b->score == c->score) continue;
      ++differ;
      candidate_better += c->score > b->score;
      out["items"].push_back({{"check", check},
                              {"item_id", id},
                              {"subsets", SubsetsOf(*b)},
                              {"reference", b->reference},
                              {"baseline", {{"prediction", b->prediction}, {"score", b->score}}},
                              {"candidate", {{"prediction", c->prediction}, {"score", c->score}}},
                              {"better", c->score > b->score ? kCandidate : kBaseline}});
    }
    out["checks"][check] = {{"paired_items", both},
                            {"differ", differ},
                            {"candidate_better", candidate_better},
                            {"baseline_better", differ - candidate_better}};
  }
  return out;
}

history::QualityItem ToHistoryItem(const checks::QualityRecord& record, const std::string& label) {
  history::QualityItem item;
  item.check = record.check;
  item.label = label;
  item.item_id = record.item_id;
  item.subset = Join(record.subsets);
  item.prediction = record.prediction;
  item.reference = record.gold;
  item.score = record.score;
  item.correct = record.correct;
  item.extra = {{"subsets", record.subsets},       {"error", record.error},
                {"latency_s", record.latency_s},   {"prompt_bytes", record.prompt_bytes},
                {"prompt_tokens", record.prompt_tokens}};
  return item;
}

history::GateResult ToHistoryGate(const gates::GateResult& result) {
  history::GateResult row;
  row.gate = result.gate;
  row.status = gates::ToString(result.status);
  row.observed = result.observed;
  row.threshold = result.threshold;
  if (result.interval) {
    row.interval_lo = result.interval->lo;
    row.interval_hi = result.interval->hi;
  }
  row.reason = result.reason;
  // The whole result (interval estimate and confidence included) so regate and reports can
  // rebuild it exactly.
  row.details = gates::ToJson(result);
  return row;
}

gates::GateResult FromHistoryGate(const history::GateResult& row) {
  return gates::GateResultFromJson(row.details);
}

std::vector<gates::GateResult> DecideFromRows(history::HistoryDb& db, int64_t run_id,
                                              const policy::Policy& policy) {
  std::vector<gates::GateResult> results;
  const policy::GateSpec& spec = policy.gates;
  std::vector<history::QualityItem> items = db.QualityItems(run_id);

  // Passkey: the candidate's items; the baseline's tally says whether a miss is the cache's.
  int correct = 0, errored = 0, total = 0, baseline_correct = 0, baseline_total = 0;
  for (const auto& item : items) {
    if (item.check != "passkey") continue;
    if (item.label == kBaseline) {
      ++baseline_total;
      baseline_correct += item.correct.value_or(false);
    }
    if (item.label != kCandidate) continue;
    ++total;
    correct += item.correct.value_or(false);
    errored += !item.extra.value("error", std::string()).empty();
  }
  // The run's planned items, as it recorded them; for runs that did not, the policy's generated
  // sets (a dataset file's size is then unknown).
  const nlohmann::json planned = db.GetRun(run_id).info.planned;
  const int planned_keys = planned.value("passkey", policy.passkey.items);
  const int planned_qa = planned.value("qa", policy.qa.dataset.empty() ? policy.qa.items : 0);
  results.push_back(gates::PasskeyGate(
      correct, errored, total, spec.passkey_required,
      baseline_total == total ? std::optional<int>(baseline_correct) : std::nullopt,
      planned_keys));

  // QA F1: pair items by id; every key subset an item names is scored on its own. Only items
  // both sides answered are scored: an errored or one-sided item is missing evidence.
  std::map<std::string, std::pair<const history::QualityItem*, const history::QualityItem*>> qa;
  for (const auto& item : items) {
    if (item.check != "qa") continue;
    if (item.label == kBaseline) qa[item.item_id].first = &item;
    if (item.label == kCandidate) qa[item.item_id].second = &item;
  }
  auto errored_item = [](const history::QualityItem* item) {
    return !item->extra.value("error", std::string()).empty();
  };
  gates::QaMissing missing;
  missing.planned = planned_qa;
  std::map<std::string, gates::SubsetScores> subsets;
  for (const auto& [id, pair] : qa) {
    const auto [base, cand] = pair;
    ++missing.items;
    const bool unpaired = base == nullptr || cand == nullptr;
    const bool base_err = base != nullptr && errored_item(base);
    const bool cand_err = cand != nullptr && errored_item(cand);
    missing.unpaired += unpaired;
    missing.baseline_errored += base_err;
    missing.candidate_errored += cand_err;
    if (unpaired || base_err || cand_err) {
      ++missing.unusable;
      continue;
    }
    std::vector<std::string> names = SubsetsOf(*cand);
    names.insert(names.begin(), "all");
    for (const std::string& name : names) {
      gates::SubsetScores& scores = subsets[name];
      scores.subset = name;
      scores.baseline.push_back(base->score);
      scores.candidate.push_back(cand->score);
    }
  }
  std::vector<gates::SubsetScores> ordered;
  for (auto& [name, scores] : subsets) ordered.push_back(std::move(scores));
  results.push_back(gates::QaF1Gate(ordered, missing, spec.qa_max_f1_drop, spec.max_error_rate,
                                    spec.confidence, spec.bootstrap_resamples, policy.seed));

  // Load pairs: the summary of each stored run is recomputed from its records.
  std::map<int, gates::LoadPair> pairs;
  loadgen::LatencySamples pooled_baseline, pooled_candidate;  // TTFT and TPOT only
  int64_t measured = 0, measured_runs = 0;
  const loadgen::Slo& slo = policy.slo;
  for (const history::LoadRunRow& run : db.LoadRuns(run_id)) {
    // A superseded member was measured again whole by a later leg (resume.h).
    if (!run.meta.pair_index || run.superseded_in_leg) continue;
    std::vector<loadgen::RequestRecord> records = db.LoadRecords(run.id);
    loadgen::Summary summary =
        loadgen::Summarize(records, slo, loadgen::MeasuredDurationSeconds(records));
    const auto [at, fresh] = pairs.try_emplace(*run.meta.pair_index);
    gates::LoadPair& pair = at->second;
    if (fresh) pair.has_baseline = pair.has_candidate = false;  // until their runs are seen
    pair.pair_index = *run.meta.pair_index;
    loadgen::LatencySamples* pool = run.meta.label == kBaseline    ? &pooled_baseline
                                    : run.meta.label == kCandidate ? &pooled_candidate
                                                                   : nullptr;
    if (pool != nullptr) {
      const loadgen::LatencySamples samples = loadgen::MeasuredLatencies(records);
      pool->ttft.insert(pool->ttft.end(), samples.ttft.begin(), samples.ttft.end());
      pool->tpot.insert(pool->tpot.end(), samples.tpot.begin(), samples.tpot.end());
      measured += summary.requests;
      ++measured_runs;
    }
    double error_rate =
        summary.requests > 0 ? static_cast<double>(summary.errored) / summary.requests : 1.0;
    if (run.meta.label == kBaseline) {
      pair.has_baseline = true;
      pair.baseline_p99_ttft_s = summary.ttft.p99_ms / 1000;
      pair.baseline_p99_tpot_s = summary.tpot.p99_ms / 1000;
      pair.baseline_goodput_rps = summary.goodput_rps;
      pair.baseline_error_rate = error_rate;
      pair.baseline_valid = run.meta.valid;
      pair.baseline_invalid_reason = run.meta.invalid_reason;
    } else if (run.meta.label == kCandidate) {
      pair.has_candidate = true;
      pair.candidate_p99_ttft_s = summary.ttft.p99_ms / 1000;
      pair.candidate_p99_tpot_s = summary.tpot.p99_ms / 1000;
      pair.candidate_goodput_rps = summary.goodput_rps;
      pair.candidate_error_rate = error_rate;
      pair.candidate_valid = run.meta.valid;
      pair.candidate_invalid_reason = run.meta.invalid_reason;
    }
  }
  std::vector<gates::LoadPair> evidence;
  for (auto& [index, pair] : pairs) evidence.push_back(pair);
  const std::optional<gates::P99SamplingNoise> noise =
      measured_runs == 0
          ? std::nullopt
          : P99Noise(pooled_baseline, pooled_candidate,
                     static_cast<int>(measured / measured_runs),
                     static_cast<int>(evidence.size()), spec.confidence, policy.seed);
  results.push_back(gates::P99Gate(evidence, spec.p99_max_ratio, spec.confidence,
                                   policy::kMinPairs, spec.max_error_rate,
                                   noise ? &*noise : nullptr));
  results.push_back(gates::GoodputGate(evidence, spec.goodput_min_ratio, spec.confidence,
                                       policy::kMinPairs, spec.max_error_rate));
  return results;
}

}  // namespace kvgate::suite
