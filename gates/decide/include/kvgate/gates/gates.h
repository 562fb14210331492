// The four go/no-go gates and the verdict (docs/gates.md).
//
// Each gate takes plain evidence (counts, per-item scores, per-pair metrics), never a server or
// a database, so the same function decides a live run and `kvgate history regate` from stored
// rows. Each returns PASS / FAIL / INCONCLUSIVE with the observed value, the threshold, the
// interval and a one-line reason a person can act on. Decision rule for interval gates: PASS
// when the whole interval is on the passing side of the threshold, FAIL when the whole interval
// is on the failing side, INCONCLUSIVE when it straddles it (more evidence is needed).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvgate/stats/interval.h"
#include "kvgate/stats/paired_runs.h"

namespace kvgate::gates {

enum class GateStatus { kPass, kFail, kInconclusive };
enum class Verdict { kGo, kNoGo, kInconclusive };

const char* ToString(GateStatus status);  // "PASS" | "FAIL" | "INCONCLUSIVE"
const char* ToString(Verdict verdict);    // "GO" | "NO-GO" | "INCONCLUSIVE"
GateStatus ParseGateStatus(const std::string& text);  // throws std::invalid_argument

struct GateResult {
  std::string gate;  // "passkey" | "qa_f1" | "p99" | "goodput"
  GateStatus status = GateStatus::kInconclusive;
  double observed = 0.0;   // the gate's headline value (see each gate)
  double threshold = 0.0;
  std::optional<stats::Interval> interval;
  std::string reason;      // one line; says what to do when not PASS
  nlohmann::json details = nlohmann::json::object();
};

// GO iff every gate passes; NO-GO if any fails; INCONCLUSIVE otherwise (also with no gates).
Verdict Decide(std::span<const GateResult> results);
int ExitCode(Verdict verdict);  // 0 GO, 1 NO-GO, 2 INCONCLUSIVE

// Passkey: observed = correct items of the candidate, threshold = required. Items that errored
// (no answer) are not correct; if the errors alone could change the outcome the gate is
// INCONCLUSIVE rather than FAIL. baseline_correct, when known (the baseline on the same items),
// goes into details and into a FAIL's reason, which then says whether the candidate lost keys the
// baseline found or the model misses keys under any cache; the status does not depend on it.
// planned, when known (> 0): the items the policy asks; a run that measured fewer (it stopped
// early: an interim look) is INCONCLUSIVE, never decided on part of its sample.
GateResult PasskeyGate(int correct, int errored, int items, int required,
                       std::optional<int> baseline_correct = std::nullopt, int planned = 0);

// QA F1 on every key subset: per item, the baseline's and the candidate's F1 in [0, 100] for the
// same question. observed = the largest estimated drop (baseline − candidate, points) over the
// subsets; each subset's drop has a paired bootstrap interval over items.
//
// Only items answered by both sides are scored. An item that errored (HTTP error, timeout,
// malformed answer) on either side, or was stored on one side only, is missing evidence, never a
// score of 0 on both sides (which would read as "no drop"): `missing` counts them, and above
// `max_error_rate` of the run's items the gate is INCONCLUSIVE, as is a run with no item
// answered by both, and a run that stored fewer than the policy's planned items on a side (it
// stopped early: an interval over part of a planned sample is an interim look, and stopping a
// run when such a look passes would make a PASS likelier than the confidence says).
struct SubsetScores {
  std::string subset;
  std::vector<double> baseline;   // F1 points per item answered by both sides
  std::vector<double> candidate;  // same items, same order
};
struct QaMissing {
  int planned = 0;            // items the policy asks (0: not known, e.g. a dataset file's)
  int items = 0;              // distinct QA items the run asked
  int baseline_errored = 0;   // items the baseline gave no usable answer to
  int candidate_errored = 0;  // ... the candidate
  int unpaired = 0;           // items stored for one side only
  int unusable = 0;           // items left out of the scoring for any of these reasons
};
GateResult QaF1Gate(std::span<const SubsetScores> subsets, const QaMissing& missing,
                    double max_drop, double max_error_rate, double confidence, int resamples,
                    uint64_t seed);

// Evidence of one interleaved A/B pair of load runs.
struct LoadPair {
  int pair_index = 0;
  double baseline_p99_ttft_s = 0.0, candidate_p99_ttft_s = 0.0;
  double baseline_p99_tpot_s = 0.0, candidate_p99_tpot_s = 0.0;
  double baseline_goodput_rps = 0.0, candidate_goodput_rps = 0.0;
  double baseline_error_rate = 0.0, candidate_error_rate = 0.0;
  bool baseline_valid = true, candidate_valid = true;
  std::string baseline_invalid_reason, candidate_invalid_reason;
  // Whether each side's load run exists. False only for a run that stopped between the two
  // members of a pair (`interrupted`): its missing side was never measured, it is not a zero.
  bool has_baseline = true, has_candidate = true;
};

// Why the load evidence cannot decide anything (too few pairs, an INVALID run, errors above the
// limit), or nullopt when it can. Shared by the P99 and goodput gates.
std::optional<std::string> LoadEvidenceProblem(std::span<const LoadPair> pairs, int min_pairs,
                                               double max_error_rate);

// What sampling alone adds to the P99 gate's interval (suite/evidence.cc computes it from each
// side's pooled measured requests with stats::PercentileSpread): for runs of requests[k]
// requests (requests[0]: the runs' own size), the half-width of the ratio interval over the
// pairs from that noise alone, as a fraction (0.13 = ±13%), for TTFT and TPOT. A lower bound.
struct P99SamplingNoise {
  std::vector<int> requests;
  std::vector<double> ttft_half_width;
  std::vector<double> tpot_half_width;
};

// P99 for TTFT and TPOT each: the per-pair log-ratio candidate/baseline with its t-interval;
// PASS needs both ratio intervals ≤ max_ratio. observed = the larger estimated ratio. With
// `noise`, details carry it and an INCONCLUSIVE reason says how wide sampling alone makes the
// interval at the runs' size and the smallest listed size that brings it under half the margin
// (max_ratio − 1), or that none does.
GateResult P99Gate(std::span<const LoadPair> pairs, double max_ratio, double confidence,
                   int min_pairs, double max_error_rate,
                   const P99SamplingNoise* noise = nullptr);

// Goodput at the SLO: PASS needs the ratio interval ≥ min_ratio and the interval of the
// per-pair difference (candidate − baseline) entirely above 0. FAIL when the ratio interval is
// entirely below min_ratio. observed = the estimated ratio.
GateResult GoodputGate(std::span<const LoadPair> pairs, double min_ratio, double confidence,
                       int min_pairs, double max_error_rate);

nlohmann::json ToJson(const GateResult& result);
GateResult GateResultFromJson(const nlohmann::json& json);

}  // namespace kvgate::gates
