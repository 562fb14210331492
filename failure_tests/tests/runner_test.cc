#include "kvgate/failure_tests/runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kvgate/failure_tests/scenario.h"
#include "kvgate/history/history_db.h"
#include "scratch_dir.h"

namespace kvgate::failure_tests {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

ScenarioResult Passes(const ScenarioContext& context) {
  // Leaves a file behind, so the tests can see the folder was this scenario's own and fresh.
  const bool fresh = fs::is_empty(context.work_dir);
  std::ofstream(fs::path(context.work_dir) / "left-behind") << "x";
  return {"passes",
          fresh,
          fresh ? "work dir was fresh" : "work dir was not empty",
          {{"work_dir", context.work_dir}, {"threads", context.threads}},
          0.0};
}

ScenarioResult Throws(const ScenarioContext&) {
  throw std::runtime_error("the server never answered /health");
}

ScenarioResult FailsWithoutReason(const ScenarioContext& context) {
  std::ofstream(fs::path(context.work_dir) / "server.log") << "what went wrong";
  return {"fails", false, "", nullptr, 0.0};
}

ScenarioResult Sleeps(const ScenarioContext&) {
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  return {"sleeps", true, "slept", nlohmann::json::object(), 0.0};
}

const ScenarioInfo kPasses{"passes", "passes", Passes};
const ScenarioInfo kThrows{"throws", "throws", Throws};
const ScenarioInfo kFails{"fails", "fails", FailsWithoutReason};
const ScenarioInfo kSleeps{"sleeps", "sleeps", Sleeps};

RunnerOptions Options(const fs::path& root) {
  RunnerOptions options;
  options.kvgate_binary = "/nonexistent/kvgate";
  options.model_dir = "/nonexistent/model";
  options.threads = 3;
  options.work_root = root;
  options.watchdog_grace = std::chrono::seconds(0);  // no process exit inside a unit test
  return options;
}

TEST(RegistryTest, TheCrashScenariosAreRegisteredInNameOrder) {
  std::vector<ScenarioInfo> all = Scenarios();
  std::vector<std::string> names;
  for (const ScenarioInfo& s : all) names.emplace_back(s.name);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "server_crash"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "suite_crash"), names.end());
  for (const ScenarioInfo& s : all) {
    EXPECT_FALSE(s.summary.empty()) << s.name;
    EXPECT_NE(s.run, nullptr) << s.name;
  }
}

TEST(RegistryTest, RegisteringANameTwiceIsRefused) {
  EXPECT_THROW(RegisterScenario({"server_crash", "again", Passes}), std::logic_error);
  EXPECT_THROW(RegisterScenario({"", "no name", Passes}), std::invalid_argument);
}

TEST(SelectScenariosTest, UnknownNamesAreRejectedNamingThemAndTheKnownOnes) {
  try {
    SelectScenarios({kPasses, kThrows}, {"passes", "nope", "also_nope", "nope"});
    FAIL() << "expected UnknownScenario";
  } catch (const UnknownScenario& e) {
    EXPECT_EQ(e.names(), (std::vector<std::string>{"nope", "also_nope"}));
    const std::string message = e.what();
    EXPECT_NE(message.find("--only"), std::string::npos) << message;
    EXPECT_NE(message.find("'nope'"), std::string::npos) << message;
    EXPECT_NE(message.find("'also_nope'"), std::string::npos) << message;
    EXPECT_NE(message.find("known: passes, throws"), std::string::npos) << message;
  }
}

TEST(SelectScenariosTest, KeepsTheRegistryOrderAndTakesEveryOneWhenNoneIsNamed) {
  std::vector<ScenarioInfo> picked =
      SelectScenarios({kPasses, kThrows, kFails}, {"fails", "passes", "fails"});
  ASSERT_EQ(picked.size(), 2u);
  EXPECT_EQ(picked[0].name, "passes");
  EXPECT_EQ(picked[1].name, "fails");
  EXPECT_EQ(SelectScenarios({kPasses, kThrows}, {}).size(), 2u);
}

TEST(RunnerTest, AThrowingScenarioBecomesAFailedResultCarryingItsMessage) {
  ScratchDir scratch;
  RunReport report = RunScenarios({kThrows, kPasses}, Options(scratch.path()));
  ASSERT_EQ(report.results.size(), 2u);
  EXPECT_EQ(report.results[0].name, "throws");
  EXPECT_FALSE(report.results[0].passed);
  EXPECT_EQ(report.results[0].reason, "the scenario threw: the server never answered /health");
  EXPECT_TRUE(report.results[0].evidence.is_object());
  // The list goes on after a throwing scenario.
  EXPECT_EQ(report.results[1].name, "passes");
  EXPECT_TRUE(report.results[1].passed) << report.results[1].reason;
  EXPECT_FALSE(report.all_passed());
  EXPECT_EQ(report.passed_count(), 1);
}

