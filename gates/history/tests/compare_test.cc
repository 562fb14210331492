#include "kvgate/history/compare.h"

#include <gtest/gtest.h>

#include <vector>

#include "temp_dir.h"

namespace kvgate::history {
namespace {

RunInfo Info(const std::string& commit, const std::string& policy) {
  RunInfo info;
  info.policy_text = policy;
  info.policy_digest = "sha256:" + policy.substr(0, 4);
  info.git_commit = commit;
  info.machine = {{"cores", 2}, {"os", "debian"}};
  info.server_commands = nlohmann::json::array({"serve --kv fp8"});
  return info;
}

TEST(CompareTest, LineDiffKeepsOrderAndMarksEachSide) {
  EXPECT_EQ(LineDiff("a\nb\nc\n", "a\nx\nc\n"), (std::vector<std::string>{"+ x", "- b"}));
  EXPECT_TRUE(LineDiff("same\n", "same\n").empty());
  EXPECT_EQ(LineDiff("", "new\n"), (std::vector<std::string>{"+ new"}));
}

TEST(CompareTest, ObjectChangesNamesOnlyDifferingKeys) {
  const nlohmann::json changes =
      ObjectChanges({{"cores", 2}, {"os", "debian"}}, {{"cores", 16}, {"os", "debian"}});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes["cores"]["a"], 2);
  EXPECT_EQ(changes["cores"]["b"], 16);
}

TEST(CompareTest, RunsShowWhatChangedAndTheGateDeltas) {
  testing::TempDir dir;
  HistoryDb db = HistoryDb::Open(dir.File("h.db"));
  const int64_t a = db.BeginRun(Info("aaaa", "x = 1\ny = 2\n"));
  db.AddGateResults(a, std::vector<GateResult>{
                           {"p99", "PASS", 1.02, 1.05, 0.99, 1.04, "", {}},
                           {"qa_f1", "PASS", 0.5, 1.0, std::nullopt, std::nullopt, "", {}}});
  db.AddLedgers(a, std::vector<Ledger>{{"candidate", "bytes", 100.0}});
  const int64_t b = db.BeginRun(Info("bbbb", "x = 1\ny = 3\n"));
  db.AddGateResults(b, std::vector<GateResult>{
                           {"goodput", "FAIL", 0.9, 1.1, 0.85, 0.95, "below", {}},
                           {"p99", "FAIL", 1.10, 1.05, 1.07, 1.13, "above", {}}});
  db.AddLedgers(b, std::vector<Ledger>{{"candidate", "bytes", 80.0}});

  const RunComparison c = CompareRuns(db, a, b);
  EXPECT_EQ(c.changed["git_commit"]["b"], "bbbb");
  EXPECT_EQ(c.changed["policy"]["diff"], nlohmann::json({"+ y = 3", "- y = 2"}));
  EXPECT_FALSE(c.changed.contains("machine"));
  ASSERT_EQ(c.gates.size(), 3u);  // A's order, then B's own
  EXPECT_EQ(c.gates[0].gate, "p99");
  ASSERT_TRUE(c.gates[0].observed_delta.has_value());
  EXPECT_NEAR(*c.gates[0].observed_delta, 0.08, 1e-12);
  EXPECT_EQ(c.gates[1].gate, "qa_f1");
  EXPECT_FALSE(c.gates[1].b.has_value());
  EXPECT_FALSE(c.gates[1].observed_delta.has_value());
  EXPECT_EQ(c.gates[2].gate, "goodput");
  ASSERT_EQ(c.ledgers.size(), 1u);
  EXPECT_DOUBLE_EQ(*c.ledgers[0].delta, -20.0);
  const nlohmann::json j = ToJson(c);
  EXPECT_FALSE(j["a"].contains("policy_text"));
  EXPECT_EQ(j["gates"].size(), 3u);
  EXPECT_THROW(CompareRuns(db, a, b + 1), HistoryError);
}

}  // namespace
}  // namespace kvgate::history
