// BuildReportJson on a real SQLite history: the quality evidence item by item (which items the
// baseline and the candidate scored differently, and who scored higher), and report.html drawing
// it (the table is filled by the page's script; here: the data reaches the page intact).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../history/tests/temp_dir.h"
#include "evidence.h"
#include "kvgate/history/history_db.h"
#include "kvgate/report/report.h"
#include "kvgate/suite/run_suite.h"
#include "resume.h"

namespace kvgate::suite {
namespace {

history::QualityItem Item(const std::string& check, const std::string& label,
                          const std::string& id, const std::string& prediction, double score,
                          const std::string& gold) {
  history::QualityItem item;
  item.check = check;
  item.label = label;
  item.item_id = id;
  item.prediction = prediction;
  item.reference = nlohmann::json::array({gold});
  item.score = score;
  if (check == "passkey") item.correct = score > 0.0;
  item.extra = {{"subsets", nlohmann::json::array({"length=16000"})}};
  return item;
}

TEST(ReportJsonTest, ListsTheItemsTheTwoSystemsScoredDifferently) {
  history::testing::TempDir dir;
  history::HistoryDb db = history::HistoryDb::Open(dir.File("kvgate.db"));
  history::RunInfo info;
  info.policy_text = "name = \"t\"\n";
  const int64_t run = db.BeginRun(info);
  const std::vector<history::QualityItem> items = {
      Item("qa", "baseline", "qa-1", "butcher", 100.0, "butcher"),
      Item("qa", "candidate", "qa-1", "butmer", 0.0, "butcher"),
      Item("qa", "baseline", "qa-2", "gray", 100.0, "gray"),
      Item("qa", "candidate", "qa-2", "gray", 100.0, "gray"),
      Item("qa", "baseline", "qa-3", "bromou", 0.0, "brown"),
      Item("qa", "candidate", "qa-3", "brown", 100.0, "brown"),
      Item("qa", "baseline", "qa-4", "x", 0.0, "y"),  // the candidate never answered it
      Item("passkey", "baseline", "passkey-1", "45754", 1.0, "45754"),
      Item("passkey", "candidate", "passkey-1", "45754", 1.0, "45754"),
  };
  db.AddQualityItems(run, items);
  db.FinishRun(run, history::RunStatus::kComplete, "NO-GO", 1);

  const nlohmann::json report = BuildReportJson(db, run);
  const nlohmann::json& dis = report["quality"]["disagreements"];
  EXPECT_EQ(dis["checks"]["qa"]["paired_items"], 3);
  EXPECT_EQ(dis["checks"]["qa"]["differ"], 2);
  EXPECT_EQ(dis["checks"]["qa"]["candidate_better"], 1);
  EXPECT_EQ(dis["checks"]["qa"]["baseline_better"], 1);
  EXPECT_EQ(dis["checks"]["passkey"]["paired_items"], 1);
  EXPECT_EQ(dis["checks"]["passkey"]["differ"], 0);
  ASSERT_EQ(dis["items"].size(), 2u);
  const nlohmann::json& first = dis["items"][0];
  EXPECT_EQ(first["item_id"], "qa-1");
  EXPECT_EQ(first["check"], "qa");
  EXPECT_EQ(first["reference"], nlohmann::json::array({"butcher"}));
  EXPECT_EQ(first["baseline"]["prediction"], "butcher");
  EXPECT_EQ(first["candidate"]["prediction"], "butmer");
  EXPECT_EQ(first["candidate"]["score"], 0.0);
  EXPECT_EQ(first["better"], "baseline");
  EXPECT_EQ(first["subsets"], nlohmann::json::array({"length=16000"}));
  EXPECT_EQ(dis["items"][1]["item_id"], "qa-3");
  EXPECT_EQ(dis["items"][1]["better"], "candidate");

  // The page carries the evidence and the table it is drawn into.
  const std::string html = report::RenderHtml(report);
  EXPECT_NE(html.find("id=\"disagreements\""), std::string::npos);
  EXPECT_NE(html.find("butmer"), std::string::npos);
}

// Each leg's servers reach report.json with where the local ones ran; a run stored before that
// was recorded (its servers without "kind" or "cpus") still reports and re-gates.
TEST(ReportJsonTest, LegsSayWhereTheirLocalServersRanAndOlderLegsStillReport) {
  history::testing::TempDir dir;
  history::HistoryDb db = history::HistoryDb::Open(dir.File("kvgate.db"));
  history::RunInfo info;
  info.kind = "run";
  info.policy_text = "name = \"t\"\n[baseline]\n[candidate]\n";
  const int64_t placed = db.BeginRun(info);
  db.SetLegServers(placed, ToJson({{kBaseline, true, "", "m", "1", "0"},
                                   {kCandidate, true, "", "m", "1", "0"}}));
  db.FinishRun(placed, history::RunStatus::kComplete, "INCONCLUSIVE", 2);
  const nlohmann::json report = BuildReportJson(db, placed);
  ASSERT_EQ(report["legs"].size(), 1u);
  for (const nlohmann::json& server : report["legs"][0]["servers"]) {
    EXPECT_EQ(server["cpus"], "1");
    EXPECT_EQ(server["client_cpus"], "0");
  }

  const int64_t older = db.BeginRun(info);
  db.SetLegServers(older, {{{"label", kBaseline}, {"url", ""}, {"model", "m"}}});
  db.FinishRun(older, history::RunStatus::kComplete, "INCONCLUSIVE", 2);
  const nlohmann::json old_report = BuildReportJson(db, older);
  EXPECT_FALSE(old_report["legs"][0]["servers"][0].contains("cpus"));
  EXPECT_FALSE(old_report["run"].contains("policy_error"));  // a policy without [placement]
  EXPECT_NO_THROW(report::RenderHtml(old_report));
  EXPECT_NO_THROW(RegateRun(db, older));
}

}  // namespace
}  // namespace kvgate::suite
