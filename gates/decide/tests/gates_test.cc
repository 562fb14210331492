#include "kvgate/gates/gates.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kvgate/stats/percentile.h"
#include "kvgate/stats/random.h"

namespace kvgate::gates {
namespace {

LoadPair Pair(int index, double p99_ratio, double goodput_ratio) {
  LoadPair p;
  p.pair_index = index;
  // Small, alternating noise so the interval has width.
  double wiggle = (index % 2 == 0 ? 1.0 : -1.0) * 0.01;
  p.baseline_p99_ttft_s = 0.5;
  p.candidate_p99_ttft_s = 0.5 * p99_ratio * (1 + wiggle);
  p.baseline_p99_tpot_s = 0.05;
  p.candidate_p99_tpot_s = 0.05 * p99_ratio * (1 - wiggle);
  p.baseline_goodput_rps = 10.0;
  p.candidate_goodput_rps = 10.0 * goodput_ratio * (1 + wiggle);
  return p;
}

std::vector<LoadPair> Pairs(int n, double p99_ratio, double goodput_ratio) {
  std::vector<LoadPair> pairs;
  for (int i = 0; i < n; ++i) pairs.push_back(Pair(i, p99_ratio, goodput_ratio));
  return pairs;
}

TEST(VerdictTest, GoOnlyWhenEveryGatePasses) {
  GateResult pass, fail, open;
  pass.status = GateStatus::kPass;
  fail.status = GateStatus::kFail;
  open.status = GateStatus::kInconclusive;
  EXPECT_EQ(Decide(std::vector{pass, pass}), Verdict::kGo);
  EXPECT_EQ(Decide(std::vector{pass, open}), Verdict::kInconclusive);
  EXPECT_EQ(Decide(std::vector{open, fail, pass}), Verdict::kNoGo);
  EXPECT_EQ(Decide(std::vector<GateResult>{}), Verdict::kInconclusive);
  EXPECT_EQ(ExitCode(Verdict::kGo), 0);
  EXPECT_EQ(ExitCode(Verdict::kNoGo), 1);
  EXPECT_EQ(ExitCode(Verdict::kInconclusive), 2);
}

TEST(PasskeyGateTest, NeedsEveryRequiredKeyAndSeparatesErrorsFromMisses) {
  EXPECT_EQ(PasskeyGate(200, 0, 200, 200).status, GateStatus::kPass);
  GateResult miss = PasskeyGate(199, 0, 200, 200);
  EXPECT_EQ(miss.status, GateStatus::kFail);
  EXPECT_NE(miss.reason.find("199/200"), std::string::npos);
  EXPECT_EQ(PasskeyGate(198, 2, 200, 200).status, GateStatus::kInconclusive);
  EXPECT_EQ(PasskeyGate(190, 2, 200, 200).status, GateStatus::kFail);
  EXPECT_EQ(PasskeyGate(100, 0, 100, 200).status, GateStatus::kInconclusive);
}

// The baseline's tally on the same items changes what a FAIL says, never the status.
TEST(PasskeyGateTest, AFailSaysWhetherTheBaselineFoundTheKeys) {
  const GateResult lost = PasskeyGate(199, 0, 200, 200, 200);
  EXPECT_EQ(lost.status, GateStatus::kFail);
  EXPECT_NE(lost.reason.find("the baseline found 200/200: the candidate loses retrieval"),
            std::string::npos)
      << lost.reason;
  EXPECT_EQ(lost.details["baseline_correct"], 200);
  const GateResult model = PasskeyGate(199, 0, 200, 200, 199);
  EXPECT_EQ(model.status, GateStatus::kFail);
  EXPECT_NE(model.reason.find("the baseline found only 199/200 too"), std::string::npos)
      << model.reason;
  EXPECT_EQ(model.reason.find("the candidate loses retrieval"), std::string::npos) << model.reason;
  EXPECT_EQ(PasskeyGate(200, 0, 200, 200, 150).status, GateStatus::kPass);
  EXPECT_FALSE(PasskeyGate(199, 0, 200, 200).details.contains("baseline_correct"));
}

// Every item of the run answered by both sides (the largest subset is all of them).
QaMissing NoneMissing(const std::vector<SubsetScores>& subsets) {
  QaMissing missing;
  for (const SubsetScores& subset : subsets) {
    missing.items = std::max(missing.items, static_cast<int>(subset.baseline.size()));
  }
  return missing;
}

TEST(QaF1GateTest, DecidesEachSubsetByItsDropInterval) {
  std::vector<double> base(100), same(100), worse(100), noisy(100);
  for (int i = 0; i < 100; ++i) {
    base[i] = (i % 10 == 0) ? 50.0 : 100.0;
    same[i] = base[i];
    worse[i] = (i % 4 == 0) ? 0.0 : base[i];  // a drop of ~23 points
    noisy[i] = (i % 50 == 1) ? 0.0 : base[i];  // 2 items lost: drop 2 ± wide
  }
  std::vector<SubsetScores> ok = {{"short", base, same}, {"long", base, same}};
  GateResult pass = QaF1Gate(ok, NoneMissing(ok), 1.0, 0.01, 0.95, 1000, 7);
  EXPECT_EQ(pass.status, GateStatus::kPass) << pass.reason;
  EXPECT_DOUBLE_EQ(pass.observed, 0.0);

  std::vector<SubsetScores> one_bad = {{"short", base, same}, {"long", base, worse}};
  GateResult fail = QaF1Gate(one_bad, NoneMissing(one_bad), 1.0, 0.01, 0.95, 1000, 7);
  EXPECT_EQ(fail.status, GateStatus::kFail);
  EXPECT_NE(fail.reason.find("'long'"), std::string::npos) << fail.reason;
  EXPECT_GT(fail.observed, 20.0);

  std::vector<SubsetScores> unsure = {{"short", base, noisy}};
  GateResult open = QaF1Gate(unsure, NoneMissing(unsure), 1.0, 0.01, 0.95, 1000, 7);
  EXPECT_EQ(open.status, GateStatus::kInconclusive) << open.reason;
  ASSERT_TRUE(open.interval.has_value());
  EXPECT_LE(open.interval->lo, 1.0);
  EXPECT_GT(open.interval->hi, 1.0);

  std::vector<SubsetScores> unpaired = {{"short", base, std::vector<double>(99, 100.0)}};
  EXPECT_EQ(QaF1Gate(unpaired, NoneMissing(unpaired), 1.0, 0.01, 0.95, 1000, 7).status,
            GateStatus::kInconclusive);
}

// The headline of the F1 gate -- observed, interval and reason -- is one subset: of those with
// the gate's status, the largest drop. (It used to take observed/interval from the subset with
// the largest drop of all and the reason from the first undecided subset: on the H200 run of
// 2026-11-30 the reason said 'all' 3.00 [-3, 9] under an observed 3.03 [-0, 9.09] of another
// subset, with a "-0".) A subset's need for items is scaled to the whole QA set in the reason.
TEST(QaF1GateTest, ObservedIntervalAndReasonDescribeTheSameSubset) {
  std::vector<double> base(90, 100.0), lost2(90, 100.0);
  lost2[3] = lost2[40] = 0.0;  // 2 of 90 lost: a drop of 2.22 points, undecided
  // Subsets: the whole set, and a third of it that holds both lost items (a larger drop).
  std::vector<double> base_third(base.begin(), base.begin() + 30);
  std::vector<double> lost_third(30, 100.0);
  lost_third[3] = lost_third[20] = 0.0;
  const std::vector<SubsetScores> subsets = {{"all", base, lost2},
                                             {"depth=0-33%", base_third, lost_third}};
  GateResult open = QaF1Gate(subsets, NoneMissing(subsets), 1.0, 0.01, 0.95, 2000, 7);
  ASSERT_EQ(open.status, GateStatus::kInconclusive) << open.reason;
  const auto& third = open.details["subsets"][1];
  ASSERT_EQ(third["status"], "INCONCLUSIVE");
  EXPECT_DOUBLE_EQ(open.observed, third["drop"]["estimate"].get<double>());
  ASSERT_TRUE(open.interval.has_value());
  EXPECT_DOUBLE_EQ(open.interval->lo, third["drop"]["lo"].get<double>());
  EXPECT_DOUBLE_EQ(open.interval->hi, third["drop"]["hi"].get<double>());
  EXPECT_NE(open.reason.find("subset 'depth=0-33%' F1 drop 6.67"), std::string::npos)
      << open.reason;
  // Items to add: every undecided subset's need, scaled to the whole set by its share (the third
  // needs 3x its own count), the largest.
  int64_t need = 0;
  for (const auto& subset : open.details["subsets"]) {
    const int64_t share = 90 / subset["items"].get<int64_t>();
    need = std::max(need, share * subset["items_to_decide"].get<int64_t>());
  }
  EXPECT_NE(open.reason.find("~" + std::to_string(need) + " items in all would separate every"),
            std::string::npos)
      << open.reason;
  // Where the scaling decides: the whole set (600 items, one lost) passes, the third that holds
  // the loss (200 items) is undecided; adding its own count of items to the whole set would add
  // only ~a third of them to it, so the reason asks for 3x its need.
  std::vector<double> base600(600, 100.0), lost600(600, 100.0);
  lost600[7] = 0.0;
  const std::vector<double> base200(base600.begin(), base600.begin() + 200);
  const std::vector<double> lost200(lost600.begin(), lost600.begin() + 200);
  const std::vector<SubsetScores> by_third = {{"all", base600, lost600},
                                              {"depth=0-33%", base200, lost200}};
  GateResult scaled = QaF1Gate(by_third, NoneMissing(by_third), 1.0, 0.01, 0.95, 2000, 7);
  ASSERT_EQ(scaled.status, GateStatus::kInconclusive) << scaled.reason;
  ASSERT_EQ(scaled.details["subsets"][0]["status"], "PASS") << scaled.details.dump();
  const int64_t own = scaled.details["subsets"][1]["items_to_decide"].get<int64_t>();
  EXPECT_NE(scaled.reason.find("~" + std::to_string(3 * own) + " items in all"), std::string::npos)
      << scaled.reason;
  // No "-0": a subset whose scores agree item by item has a drop interval of exactly [0, 0].
  const std::vector<SubsetScores> same = {{"all", base, base}};
  GateResult pass = QaF1Gate(same, NoneMissing(same), 1.0, 0.01, 0.95, 2000, 7);
  ASSERT_EQ(pass.status, GateStatus::kPass);
  EXPECT_FALSE(std::signbit(pass.interval->lo));
  EXPECT_FALSE(std::signbit(pass.interval->hi));
  EXPECT_FALSE(std::signbit(pass.observed));
}

// An INCONCLUSIVE F1 gate says how many items would decide it at the same spread: about the
// same answer from 100 items or from the same items four times over (a quarter of the interval's
// width squared, four times the items), and none when the estimate is on the limit.
TEST(QaF1GateTest, SaysHowManyItemsWouldSeparateTheEstimateFromTheLimit) {
  std::vector<double> base(100, 100.0), lost2(100, 100.0), lost1(100, 100.0);
  lost2[1] = lost2[51] = 0.0;  // a drop of 2 points, interval about [0, 5]
  lost1[7] = 0.0;              // a drop of exactly 1 point: on the limit
  const std::vector<SubsetScores> small = {{"all", base, lost2}};
  GateResult open = QaF1Gate(small, NoneMissing(small), 1.0, 0.01, 0.95, 2000, 7);
  ASSERT_EQ(open.status, GateStatus::kInconclusive) << open.reason;
  const auto& detail = open.details["subsets"][0];
  ASSERT_TRUE(detail.contains("items_to_decide")) << detail.dump();
  const int64_t needed = detail["items_to_decide"];
  EXPECT_GT(needed, 100);
  EXPECT_NE(open.reason.find("~" + std::to_string(needed) + " items in all would separate"),
            std::string::npos)
      << open.reason;
  std::vector<double> base4, lost4;
  for (int k = 0; k < 4; ++k) {
    base4.insert(base4.end(), base.begin(), base.end());
    lost4.insert(lost4.end(), lost2.begin(), lost2.end());
  }
  const std::vector<SubsetScores> large = {{"all", base4, lost4}};
  GateResult open4 = QaF1Gate(large, NoneMissing(large), 1.0, 0.01, 0.95, 2000, 7);
  ASSERT_EQ(open4.status, GateStatus::kInconclusive) << open4.reason;
  const int64_t needed4 = open4.details["subsets"][0]["items_to_decide"];
  EXPECT_NEAR(static_cast<double>(needed4), static_cast<double>(needed), 0.35 * needed);

  const std::vector<SubsetScores> edge = {{"all", base, lost1}};
  GateResult on_limit = QaF1Gate(edge, NoneMissing(edge), 1.0, 0.01, 0.95, 2000, 7);
  ASSERT_EQ(on_limit.status, GateStatus::kInconclusive) << on_limit.reason;
  EXPECT_NE(on_limit.reason.find("the estimate sits on the limit"), std::string::npos)
      << on_limit.reason;
  EXPECT_FALSE(on_limit.details["subsets"][0].contains("items_to_decide"));
}

// An item that errored is missing evidence, never "both scored 0, no drop": a run whose QA items
// all failed (e.g. prompts past the model's context, HTTP 400 on both sides) once PASSed with an
// observed drop of 0.000.
TEST(QaF1GateTest, ErroredItemsAreMissingEvidenceNotAgreement) {
  QaMissing all_failed;
  all_failed.items = 100;
  all_failed.baseline_errored = 100;
  all_failed.candidate_errored = 100;
  all_failed.unusable = 100;
  GateResult none = QaF1Gate({}, all_failed, 1.0, 0.01, 0.95, 1000, 7);
  EXPECT_EQ(none.status, GateStatus::kInconclusive) << none.reason;
  EXPECT_NE(none.reason.find("no QA item was answered by both sides"), std::string::npos)
      << none.reason;
  EXPECT_NE(none.reason.find("baseline errors 100, candidate errors 100"), std::string::npos)
      << none.reason;
  EXPECT_EQ(none.details["missing"]["unusable"], 100);

  // 3 of 100 items errored on the candidate: 97 agreeing items would pass, but 3% is above a
  // 1% error limit, so the gate cannot decide; under a 5% limit the 97 decide it.
  std::vector<double> scores(97, 100.0);
  const std::vector<SubsetScores> answered = {{"all", scores, scores}};
  QaMissing three;
  three.items = 100;
  three.candidate_errored = 3;
  three.unusable = 3;
  GateResult over = QaF1Gate(answered, three, 1.0, 0.01, 0.95, 1000, 7);
  EXPECT_EQ(over.status, GateStatus::kInconclusive) << over.reason;
  EXPECT_NE(over.reason.find("3 of 100 QA items have no answer from both sides"),
            std::string::npos)
      << over.reason;
  EXPECT_NE(over.reason.find("above the 1.0% error limit"), std::string::npos) << over.reason;
  GateResult within = QaF1Gate(answered, three, 1.0, 0.05, 0.95, 1000, 7);
  EXPECT_EQ(within.status, GateStatus::kPass) << within.reason;
  EXPECT_NE(within.reason.find("left out: 3 of 100"), std::string::npos) << within.reason;
  EXPECT_EQ(within.details["subsets"][0]["items"], 97);
}

// A run that stopped before the policy's planned items is an interim look: what it measured
// may look decided, the gates wait for the rest (`kvgate run --resume`).
TEST(QaF1GateTest, FewerItemsThanPlannedAreAnInterimLook) {
  std::vector<double> scores(60, 100.0);
  const std::vector<SubsetScores> agreeing = {{"all", scores, scores}};
  QaMissing part = NoneMissing(agreeing);
  EXPECT_EQ(QaF1Gate(agreeing, part, 1.0, 0.01, 0.95, 1000, 7).status, GateStatus::kPass);
  part.planned = 100;
  const GateResult interim = QaF1Gate(agreeing, part, 1.0, 0.01, 0.95, 1000, 7);
  EXPECT_EQ(interim.status, GateStatus::kInconclusive) << interim.reason;
  EXPECT_NE(interim.reason.find("only 60 of the policy's 100 QA items were measured on both sides"),
            std::string::npos)
      << interim.reason;
  EXPECT_EQ(interim.details["missing"]["planned"], 100);
  part.planned = 60;  // all measured
  EXPECT_EQ(QaF1Gate(agreeing, part, 1.0, 0.01, 0.95, 1000, 7).status, GateStatus::kPass);

  // Passkeys: 150 of 200 found is not a FAIL of a run that asked only 150 of its 200.
  const GateResult keys = PasskeyGate(150, 0, 150, 150, std::nullopt, 200);
  EXPECT_EQ(keys.status, GateStatus::kInconclusive) << keys.reason;
  EXPECT_NE(keys.reason.find("only 150 of the policy's 200 passkey items"), std::string::npos)
      << keys.reason;
  EXPECT_EQ(PasskeyGate(200, 0, 200, 200, std::nullopt, 200).status, GateStatus::kPass);
}

TEST(P99GateTest, PassesFailsOrWaitsAtTheThreshold) {
  EXPECT_EQ(P99Gate(Pairs(5, 1.00, 1.0), 1.05, 0.95, 5, 0.01).status, GateStatus::kPass);
  GateResult fail = P99Gate(Pairs(5, 1.20, 1.0), 1.05, 0.95, 5, 0.01);
  EXPECT_EQ(fail.status, GateStatus::kFail);
  EXPECT_NEAR(fail.observed, 1.20, 0.01);
  EXPECT_EQ(P99Gate(Pairs(5, 1.05, 1.0), 1.05, 0.95, 5, 0.01).status, GateStatus::kInconclusive);
}

TEST(P99GateTest, TooFewPairsInvalidRunsAndErrorsAreInconclusive) {
  GateResult few = P99Gate(Pairs(4, 1.0, 1.0), 1.05, 0.95, 5, 0.01);
  EXPECT_EQ(few.status, GateStatus::kInconclusive);
  EXPECT_NE(few.reason.find("only 4"), std::string::npos);
  auto invalid = Pairs(5, 1.0, 1.0);
  invalid[2].candidate_valid = false;
  invalid[2].candidate_invalid_reason = "P99 send lag 4.1 ms > 1 ms";
  GateResult bad = P99Gate(invalid, 1.05, 0.95, 5, 0.01);
  EXPECT_EQ(bad.status, GateStatus::kInconclusive);
  EXPECT_NE(bad.reason.find("pair 2 candidate run INVALID: P99 send lag"), std::string::npos);
  auto errors = Pairs(5, 1.0, 1.0);
  errors[1].baseline_error_rate = 0.05;
  EXPECT_EQ(GoodputGate(errors, 1.1, 0.95, 5, 0.01).status, GateStatus::kInconclusive);
  // An interrupted run: pair 4's candidate was never measured. Not a goodput of 0 (FAIL), not a
  // missing P99 (the old reasons), but an incomplete pair, named.
  auto cut = Pairs(5, 1.0, 1.0);
  cut[4].has_candidate = false;
  cut[4].candidate_goodput_rps = cut[4].candidate_p99_ttft_s = cut[4].candidate_p99_tpot_s = 0;
  for (const GateResult& g :
       {P99Gate(cut, 1.05, 0.95, 5, 0.01), GoodputGate(cut, 1.1, 0.95, 5, 0.01)}) {
    EXPECT_EQ(g.status, GateStatus::kInconclusive) << g.gate;
    EXPECT_NE(g.reason.find("pair 4 has no candidate load run"), std::string::npos) << g.reason;
  }
}

TEST(P99GateTest, SaysHowWideSamplingAloneMakesTheIntervalAndWhatWouldNarrowIt) {
  P99SamplingNoise noise;
  noise.requests = {64, 128, 256, 512};
  noise.ttft_half_width = {0.131, 0.067, 0.021, 0.017};
  noise.tpot_half_width = {0.001, 0.001, 0.0005, 0.0002};
  // Inconclusive (ratio 1.05), TTFT first: the reason names TTFT's noise and the first size
  // under half the 5% margin.
  GateResult open = P99Gate(Pairs(5, 1.05, 1.0), 1.05, 0.95, 5, 0.01, &noise);
  ASSERT_EQ(open.status, GateStatus::kInconclusive);
  EXPECT_NE(open.reason.find("add pairs or requests per run; sampling noise alone: ±13.1% at 64 "
                             "requests per run, ±2.1% at 256 (raise load.requests)"),
            std::string::npos)
      << open.reason;
  EXPECT_EQ(open.details["sampling_noise"]["requests_per_run"],
            nlohmann::json::array({64, 128, 256, 512}));
  EXPECT_EQ(open.details["sampling_noise"]["ttft_half_width"][0], 0.131);
  // No listed size is enough: said so, with the largest.
  noise.ttft_half_width = {0.2, 0.15, 0.1, 0.08};
  GateResult stuck = P99Gate(Pairs(5, 1.05, 1.0), 1.05, 0.95, 5, 0.01, &noise);
  EXPECT_NE(stuck.reason.find("still ±8.0% at 512 (the tail itself is unstable)"),
            std::string::npos)
      << stuck.reason;
  // Noise under half the margin already: the reason says so and recommends nothing.
  noise.ttft_half_width = {0.01, 0.008, 0.005, 0.003};
  GateResult quiet = P99Gate(Pairs(5, 1.05, 1.0), 1.05, 0.95, 5, 0.01, &noise);
  EXPECT_NE(quiet.reason.find("sampling noise alone: ±1.0% at 64 requests per run"),
            std::string::npos);
  EXPECT_EQ(quiet.reason.find("raise"), std::string::npos) << quiet.reason;
  // The noise never changes a decision, and a PASS reason stays the ratios alone.
  GateResult pass = P99Gate(Pairs(5, 1.00, 1.0), 1.05, 0.95, 5, 0.01, &noise);
  EXPECT_EQ(pass.status, GateStatus::kPass);
  EXPECT_EQ(pass.reason, P99Gate(Pairs(5, 1.00, 1.0), 1.05, 0.95, 5, 0.01).reason);
  EXPECT_TRUE(pass.details.contains("sampling_noise"));
}

TEST(GoodputGateTest, NeedsTheRatioAndAPositiveDifference) {
  EXPECT_EQ(GoodputGate(Pairs(5, 1.0, 1.30), 1.10, 0.95, 5, 0.01).status, GateStatus::kPass);
  EXPECT_EQ(GoodputGate(Pairs(5, 1.0, 1.00), 1.10, 0.95, 5, 0.01).status, GateStatus::kFail);
  EXPECT_EQ(GoodputGate(Pairs(5, 1.0, 1.10), 1.10, 0.95, 5, 0.01).status,
            GateStatus::kInconclusive);
  auto zero = Pairs(5, 1.0, 1.3);
  zero[0].baseline_goodput_rps = 0;
  EXPECT_EQ(GoodputGate(zero, 1.10, 0.95, 5, 0.01).status, GateStatus::kInconclusive);
}

TEST(GateResultTest, JsonRoundTripKeepsEveryField) {
  GateResult original = GoodputGate(Pairs(5, 1.0, 1.3), 1.10, 0.95, 5, 0.01);
  GateResult back = GateResultFromJson(ToJson(original));
  EXPECT_EQ(back.gate, original.gate);
  EXPECT_EQ(back.status, original.status);
  EXPECT_EQ(back.observed, original.observed);
  EXPECT_EQ(back.reason, original.reason);
  ASSERT_TRUE(back.interval.has_value());
  EXPECT_EQ(back.interval->lo, original.interval->lo);
  EXPECT_EQ(back.details, original.details);
}

// Synthetic replicas of whole load runs: each run draws `n` request latencies (log-normal, the
// usual shape of serving latency) and counts the requests within the SLO; the gates see the
// per-run P99 and goodput exactly as they would from real runs. These pin what the statistics
// promise: an A/A comparison fails the P99 gate and passes the goodput gate no more often than
// the nominal 5%, and planted effects are found.
struct RunModel {
  double median_s;
  double sigma;
  double slo_s;
};

void SimulateRun(const RunModel& model, int n, double duration_s, stats::SeededRng& rng,
                 double& p99, double& goodput) {
  std::vector<double> latency(n);
  int good = 0;
  for (int i = 0; i < n; ++i) {
    latency[i] = model.median_s * std::exp(model.sigma * rng.Normal());
    good += latency[i] <= model.slo_s;
  }
  p99 = *stats::Percentile(latency, 0.99);
  goodput = good / duration_s;
}

struct Rates {
  double p99_fail, p99_pass, goodput_pass;
};

Rates Replicate(const RunModel& baseline, const RunModel& candidate, int pairs, int n,
                int replicas, uint64_t seed) {
  stats::SeededRng rng(seed);
  int p99_fail = 0, p99_pass = 0, goodput_pass = 0;
  for (int r = 0; r < replicas; ++r) {
    std::vector<LoadPair> evidence;
    for (int i = 0; i < pairs; ++i) {
      LoadPair p;
      p.pair_index = i;
      SimulateRun(baseline, n, 60.0, rng, p.baseline_p99_ttft_s, p.baseline_goodput_rps);
      SimulateRun(candidate, n, 60.0, rng, p.candidate_p99_ttft_s, p.candidate_goodput_rps);
      p.baseline_p99_tpot_s = p.baseline_p99_ttft_s;
      p.candidate_p99_tpot_s = p.candidate_p99_ttft_s;
      evidence.push_back(p);
    }
    GateStatus p99 = P99Gate(evidence, 1.05, 0.95, 5, 0.01).status;
    p99_fail += p99 == GateStatus::kFail;
    p99_pass += p99 == GateStatus::kPass;
    goodput_pass += GoodputGate(evidence, 1.10, 0.95, 5, 0.01).status == GateStatus::kPass;
  }
  return {static_cast<double>(p99_fail) / replicas, static_cast<double>(p99_pass) / replicas,
          static_cast<double>(goodput_pass) / replicas};
}

TEST(GateStatisticsTest, AaComparisonFailsP99AndPassesGoodputAtMostNominally) {
  RunModel a{0.200, 0.35, 0.300};
  Rates rates = Replicate(a, a, 5, 400, 1000, 11);
  RecordProperty("p99_fail_rate", std::to_string(rates.p99_fail));
  RecordProperty("goodput_pass_rate", std::to_string(rates.goodput_pass));
  std::printf("A/A: P99 FAIL rate %.3f, goodput PASS rate %.3f\n", rates.p99_fail, rates.goodput_pass);
  EXPECT_LE(rates.p99_fail, 0.05);
  EXPECT_LE(rates.goodput_pass, 0.05);
}

TEST(GateStatisticsTest, PlantedTwentyPercentP99RegressionIsDetected) {
  RunModel base{0.200, 0.35, 10.0};
  RunModel slow{0.240, 0.35, 10.0};  // every latency 20% longer, so the P99 is too
  // Power depends on the evidence: with the minimum 5 pairs, 1000 requests per run give ~95%
  // (400 give only ~65%: the sample P99 of a short run is noisy). A regression must never pass.
  Rates rates = Replicate(base, slow, 5, 1000, 300, 12);
  std::printf("planted +20%% P99: FAIL rate %.3f, PASS rate %.3f\n", rates.p99_fail, rates.p99_pass);
  EXPECT_GE(rates.p99_fail, 0.90);
  EXPECT_LE(rates.p99_pass, 0.01);
}

TEST(GateStatisticsTest, PlantedFifteenPercentGoodputGainIsDetected) {
  // Baseline meets the SLO on 80% of requests, the candidate on 92%: goodput +15%.
  RunModel base{0.200, 0.35, 0.200 * std::exp(0.35 * 0.8416)};
  RunModel fast{0.200, 0.35, 0.200 * std::exp(0.35 * 1.4051)};
  Rates rates = Replicate(base, fast, 5, 1000, 300, 13);
  std::printf("planted +15%% goodput: PASS rate %.3f\n", rates.goodput_pass);
  EXPECT_GE(rates.goodput_pass, 0.90);
}

}  // namespace
}  // namespace kvgate::gates
