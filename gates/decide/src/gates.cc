#include "kvgate/gates/gates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "kvgate/stats/bootstrap.h"

namespace kvgate::gates {
namespace {

std::string Fixed(double value, int digits = 3) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

std::string Range(const stats::Interval& interval, int digits = 3) {
  return "[" + Fixed(interval.lo, digits) + ", " + Fixed(interval.hi, digits) + "]";
}

nlohmann::json IntervalJson(const stats::Interval& interval) {
  return {{"estimate", interval.estimate},
          {"lo", interval.lo},
          {"hi", interval.hi},
          {"confidence", interval.confidence}};
}

// The three-way rule for "value must be at most `limit`" given an interval of the value.
GateStatus AtMost(const stats::Interval& interval, double limit) {
  if (interval.hi <= limit) return GateStatus::kPass;
  if (interval.lo > limit) return GateStatus::kFail;
  return GateStatus::kInconclusive;
}

GateStatus Worst(GateStatus a, GateStatus b) {
  if (a == GateStatus::kFail || b == GateStatus::kFail) return GateStatus::kFail;
  if (a == GateStatus::kInconclusive || b == GateStatus::kInconclusive) {
    return GateStatus::kInconclusive;
  }
  return GateStatus::kPass;
}

GateResult Inconclusive(const std::string& gate, double threshold, const std::string& reason) {
  GateResult result;
  result.gate = gate;
  result.status = GateStatus::kInconclusive;
  result.threshold = threshold;
  result.reason = reason;
  return result;
}

}  // namespace

const char* ToString(GateStatus status) {
  switch (status) {
    case GateStatus::kPass: return "PASS";
    case GateStatus::kFail: return "FAIL";
    case GateStatus::kInconclusive: return "INCONCLUSIVE";
  }
  return "INCONCLUSIVE";
}

const char* ToString(Verdict verdict) {
  switch (verdict) {
    case Verdict::kGo: return "GO";
    case Verdict::kNoGo: return "NO-GO";
    case Verdict::kInconclusive: return "INCONCLUSIVE";
  }
  return "INCONCLUSIVE";
}

GateStatus ParseGateStatus(const std::string& text) {
  if (text == "PASS") return GateStatus::kPass;
  if (text == "FAIL") return GateStatus::kFail;
  if (text == "INCONCLUSIVE") return GateStatus::kInconclusive;
  throw std::invalid_argument("gate status: expected PASS, FAIL or INCONCLUSIVE, got '" + text + "'");
}

Verdict Decide(std::span<const GateResult> results) {
  if (results.empty()) return Verdict::kInconclusive;
  bool all_pass = true;
  for (const GateResult& r : results) {
    if (r.status == GateStatus::kFail) return Verdict::kNoGo;
    all_pass = all_pass && r.status == GateStatus::kPass;
  }
  return all_pass ? Verdict::kGo : Verdict::kInconclusive;
}

int ExitCode(Verdict verdict) {
  switch (verdict) {
    case Verdict::kGo: return 0;
    case Verdict::kNoGo: return 1;
    case Verdict::kInconclusive: return 2;
  }
  return 2;
}

GateResult PasskeyGate(int correct, int errored, int items, int required,
                       std::optional<int> baseline_correct, int planned) {
  GateResult result;
  result.gate = "passkey";
  result.observed = correct;
  result.threshold = required;
  result.details = {{"correct", correct}, {"errored", errored}, {"items", items}};
  if (baseline_correct) result.details["baseline_correct"] = *baseline_correct;
  std::string tally = std::to_string(correct) + "/" + std::to_string(items);
  if (planned > 0 && items < planned) {
    result.status = GateStatus::kInconclusive;
    result.reason = "only " + std::to_string(items) + " of the policy's " +
                    std::to_string(planned) +
                    " passkey items were measured: the run stopped early; `kvgate run --resume` "
                    "measures the rest";
  } else if (items < required) {
    result.status = GateStatus::kInconclusive;
    result.reason = "only " + std::to_string(items) + " passkey items ran, " +
                    std::to_string(required) + " must be found: raise quality.passkey.items";
  } else if (correct >= required) {
    result.status = GateStatus::kPass;
    result.reason = "found " + tally + " passkeys";
  } else if (correct + errored >= required) {
    result.status = GateStatus::kInconclusive;
    result.reason = "found " + tally + " passkeys but " + std::to_string(errored) +
                    " items got no answer (errors); fix the errors and rerun";
  } else {
    result.status = GateStatus::kFail;
    result.reason = "found only " + tally + " passkeys, " + std::to_string(required) + " required";
    if (!baseline_correct) {
      result.reason += ": the candidate loses retrieval";
    } else if (*baseline_correct >= required) {
      result.reason += "; the baseline found " + std::to_string(*baseline_correct) + "/" +
                       std::to_string(items) + ": the candidate loses retrieval";
    } else {
      result.reason += "; the baseline found only " + std::to_string(*baseline_correct) + "/" +
                       std::to_string(items) +
                       " too: the model misses keys at these lengths under either cache, so no "
                       "candidate can pass until the model (or the lengths) change";
    }
  }
  return result;
}

GateResult QaF1Gate(std::span<const SubsetScores> subsets, const QaMissing& missing,
                    double max_drop, double max_error_rate, double confidence, int resamples,
                    uint64_t seed) {
  const nlohmann::json missing_json = {{"planned", missing.planned},
                                       {"items", missing.items},
                                       {"baseline_errored", missing.baseline_errored},
                                       {"candidate_errored", missing.candidate_errored},
                                       {"unpaired", missing.unpaired},
                                       {"unusable", missing.unusable}};
  const std::string missing_text =
      std::to_string(missing.unusable) + " of " + std::to_string(missing.items) +
      " QA items have no answer from both sides (baseline errors " +
      std::to_string(missing.baseline_errored) + ", candidate errors " +
      std::to_string(missing.candidate_errored) + ", stored for one side only " +
      std::to_string(missing.unpaired) + ")";
  const double missing_share =
      missing.items > 0 ? static_cast<double>(missing.unusable) / missing.items : 1.0;
  const int on_both_sides = missing.items - missing.unpaired;
  if (missing.planned > 0 && missing.items > 0 && on_both_sides < missing.planned) {
    GateResult result = Inconclusive(
        "qa_f1", max_drop,
        "only " + std::to_string(on_both_sides) + " of the policy's " +
            std::to_string(missing.planned) +
            " QA items were measured on both sides: the run stopped early, and an interval over "
            "part of a planned sample is an interim look; `kvgate run --resume` measures the rest");
    result.details = {{"missing", missing_json}};
    return result;
  }
  if (subsets.empty() || missing.items == 0 || missing.unusable >= missing.items ||
      missing_share > max_error_rate) {
    GateResult result = Inconclusive(
        "qa_f1", max_drop,
        missing.items == 0 ? std::string("no QA items were run")
        : missing.unusable >= missing.items || subsets.empty()
            ? "no QA item was answered by both sides: " + missing_text +
                  "; an errored item is missing evidence, fix the errors and rerun"
            : missing_text + ", above the " + Fixed(100 * max_error_rate, 1) +
                  "% error limit: an errored item is missing evidence; fix the errors and rerun");
    result.details = {{"missing", missing_json}};
    return result;
  }
  struct Decided {
    stats::Interval drop;
    GateStatus status;
    std::optional<int64_t> items_to_decide;
  };
  GateResult result;
  result.gate = "qa_f1";
  result.threshold = max_drop;
  result.status = GateStatus::kPass;
  result.details = {{"subsets", nlohmann::json::array()}, {"missing", missing_json}};
  std::vector<Decided> decided;
  size_t all_items = 0;  // the largest subset ('all' when present): the run's QA items
  for (size_t s = 0; s < subsets.size(); ++s) {
    const SubsetScores& subset = subsets[s];
    if (subset.baseline.empty() || subset.baseline.size() != subset.candidate.size()) {
      return Inconclusive("qa_f1", max_drop,
                          "subset '" + subset.subset + "' has " +
                              std::to_string(subset.baseline.size()) + " baseline and " +
                              std::to_string(subset.candidate.size()) +
                              " candidate scores; items must pair up");
    }
    all_items = std::max(all_items, subset.baseline.size());
    stats::BootstrapOptions options{resamples, confidence, seed + s};
    stats::Interval gain =
        stats::PairedBootstrapMeanDifference(subset.baseline, subset.candidate, options);
    // drop = baseline − candidate, so its interval is the mirror of the gain's (+ 0.0: a gain
    // of exactly 0 is a drop of 0, not -0).
    stats::Interval drop{-gain.estimate + 0.0, -gain.hi + 0.0, -gain.lo + 0.0, gain.confidence};
    Decided d{drop, AtMost(drop, max_drop), std::nullopt};
    // Items that would separate this estimate from the limit at the same per-item spread (an
    // interval's half-width shrinks as 1 / sqrt(items)); none when the estimate is the limit.
    const double half_width = (drop.hi - drop.lo) / 2;
    const double distance = std::abs(drop.estimate - max_drop);
    if (d.status == GateStatus::kInconclusive && distance > 0) {
      const double items = static_cast<double>(subset.baseline.size()) *
                           (half_width / distance) * (half_width / distance);
      if (items < 1e9) d.items_to_decide = static_cast<int64_t>(std::ceil(items));
    }
    nlohmann::json subset_json = {{"subset", subset.subset},
                                  {"items", subset.baseline.size()},
                                  {"drop", IntervalJson(drop)},
                                  {"status", ToString(d.status)}};
    if (d.items_to_decide) subset_json["items_to_decide"] = *d.items_to_decide;
    result.details["subsets"].push_back(subset_json);
    result.status = Worst(result.status, d.status);
    decided.push_back(d);
  }
  // The headline -- observed, interval and reason -- is one subset: of those whose status is
  // the gate's, the one with the largest drop estimate (the first on ties).
  size_t h = subsets.size();
  for (size_t s = 0; s < subsets.size(); ++s) {
    if (decided[s].status != result.status) continue;
    if (h == subsets.size() || decided[s].drop.estimate > decided[h].drop.estimate) h = s;
  }
  const Decided& head = decided[h];
  result.observed = head.drop.estimate;
  result.interval = head.drop;
  const std::string line = "subset '" + subsets[h].subset + "' F1 drop " +
                           Fixed(head.drop.estimate, 2) + " points, interval " +
                           Range(head.drop, 2);
  if (result.status == GateStatus::kFail) {
    result.reason = line + " is above the " + Fixed(max_drop, 2) + "-point limit";
  } else if (result.status == GateStatus::kInconclusive) {
    result.reason = line + " straddles the " + Fixed(max_drop, 2) +
                    "-point limit: add items to quality.qa";
    // Items the whole QA set needs so that every undecided subset's interval clears the limit
    // at the same spread: each subset's need scaled by its share of the items, the largest.
    std::optional<int64_t> needed;
    bool on_limit = false;
    for (size_t s = 0; s < subsets.size(); ++s) {
      if (decided[s].status != GateStatus::kInconclusive) continue;
      if (!decided[s].items_to_decide) {
        on_limit = true;
        continue;
      }
      const auto in_all = static_cast<int64_t>(
          std::ceil(static_cast<double>(*decided[s].items_to_decide) *
                    static_cast<double>(all_items) / subsets[s].baseline.size()));
      needed = std::max(needed.value_or(0), in_all);
    }
    if (!head.items_to_decide) {
      result.reason += " (the estimate sits on the limit: more items narrow the interval but "
                       "cannot say which side it is on)";
    } else {
      result.reason += " (at this spread ~" + std::to_string(*needed) +
                       " items in all would separate every undecided subset's estimate from the "
                       "limit";
      if (on_limit) result.reason += "; one estimate sits on the limit, which no count decides";
      result.reason += ")";
    }
  } else {
    result.reason = "every subset's F1 drop interval is within " + Fixed(max_drop, 2) +
                    " points (worst estimate " + Fixed(head.drop.estimate, 2) + ")";
  }
  if (missing.unusable > 0) result.reason += "; left out: " + missing_text;
  return result;
}

std::optional<std::string> LoadEvidenceProblem(std::span<const LoadPair> pairs, int min_pairs,
                                               double max_error_rate) {
  if (static_cast<int>(pairs.size()) < min_pairs) {
    return "only " + std::to_string(pairs.size()) + " interleaved A/B pairs; at least " +
           std::to_string(min_pairs) + " are needed (raise load.pairs)";
  }
  for (const LoadPair& p : pairs) {
    std::string which = "pair " + std::to_string(p.pair_index);
    if (!p.has_baseline || !p.has_candidate) {
      return which + " has no " + (p.has_baseline ? "candidate" : "baseline") +
             " load run (the run stopped before measuring it); the load gates need both sides "
             "of every pair";
    }
    if (!p.baseline_valid) return which + " baseline run INVALID: " + p.baseline_invalid_reason;
    if (!p.candidate_valid) return which + " candidate run INVALID: " + p.candidate_invalid_reason;
    if (p.baseline_error_rate > max_error_rate) {
      return which + " baseline errors " + Fixed(100 * p.baseline_error_rate, 1) + "% exceed the " +
             Fixed(100 * max_error_rate, 1) + "% limit";
    }
    if (p.candidate_error_rate > max_error_rate) {
      return which + " candidate errors " + Fixed(100 * p.candidate_error_rate, 1) +
             "% exceed the " + Fixed(100 * max_error_rate, 1) + "% limit";
    }
  }
  return std::nullopt;
}

namespace {

// "; sampling noise alone: ±13.1% at 64 requests per run, ±3.3% at 256 (raise load.requests)".
std::string NoiseAdvice(const P99SamplingNoise& noise, const std::vector<double>& half_width,
                        double max_ratio) {
  if (noise.requests.empty() || half_width.size() != noise.requests.size()) return "";
  const auto percent = [](double f) { return "±" + Fixed(100 * f, 1) + "%"; };
  std::string advice = "; sampling noise alone: " + percent(half_width[0]) + " at " +
                       std::to_string(noise.requests[0]) + " requests per run";
  const double target = (max_ratio - 1) / 2;
  if (half_width[0] <= target) return advice;
  for (size_t k = 1; k < half_width.size(); ++k) {
    if (half_width[k] <= target) {
      return advice + ", " + percent(half_width[k]) + " at " + std::to_string(noise.requests[k]) +
             " (raise load.requests)";
    }
  }
  return advice + ", still " + percent(half_width.back()) + " at " +
         std::to_string(noise.requests.back()) + " (the tail itself is unstable)";
}

}  // namespace

GateResult P99Gate(std::span<const LoadPair> pairs, double max_ratio, double confidence,
                   int min_pairs, double max_error_rate, const P99SamplingNoise* noise) {
  const auto noise_json = [&]() -> nlohmann::json {
    return {{"requests_per_run", noise->requests},
            {"ttft_half_width", noise->ttft_half_width},
            {"tpot_half_width", noise->tpot_half_width}};
  };
  if (auto problem = LoadEvidenceProblem(pairs, min_pairs, max_error_rate)) {
    GateResult open = Inconclusive("p99", max_ratio, *problem);
    if (noise != nullptr) open.details["sampling_noise"] = noise_json();
    return open;
  }
  GateResult result;
  result.gate = "p99";
  result.threshold = max_ratio;
  result.status = GateStatus::kPass;
  struct Metric {
    const char* name;
    double LoadPair::*baseline;
    double LoadPair::*candidate;
    std::vector<double> P99SamplingNoise::*noise;
  };
  const Metric metrics[] = {{"ttft", &LoadPair::baseline_p99_ttft_s,
                             &LoadPair::candidate_p99_ttft_s, &P99SamplingNoise::ttft_half_width},
                            {"tpot", &LoadPair::baseline_p99_tpot_s,
                             &LoadPair::candidate_p99_tpot_s, &P99SamplingNoise::tpot_half_width}};
  std::string fail_reason, open_reason, pass_reason;
  double worst = -1e300;
  for (const Metric& metric : metrics) {
    std::vector<stats::MetricPair> values;
    for (const LoadPair& p : pairs) {
      double b = p.*metric.baseline, c = p.*metric.candidate;
      if (!(b > 0) || !(c > 0)) {
        return Inconclusive("p99", max_ratio,
                            "pair " + std::to_string(p.pair_index) + " has no P99 " + metric.name +
                                " (no completed request with 2+ tokens)");
      }
      values.push_back({b, c});
    }
    stats::LogRatioAnalysis analysis = stats::PairedLogRatio(values, confidence);
    GateStatus status = AtMost(analysis.ratio, max_ratio);
    result.details[metric.name] = {{"ratio", IntervalJson(analysis.ratio)},
                                   {"status", ToString(status)}};
    std::string line = std::string("P99 ") + metric.name + " ratio " +
                       Fixed(analysis.ratio.estimate) + ", interval " + Range(analysis.ratio);
    if (status == GateStatus::kFail && fail_reason.empty()) {
      fail_reason = line + " is above " + Fixed(max_ratio, 2) + ": the candidate's tail is slower";
    }
    if (status == GateStatus::kInconclusive && open_reason.empty()) {
      open_reason = line + " straddles " + Fixed(max_ratio, 2) + ": add pairs or requests per run";
      if (noise != nullptr) open_reason += NoiseAdvice(*noise, (*noise).*metric.noise, max_ratio);
    }
    pass_reason += (pass_reason.empty() ? "" : "; ") + line;
    result.status = Worst(result.status, status);
    if (analysis.ratio.estimate > worst) {
      worst = analysis.ratio.estimate;
      result.observed = analysis.ratio.estimate;
      result.interval = analysis.ratio;
    }
  }
  if (noise != nullptr) result.details["sampling_noise"] = noise_json();
  result.reason = result.status == GateStatus::kFail           ? fail_reason
                  : result.status == GateStatus::kInconclusive ? open_reason
                                                               : pass_reason;
  return result;
}

GateResult GoodputGate(std::span<const LoadPair> pairs, double min_ratio, double confidence,
                       int min_pairs, double max_error_rate) {
  if (auto problem = LoadEvidenceProblem(pairs, min_pairs, max_error_rate)) {
    return Inconclusive("goodput", min_ratio, *problem);
  }
  std::vector<stats::MetricPair> values;
  for (const LoadPair& p : pairs) {
    if (!(p.baseline_goodput_rps > 0)) {
      return Inconclusive("goodput", min_ratio,
                          "pair " + std::to_string(p.pair_index) +
                              " baseline goodput is 0 (no request met the SLO): lower "
                              "load.rate_rps or state a reachable SLO");
    }
    if (!(p.candidate_goodput_rps > 0)) {
      GateResult result;
      result.gate = "goodput";
      result.status = GateStatus::kFail;
      result.threshold = min_ratio;
      result.reason = "pair " + std::to_string(p.pair_index) +
                      " candidate goodput is 0 while the baseline's is not";
      return result;
    }
    values.push_back({p.baseline_goodput_rps, p.candidate_goodput_rps});
  }
  stats::LogRatioAnalysis ratio = stats::PairedLogRatio(values, confidence);
  stats::TInterval difference = stats::PairedDifference(values, confidence);
  GateResult result;
  result.gate = "goodput";
  result.threshold = min_ratio;
  result.observed = ratio.ratio.estimate;
  result.interval = ratio.ratio;
  result.details = {{"ratio", IntervalJson(ratio.ratio)}, {"difference_rps", IntervalJson(difference)}};
  std::string line = "goodput ratio " + Fixed(ratio.ratio.estimate) + ", interval " +
                     Range(ratio.ratio) + "; difference " + Fixed(difference.estimate) +
                     " req/s, interval " + Range(difference);
  if (ratio.ratio.lo >= min_ratio && difference.lo > 0) {
    result.status = GateStatus::kPass;
    result.reason = line;
  } else if (ratio.ratio.hi < min_ratio) {
    result.status = GateStatus::kFail;
    result.reason = line + ": the gain is below " + Fixed(min_ratio, 2) + "x";
  } else {
    result.status = GateStatus::kInconclusive;
    result.reason = line + ": not enough evidence for " + Fixed(min_ratio, 2) +
                    "x with a difference above 0; add pairs or requests per run";
  }
  return result;
}

nlohmann::json ToJson(const GateResult& result) {
  nlohmann::json json = {{"gate", result.gate},
                         {"status", ToString(result.status)},
                         {"observed", result.observed},
                         {"threshold", result.threshold},
                         {"reason", result.reason},
                         {"details", result.details}};
  json["interval"] = result.interval ? IntervalJson(*result.interval) : nlohmann::json(nullptr);
  return json;
}

GateResult GateResultFromJson(const nlohmann::json& json) {
  GateResult result;
  result.gate = json.at("gate").get<std::string>();
  result.status = ParseGateStatus(json.at("status").get<std::string>());
  result.observed = json.at("observed").get<double>();
  result.threshold = json.at("threshold").get<double>();
  result.reason = json.at("reason").get<std::string>();
  result.details = json.value("details", nlohmann::json::object());
  if (json.contains("interval") && !json["interval"].is_null()) {
    const auto& i = json["interval"];
    result.interval = stats::Interval{i.at("estimate").get<double>(), i.at("lo").get<double>(),
                                      i.at("hi").get<double>(), i.at("confidence").get<double>()};
  }
  return result;
}

}  // namespace kvgate::gates
