// The `kvgate check failures` command line, through the real binary (KVGATE_BINARY).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "child_process.h"
#include "scratch_dir.h"

namespace kvgate::failure_tests {
namespace {

using testing::ScratchDir;

CommandOutcome Kvgate(const ScratchDir& scratch, std::vector<std::string> args) {
  args.insert(args.begin(), KVGATE_BINARY);
  return RunCommand(args, scratch.path().string(), "kvgate", std::chrono::seconds(60));
}

TEST(CheckFailuresCliTest, AnUnknownScenarioIsAUsageErrorNamingIt) {
  ScratchDir scratch;
  const std::string db = (scratch.path() / "history.db").string();
  CommandOutcome outcome =
      Kvgate(scratch, {"check", "failures", "--only", "server_crash,no_such_scenario", "--db", db});
  EXPECT_EQ(ExitCode(outcome.status), 2) << outcome.err;
  EXPECT_NE(outcome.err.find("'no_such_scenario'"), std::string::npos) << outcome.err;
  EXPECT_NE(outcome.err.find("server_crash"), std::string::npos) << outcome.err;  // known list
  EXPECT_FALSE(std::filesystem::exists(db)) << "nothing is recorded for a refused command";
}

TEST(CheckFailuresCliTest, ListNamesEveryScenarioWithItsSummary) {
  ScratchDir scratch;
  CommandOutcome outcome = Kvgate(scratch, {"check", "failures", "--list"});
  EXPECT_EQ(ExitCode(outcome.status), 0) << outcome.err;
  EXPECT_NE(outcome.out.find("server_crash  kill -9"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("suite_crash  kill -9"), std::string::npos) << outcome.out;
}

TEST(CheckFailuresCliTest, BadThreadsIsAUsageError) {
  ScratchDir scratch;
  CommandOutcome outcome =
      Kvgate(scratch, {"check", "failures", "--only", "suite_crash", "--threads", "0"});
  EXPECT_EQ(ExitCode(outcome.status), 2) << outcome.err;
  EXPECT_NE(outcome.err.find("--threads"), std::string::npos) << outcome.err;
}

}  // namespace
}  // namespace kvgate::failure_tests
