// The gates decided from stored rows alone (RegateRun, the path `kvgate run` and `kvgate history
// regate` share), on a real SQLite history: what each gate makes of errored evidence.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../history/tests/temp_dir.h"
#include "kvgate/history/history_db.h"
#include "kvgate/suite/run_suite.h"

namespace kvgate::suite {
namespace {

history::QualityItem QaItem(const std::string& label, int index, double score,
                            const std::string& error) {
  history::QualityItem item;
  item.check = "qa";
  item.label = label;
  item.item_id = "qa-" + std::to_string(index);
  item.prediction = error.empty() ? "answer" : "";
  item.reference = nlohmann::json::array({"answer"});
  item.score = score;
  item.extra = {{"subsets", nlohmann::json::array({"length=16000"})}, {"error", error}};
  return item;
}

// n QA items both sides answered alike (F1 100).
std::vector<history::QualityItem> Agreeing(int n) {
  std::vector<history::QualityItem> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(QaItem("baseline", i, 100.0, ""));
    items.push_back(QaItem("candidate", i, 100.0, ""));
  }
  return items;
}

// The smallest valid policy: the gates read their thresholds from it (defaults otherwise).
std::string PolicyText(const std::string& name) {
  return "name = \"" + name +
         "\"\n[baseline]\nkind = \"url\"\nurl = \"http://127.0.0.1:1\"\n"
         "[candidate]\nkind = \"url\"\nurl = \"http://127.0.0.1:2\"\n";
}

// The QA gate of a run stored with `items` (and the planned items it recorded, if any) and then
// decided from its rows.
gates::GateResult QaGateOf(const std::vector<history::QualityItem>& items,
                           const nlohmann::json& planned = nlohmann::json::object(),
                           const std::string& policy_text = PolicyText("qa")) {
  history::testing::TempDir dir;
  history::HistoryDb db = history::HistoryDb::Open(dir.File("kvgate.db"));
  history::RunInfo info;
  info.policy_text = policy_text;
  info.planned = planned;
  const int64_t run = db.BeginRun(info);
  db.AddQualityItems(run, items);
  db.FinishRun(run, history::RunStatus::kComplete, "NO-GO", 1);
  for (const gates::GateResult& gate : RegateRun(db, run)) {
    if (gate.gate == "qa_f1") return gate;
  }
  throw std::runtime_error("no qa_f1 gate");
}

// Hostile-test finding (2026-12-02): QA lengths past the model's context made every QA request
// an HTTP 400 on both sides; each errored item scored 0 on both, which read as "no drop", and the
// gate said PASS 0.000. Errored items are missing evidence.
TEST(EvidenceTest, QaGateIsInconclusiveWhenEveryItemErrored) {
  std::vector<history::QualityItem> items;
  const std::string error = "POST http://127.0.0.1:1/v1/completions: HTTP 400: prompt too long";
  for (int i = 0; i < 100; ++i) {  // the policy's default quality.qa.items: all asked
    items.push_back(QaItem("baseline", i, 0.0, error));
    items.push_back(QaItem("candidate", i, 0.0, error));
  }
  const gates::GateResult qa = QaGateOf(items);
  EXPECT_EQ(qa.status, gates::GateStatus::kInconclusive) << qa.reason;
  EXPECT_NE(qa.reason.find("no QA item was answered by both sides"), std::string::npos)
      << qa.reason;
}

// Fewer items than the policy plans (a run that stopped early): an interim look, undecided
// however clean its items look.
TEST(EvidenceTest, QaGateWaitsForThePolicysPlannedItems) {
  const std::vector<history::QualityItem> items = Agreeing(60);
  const gates::GateResult qa = QaGateOf(items);
  EXPECT_EQ(qa.status, gates::GateStatus::kInconclusive) << qa.reason;
  EXPECT_NE(qa.reason.find("only 60 of the policy's 100 QA items were measured on both sides"),
            std::string::npos)
      << qa.reason;
}

// A QA set read from a dataset file: its size is what the run recorded, not the policy's
// quality.qa.items (unknown to the policy text).
TEST(EvidenceTest, ADatasetRunsPlannedSizeIsTheOneItRecorded) {
  const std::vector<history::QualityItem> items = Agreeing(60);
  const std::string dataset_policy =
      PolicyText("qa") + "[quality.qa]\ndataset = \"qa.jsonl\"\n";
  EXPECT_EQ(QaGateOf(items, nlohmann::json::object(), dataset_policy).status,
            gates::GateStatus::kPass);  // not recorded: not known
  const gates::GateResult cut = QaGateOf(items, {{"qa", 80}}, dataset_policy);
  EXPECT_EQ(cut.status, gates::GateStatus::kInconclusive) << cut.reason;
  EXPECT_NE(cut.reason.find("only 60 of the policy's 80 QA items"), std::string::npos)
      << cut.reason;
  EXPECT_EQ(QaGateOf(items, {{"qa", 60}}, dataset_policy).status, gates::GateStatus::kPass);
}

// Errors on one side only, past the policy's max_error_rate (default 1%): undecided, not a drop
// of 100 points (a FAIL the candidate did not earn) nor a pass.
TEST(EvidenceTest, QaGateLeavesErroredItemsOutAndCountsThemAgainstTheErrorLimit) {
  std::vector<history::QualityItem> items;
  for (int i = 0; i < 100; ++i) {
    items.push_back(QaItem("baseline", i, 100.0, ""));
    items.push_back(QaItem("candidate", i, i < 5 ? 0.0 : 100.0, i < 5 ? "timeout" : ""));
  }
  const gates::GateResult qa = QaGateOf(items);
  EXPECT_EQ(qa.status, gates::GateStatus::kInconclusive) << qa.reason;
  EXPECT_NE(qa.reason.find("5 of 100 QA items"), std::string::npos) << qa.reason;
  EXPECT_EQ(qa.details["missing"]["candidate_errored"], 5);
}

}  // namespace
}  // namespace kvgate::suite
