// RunSuite's CPU placement (cpu_placement.h), without a model: a placement this machine cannot
// give is refused before anything is written, and the calling thread runs on the suite's CPUs
// for the run and gets its own back (a server that cannot start ends the run early).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../history/tests/temp_dir.h"
#include "kvgate/policy/policy.h"
#include "kvgate/suite/cpu_placement.h"
#include "kvgate/suite/run_suite.h"

namespace kvgate::suite {
namespace {

policy::Policy LocalPolicy(const std::string& placement) {
  return policy::ParsePolicy(
      "[baseline]\nargs = [\"--kv\", \"fp8\"]\n[candidate]\n"
      "args = [\"--kv\", \"fp8\"]\n[placement]\n" +
      placement);
}

// A run in `dir` whose servers cannot start: it ends right after placing them.
SuiteOptions OptionsIn(const history::testing::TempDir& dir) {
  SuiteOptions options;
  options.db_path = dir.File("kvgate.db");
  options.out_dir = dir.File("out");
  options.kvgate_binary = dir.File("no-such-kvgate").string();
  return options;
}

TEST(RunSuitePlacementTest, APlacementThisMachineCannotGiveIsRefusedBeforeAnythingIsWritten) {
  history::testing::TempDir dir;
  const CpuList allowed = AllowedCpus();
  const SuiteOptions options = OptionsIn(dir);
  const SuiteOutcome outcome =
      RunSuite(LocalPolicy("suite_cpus = " + std::to_string(allowed.size()) + "\n"), options);
  EXPECT_EQ(outcome.exit_code, 3);
  EXPECT_EQ(outcome.run_id, 0);
  EXPECT_EQ(outcome.error, "placement.suite_cpus = " + std::to_string(allowed.size()) +
                               " leaves no CPU for the servers: this process may run on " +
                               std::to_string(allowed.size()) +
                               (allowed.size() == 1 ? " CPU (" : " CPUs (") +
                               FormatCpuList(allowed) + ")");
  EXPECT_FALSE(std::filesystem::exists(options.db_path));
  EXPECT_EQ(AllowedCpus(), allowed);
}

TEST(RunSuitePlacementTest, TheSuiteRunsOnItsOwnCpusForTheRunAndGetsItsOwnBack) {
  const CpuList allowed = AllowedCpus();
  if (allowed.size() < 2)
    GTEST_SKIP() << "needs 2 CPUs; this process may run on " << allowed.size();
  // The planner's split of this machine's CPUs (its own tests pin the sizes: cpu_placement_test).
  const CpuPlacement plan = PlanPlacement(policy::PlacementSpec{}, allowed);
  ASSERT_TRUE(plan.pinned);
  ASSERT_FALSE(plan.suite.empty());
  ASSERT_FALSE(plan.servers.empty());
  history::testing::TempDir dir;
  SuiteOptions options = OptionsIn(dir);
  std::vector<std::string> lines;
  CpuList during;
  options.progress = [&](const std::string& line) {
    lines.push_back(line);
    if (line.rfind("placement:", 0) == 0) during = AllowedCpus();
  };
  const SuiteOutcome outcome = RunSuite(LocalPolicy("mode = \"split\"\n"), options);
  EXPECT_EQ(outcome.exit_code, 3);
  EXPECT_NE(outcome.error.find("cannot start"), std::string::npos) << outcome.error;
  EXPECT_NE(outcome.error.find("on CPUs " + FormatCpuList(plan.servers)), std::string::npos)
      << outcome.error;
  EXPECT_EQ(during, plan.suite);
  EXPECT_EQ(AllowedCpus(), allowed);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[1], "placement: the suite and its load generator on CPUs " +
                          FormatCpuList(plan.suite) + ", local servers on CPUs " +
                          FormatCpuList(plan.servers) + " (of " + FormatCpuList(allowed) + ")");
}

TEST(RunSuitePlacementTest, SharedPinsNothing) {
  const CpuList allowed = AllowedCpus();
  history::testing::TempDir dir;
  SuiteOptions options = OptionsIn(dir);
  CpuList during;
  options.progress = [&](const std::string& line) {
    if (line.rfind("placement:", 0) == 0) during = AllowedCpus();
  };
  const SuiteOutcome outcome = RunSuite(LocalPolicy("mode = \"shared\"\n"), options);
  EXPECT_EQ(outcome.exit_code, 3);
  EXPECT_EQ(outcome.error.find("on CPUs"), std::string::npos) << outcome.error;
  EXPECT_EQ(during, allowed);
}

}  // namespace
}  // namespace kvgate::suite