TEST(RunnerTest, EachScenarioRunsInItsOwnFreshFolderWithTheGivenSettings) {
  ScratchDir scratch;
  // Left over from an earlier kept run: must not leak into this one.
  fs::create_directories(scratch.path() / "passes");
  std::ofstream(scratch.path() / "passes" / "stale") << "old";
  RunnerOptions options = Options(scratch.path());
  options.keep_work_dirs = true;
  RunReport report = RunScenarios({kPasses}, options);
  ASSERT_EQ(report.results.size(), 1u);
  EXPECT_TRUE(report.results[0].passed) << report.results[0].reason;
  EXPECT_EQ(report.results[0].evidence["work_dir"], (scratch.path() / "passes").string());
  EXPECT_EQ(report.results[0].evidence["threads"], 3);
  EXPECT_TRUE(fs::exists(scratch.path() / "passes" / "left-behind"));
}

TEST(RunnerTest, PassedFoldersAreRemovedAndFailedOnesKeptForInspection) {
  ScratchDir scratch;
  RunReport report = RunScenarios({kPasses, kFails}, Options(scratch.path()));
  EXPECT_FALSE(fs::exists(scratch.path() / "passes"));
  EXPECT_TRUE(fs::exists(scratch.path() / "fails" / "server.log"));
  // A failure without a reason still gets one, and the registry's name wins.
  EXPECT_EQ(report.results[1].name, "fails");
  EXPECT_EQ(report.results[1].reason, "failed (no reason given)");
  EXPECT_TRUE(report.results[1].evidence.is_object());
}

TEST(RunnerTest, ScenariosAfterTheTimeBudgetFailAsNotRun) {
  ScratchDir scratch;
  RunnerOptions options = Options(scratch.path());
  options.budget = std::chrono::milliseconds(50);
  RunReport report = RunScenarios({kSleeps, kPasses}, options);
  ASSERT_EQ(report.results.size(), 2u);
  EXPECT_TRUE(report.results[0].passed);
  EXPECT_GE(report.results[0].seconds, 0.15);
  EXPECT_FALSE(report.results[1].passed);
  EXPECT_EQ(report.results[1].reason.rfind("not run: the time budget", 0), 0u)
      << report.results[1].reason;
  EXPECT_FALSE(fs::exists(scratch.path() / "passes"));  // it never started
}

TEST(RunnerTest, ProgressNamesEveryScenarioAndItsOutcome) {
  ScratchDir scratch;
  RunnerOptions options = Options(scratch.path());
  std::vector<std::string> lines;
  options.progress = [&lines](std::string_view line) { lines.emplace_back(line); };
  RunScenarios({kThrows}, options);
  const auto has = [&lines](const std::string& text) {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(has("throws: FAIL")) << ::testing::PrintToString(lines);
  EXPECT_TRUE(has("work folder kept")) << ::testing::PrintToString(lines);
}

TEST(StoreInHistoryTest, OneFailuresRunWithARowPerScenarioShownLikeAnyCheck) {
  ScratchDir scratch;
  RunReport report = RunScenarios({kThrows, kPasses}, Options(scratch.path() / "work"));
  history::HistoryDb db = history::HistoryDb::Open(scratch.path() / "history.db");
  const int64_t run = StoreInHistory(db, report, "kvgate check failures", "abc123");
  history::RunRow row = db.GetRun(run);
  EXPECT_EQ(row.info.kind, "failures");
  EXPECT_EQ(row.status, history::RunStatus::kComplete);
  EXPECT_EQ(row.verdict, "NO-GO");
  EXPECT_EQ(row.exit_code, 1);
  EXPECT_EQ(row.info.git_commit, "abc123");
  EXPECT_EQ(row.info.notes, "kvgate check failures");
  std::vector<history::CheckResult> checks = db.CheckResults(run);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].name, "throws");
  EXPECT_EQ(checks[0].status, "FAIL");
  EXPECT_EQ(checks[0].reason, report.results[0].reason);
  EXPECT_EQ(checks[1].name, "passes");
  EXPECT_EQ(checks[1].status, "PASS");
  EXPECT_EQ(checks[1].details["evidence"], report.results[1].evidence);
  EXPECT_DOUBLE_EQ(checks[1].details["seconds"].get<double>(), report.results[1].seconds);
  EXPECT_TRUE(db.CheckIntegrity().empty());
}

TEST(StoreInHistoryTest, AllPassedIsAGoRunWithExitCodeZero) {
  ScratchDir scratch;
  RunReport report = RunScenarios({kPasses}, Options(scratch.path() / "work"));
  history::HistoryDb db = history::HistoryDb::Open(scratch.path() / "history.db");
  history::RunRow row = db.GetRun(StoreInHistory(db, report, "", ""));
  EXPECT_EQ(row.verdict, "GO");
  EXPECT_EQ(row.exit_code, 0);
}

TEST(ToJsonTest, ReportCountsAndEveryResult) {
  ScratchDir scratch;
  RunReport report = RunScenarios({kThrows, kPasses}, Options(scratch.path()));
  nlohmann::json json = ToJson(report);
  EXPECT_EQ(json["passed"], false);
  EXPECT_EQ(json["passed_count"], 1);
  EXPECT_EQ(json["failed_count"], 1);
  ASSERT_EQ(json["results"].size(), 2u);
  EXPECT_EQ(json["results"][0]["name"], "throws");
  EXPECT_EQ(json["results"][0]["passed"], false);
  EXPECT_TRUE(json["results"][1].contains("evidence"));
  EXPECT_TRUE(json["results"][1].contains("seconds"));
}

}  // namespace
}  // namespace kvgate::failure_tests
