#include "kvgate/loadgen/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "kvgate/stats/random.h"

namespace kvgate::loadgen {
namespace {

// Gaps in seconds.
std::vector<double> Gaps(const std::vector<int64_t>& arrivals) {
  std::vector<double> gaps;
  for (size_t i = 1; i < arrivals.size(); ++i)
    gaps.push_back((arrivals[i] - arrivals[i - 1]) * 1e-9);
  return gaps;
}

double Mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double Cv(const std::vector<double>& v) {
  double m = Mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1)) / m;
}

TEST(ArrivalsTest, SameSeedSameScheduleAndDifferentSeedDifferentSchedule) {
  for (Arrival arrival : {Arrival::kPoisson, Arrival::kGamma}) {
    auto a = GenerateArrivals(arrival, 50.0, 0.5, 7, 500, 0);
    auto b = GenerateArrivals(arrival, 50.0, 0.5, 7, 500, 0);
    auto c = GenerateArrivals(arrival, 50.0, 0.5, 8, 500, 0);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
  }
}

TEST(ArrivalsTest, PinnedValuesDoNotChangeAcrossBuildsOrMachines) {
  // Every draw is kvgate::stats' own (no library distribution), so these numbers are the same
  // everywhere (arrival times are rounded to the nanosecond, which absorbs libm's last ulp); if
  // this test fails, schedules and prompts of stored runs can no longer be regenerated from their
  // seed. Values since the move to stats::SplitMixRng and stats::DeriveSeed (issue 34).
  EXPECT_EQ(GenerateArrivals(Arrival::kPoisson, 10.0, 1.0, 42, 4, 0),
            (std::vector<int64_t>{0, 300'215'427, 307'408'605, 332'356'354}));
  EXPECT_EQ(GenerateArrivals(Arrival::kGamma, 10.0, 0.5, 42, 3, 0),
            (std::vector<int64_t>{0, 613'587, 134'580'944}));
  WorkloadSettings settings;
  settings.input.mean = 5;
  EXPECT_EQ(Workload::Create(settings, 42).At(0).prompt, "by most because time many");
}

TEST(ArrivalsTest, PoissonHasTheRequestedMeanRateAndUnitCv) {
  auto arrivals = GenerateArrivals(Arrival::kPoisson, 200.0, 1.0, 1, 20001, 0);
  ASSERT_EQ(arrivals.size(), 20001u);
  EXPECT_EQ(arrivals.front(), 0);
  auto gaps = Gaps(arrivals);
  // 20,000 exponential gaps: the mean is within 3% (about 4 standard errors) of 1/rate.
  EXPECT_NEAR(Mean(gaps), 1.0 / 200.0, 0.03 / 200.0);
  EXPECT_NEAR(Cv(gaps), 1.0, 0.05);
  EXPECT_TRUE(std::is_sorted(arrivals.begin(), arrivals.end()));
}

TEST(ArrivalsTest, GammaKeepsTheMeanAndHasCvOneOverSqrtBurstiness) {
  for (double burstiness : {0.25, 4.0}) {
    auto gaps = Gaps(GenerateArrivals(Arrival::kGamma, 100.0, burstiness, 3, 20001, 0));
    EXPECT_NEAR(Mean(gaps), 0.01, 0.01 * 0.05) << "burstiness " << burstiness;
    EXPECT_NEAR(Cv(gaps), 1.0 / std::sqrt(burstiness), 0.08 / std::sqrt(burstiness))
        << "burstiness " << burstiness;
  }
}

TEST(ArrivalsTest, ConstantIsExactAndDoesNotDrift) {
  auto arrivals = GenerateArrivals(Arrival::kConstant, 3.0, 1.0, 0, 30001, 0);
  EXPECT_EQ(arrivals[1], 333'333'333);
  EXPECT_EQ(arrivals[30000], int64_t{10'000'000'000'000});  // 30000 / 3 = 10,000 s exactly
}

TEST(ArrivalsTest, DurationBoundStopsBeforeTheDuration) {
  auto arrivals = GenerateArrivals(Arrival::kConstant, 10.0, 1.0, 0, 0, 2.0);
  EXPECT_EQ(arrivals.size(), 20u);  // 0.0, 0.1, ..., 1.9 s
  EXPECT_LT(arrivals.back(), 2'000'000'000);
  auto both = GenerateArrivals(Arrival::kConstant, 10.0, 1.0, 0, 5, 2.0);
  EXPECT_EQ(both.size(), 5u);  // whichever bound comes first
}

TEST(ArrivalsTest, RejectsBadRatesAndMissingBounds) {
  EXPECT_THROW(GenerateArrivals(Arrival::kPoisson, 0.0, 1.0, 0, 10, 0), SettingsError);
  EXPECT_THROW(GenerateArrivals(Arrival::kPoisson, 1.0, 1.0, 0, 0, 0), SettingsError);
  EXPECT_THROW(GenerateArrivals(Arrival::kGamma, 1.0, 0.0, 0, 10, 0), SettingsError);
  try {
    GenerateArrivals(Arrival::kPoisson, 1e9, 1.0, 0, 0, 3600);
    FAIL() << "a billion requests per second for an hour must be refused";
  } catch (const SettingsError& e) {
    EXPECT_EQ(e.field(), "duration");
  }
}

TEST(WorkloadTest, SyntheticPromptsAreDeterministicPerSeedAndIndex) {
  WorkloadSettings settings;
  settings.input = {LengthDistributionKind::kUniform, 100, 0.5, 1 << 20};
  settings.output = {LengthDistributionKind::kConstant, 32, 0.0, 1 << 20};
  Workload a = Workload::Create(settings, 11);
  Workload b = Workload::Create(settings, 11);
  Workload c = Workload::Create(settings, 12);
  EXPECT_EQ(a.At(5).prompt, b.At(5).prompt);
  EXPECT_NE(a.At(5).prompt, c.At(5).prompt);
  EXPECT_NE(a.At(5).prompt, a.At(6).prompt);
  EXPECT_EQ(a.At(5).max_tokens, 32);
  // Request i does not depend on which requests were generated before it.
  Workload fresh = Workload::Create(settings, 11);
  EXPECT_EQ(fresh.At(5).prompt, a.At(5).prompt);
}

TEST(WorkloadTest, SyntheticTextHasExactlyTheRequestedWords) {
  std::string text = SyntheticText(37, 1);
  EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 36);
  EXPECT_EQ(SyntheticText(37, 1), text);
}

TEST(WorkloadTest, LengthDistributionsHaveTheirMeanAndRange) {
  auto sample = [](LengthDistribution d) {
    std::vector<double> v;
    for (uint64_t i = 0; i < 4000; ++i) v.push_back(SampleLength(d, stats::DeriveSeed(9, 2, i)));
    return v;
  };
  auto uniform = sample({LengthDistributionKind::kUniform, 200, 0.5, 1 << 20});
  EXPECT_NEAR(Mean(uniform), 200, 5);
  EXPECT_GE(*std::min_element(uniform.begin(), uniform.end()), 100);
  EXPECT_LE(*std::max_element(uniform.begin(), uniform.end()), 300);
  EXPECT_NEAR(Mean(sample({LengthDistributionKind::kNormal, 200, 0.1, 1 << 20})), 200, 2);
  EXPECT_NEAR(Mean(sample({LengthDistributionKind::kLogNormal, 200, 0.5, 1 << 20})), 200, 8);
  auto clamped = sample({LengthDistributionKind::kLogNormal, 200, 1.0, 250});
  EXPECT_LE(*std::max_element(clamped.begin(), clamped.end()), 250);
  EXPECT_EQ(Mean(sample({LengthDistributionKind::kConstant, 17, 0, 1 << 20})), 17);
}

TEST(WorkloadTest, PasskeyPromptFollowsTheTemplateWithTheKeyAtTheDepth) {
  std::string shallow = PasskeyPrompt(1000, 0.0, 31415);
  std::string deep = PasskeyPrompt(1000, 1.0, 31415);
  const std::string needle = "The pass key is 31415. Remember it. 31415 is the pass key.";
  EXPECT_EQ(shallow.rfind("There is an important info hidden inside a lot of irrelevant text.", 0),
            0u);
  EXPECT_NE(shallow.find("The grass is green. The sky is blue. The sun is yellow. Here we go. "
                         "There and back again."),
            std::string::npos);
  EXPECT_TRUE(shallow.ends_with("What is the pass key? The pass key is"));
  size_t at_shallow = shallow.find(needle);
  size_t at_deep = deep.find(needle);
  ASSERT_NE(at_shallow, std::string::npos);
  ASSERT_NE(at_deep, std::string::npos);
  EXPECT_LT(at_shallow, 200u);
  EXPECT_GT(at_deep, deep.size() - 200);
  // About the requested number of words (within one filler sentence group).
  int words = 1 + static_cast<int>(std::count(shallow.begin(), shallow.end(), ' ') +
                                   std::count(shallow.begin(), shallow.end(), '\n'));
  EXPECT_NEAR(words, 1000, 20);
}

TEST(WorkloadTest, PasskeyWorkloadWalksLengthsThenDepthsWithSeededKeys) {
  WorkloadSettings settings;
  settings.kind = WorkloadKind::kPasskey;
  settings.passkey_lengths = {200, 400};
  settings.passkey_depths = {0.0, 1.0};
  Workload w = Workload::Create(settings, 5);
  auto words = [](const RequestSpec& s) {
    const std::string& p = s.prompt.get_ref<const std::string&>();
    return std::count(p.begin(), p.end(), ' ');
  };
  EXPECT_LT(words(w.At(0)), words(w.At(1)));  // lengths cycle fastest
  for (int64_t i = 0; i < 8; ++i) {
    RequestSpec spec = w.At(i);
    EXPECT_GE(spec.passkey, 1);
    EXPECT_LE(spec.passkey, 50000);
    EXPECT_NE(spec.prompt.get<std::string>().find(std::to_string(spec.passkey)), std::string::npos);
  }
  EXPECT_EQ(w.At(3).passkey, Workload::Create(settings, 5).At(3).passkey);
}

class PromptFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& content) {
    path_ = std::filesystem::temp_directory_path() /
            ("kvgate_prompts_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl");
    std::ofstream(path_) << content;
    return path_.string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::filesystem::path path_;
};

TEST_F(PromptFileTest, ReadsStringAndTokenIdPromptsAndCycles) {
  WorkloadSettings settings;
  settings.kind = WorkloadKind::kPromptFile;
  settings.output.mean = 9;
  settings.prompt_file =
      Write("{\"prompt\": \"hello world\", \"max_tokens\": 4}\n\n{\"prompt\": [1, 2, 3]}\n");
  Workload w = Workload::Create(settings, 0);
  EXPECT_EQ(w.file_lines(), 2u);
  EXPECT_EQ(w.At(0).prompt, "hello world");
  EXPECT_EQ(w.At(0).max_tokens, 4);
  EXPECT_EQ(w.At(1).prompt, nlohmann::json({1, 2, 3}));
  EXPECT_EQ(w.At(1).max_tokens, 9);  // not in the file: from settings.output
  EXPECT_EQ(w.At(2).prompt, "hello world");
}

TEST_F(PromptFileTest, BadLinesNameTheFileAndLine) {
  WorkloadSettings settings;
  settings.kind = WorkloadKind::kPromptFile;
  for (const std::string& bad :
       {std::string("{\"prompt\": \"ok\"}\nnot json\n"), std::string("{\"prompt\": \"ok\"}\n{}\n"),
        std::string("{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n"),
        std::string("{\"prompt\": \"ok\"}\n{\"prompt\": \"x\", \"max_tokens\": 0}\n")}) {
    settings.prompt_file = Write(bad);
    try {
      Workload::Create(settings, 0);
      FAIL() << "accepted: " << bad;
    } catch (const SettingsError& e) {
      EXPECT_EQ(e.field(), "prompts");
      EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
    }
  }
  settings.prompt_file = "/nonexistent/prompts.jsonl";
  EXPECT_THROW(Workload::Create(settings, 0), SettingsError);
}

TEST(WorkloadTest, DistinctPromptsRepeatWholeRequests) {
  WorkloadSettings settings;
  settings.input = {LengthDistributionKind::kUniform, 50, 0.5, 1 << 20};
  settings.output = {LengthDistributionKind::kUniform, 50, 0.5, 1 << 20};
  settings.distinct_prompts = 3;
  Workload w = Workload::Create(settings, 2);
  EXPECT_EQ(w.At(1).prompt, w.At(4).prompt);
  EXPECT_EQ(w.At(1).max_tokens, w.At(4).max_tokens);
  EXPECT_NE(w.At(1).prompt, w.At(2).prompt);
}

}  // namespace
}  // namespace kvgate::loadgen
