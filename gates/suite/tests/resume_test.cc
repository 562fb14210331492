// What `kvgate run --resume` accepts and keeps (resume.h), on a real SQLite history: the policy,
// commit and systems a resume must share with the run, which stored pairs count as whole, and
// that a superseded pair member reaches no gate.
#include "resume.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../../history/tests/temp_dir.h"
#include "evidence.h"
#include "kvgate/history/history_db.h"
#include "kvgate/suite/run_suite.h"

namespace kvgate::suite {
namespace {

std::string PolicyText() {
  return "name = \"resume\"\n[baseline]\nkind = \"url\"\nurl = \"http://127.0.0.1:1\"\n"
         "[candidate]\nkind = \"url\"\nurl = \"http://127.0.0.1:2\"\n";
}

history::RunRow StoredRun(const std::string& kind = "run") {
  history::RunRow run;
  run.id = 7;
  run.info.kind = kind;
  run.info.policy_text = PolicyText();
  run.info.policy_digest = PolicyDigest(PolicyText());
  run.info.git_commit = "abc123";
  run.info.notes = "policy resume from p.toml";
  return run;
}

std::string RefusalOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ResumeRefused& e) {
    return e.what();
  }
  return "";
}

TEST(ResumeTest, OnlyTheSamePolicyAndCommitMayResumeARun) {
  EXPECT_EQ(RefusalOf([] { CheckResumable(StoredRun(), PolicyDigest(PolicyText()), "abc123"); }), "");
  EXPECT_NE(RefusalOf([] { CheckResumable(StoredRun(), PolicyDigest(PolicyText() + "#"), "abc123"); })
                .find("began under another policy (policy resume from p.toml"),
            std::string::npos);
  EXPECT_NE(RefusalOf([] { CheckResumable(StoredRun(), PolicyDigest(PolicyText()), "def456"); })
                .find("commit 'abc123', this kvgate is 'def456'"),
            std::string::npos);
  EXPECT_NE(RefusalOf([] { CheckResumable(StoredRun("load"), PolicyDigest(PolicyText()), "abc123"); })
                .find("`kvgate load` run"),
            std::string::npos);
}

TEST(ResumeTest, ALegMustMeasureTheSystemsTheFirstLegMeasured) {
  const std::vector<LegServer> first = {{"baseline", true, "", "model-a", "1", "0"},
                                        {"candidate", false, "https://x:8000", "model-b", "", ""}};
  std::vector<history::RunLeg> legs(2);
  legs[0].servers = nlohmann::json::array();  // a leg stored before servers were recorded
  legs[1].leg = 2;
  legs[1].servers = ToJson(first);
  EXPECT_EQ(RefusalOf([&] { CheckSameServers(legs, first); }), "");
  std::vector<LegServer> other_model = first;
  other_model[0].model = "model-c";
  EXPECT_NE(RefusalOf([&] { CheckSameServers(legs, other_model); })
                .find("baseline server differs from leg 2's: it serves model 'model-c', was "
                      "'model-a'"),
            std::string::npos);
  std::vector<LegServer> moved = first;
  moved[1].url = "https://y:8000";
  EXPECT_NE(RefusalOf([&] { CheckSameServers(legs, moved); }).find("it is at https://y:8000"),
            std::string::npos);
  std::vector<LegServer> started = first;
  started[1].local = true;
  EXPECT_NE(RefusalOf([&] { CheckSameServers(legs, started); }).find("it is local, was url"),
            std::string::npos);
  // Where a local server ran is the leg's, not the system's: a leg on a 16-CPU machine resumes a
  // run begun on 2 CPUs, and a leg from before placement was recorded (no "cpus") is no different.
  std::vector<LegServer> elsewhere = first;
  elsewhere[0].cpus = "4-15";
  elsewhere[0].client_cpus = "0-3";
  EXPECT_EQ(RefusalOf([&] { CheckSameServers(legs, elsewhere); }), "");
  legs[1].servers[0].erase("cpus");
  legs[1].servers[0].erase("client_cpus");
  EXPECT_EQ(RefusalOf([&] { CheckSameServers(legs, elsewhere); }), "");
}

TEST(ResumeTest, ALegRecordsWhereItsLocalServersRan) {
  const nlohmann::json json = ToJson({{"baseline", true, "", "m", "1-3", "0"},
                                      {"candidate", false, "https://x:8000", "m", "", ""}});
  EXPECT_EQ(json[0], nlohmann::json({{"label", "baseline"},
                                     {"kind", "local"},
                                     {"url", ""},
                                     {"model", "m"},
                                     {"cpus", "1-3"},
                                     {"client_cpus", "0"}}));
  // An external server runs elsewhere: the suite places nothing there and records nothing.
  EXPECT_FALSE(json[1].contains("cpus"));
  EXPECT_FALSE(json[1].contains("client_cpus"));
}

TEST(ResumeTest, TheStoredItemsMustStillBeTodays) {
  StoredEvidence stored;
  stored.items[{"qa", kBaseline}]["qa-1"] = {"Oslo"};
  stored.items[{"passkey", kCandidate}]["passkey-0"] = {"12345"};
  const std::map<std::string, nlohmann::json> qa = {{"qa-1", {"Oslo"}}, {"qa-2", {"Rome"}}};
  EXPECT_EQ(RefusalOf([&] { CheckSameItems(stored, "qa", qa); }), "");
  const std::map<std::string, nlohmann::json> edited = {{"qa-1", {"Bergen"}}};
  EXPECT_NE(RefusalOf([&] { CheckSameItems(stored, "qa", edited); })
                .find("item 'qa-1' now expects [\"Bergen\"], the run stored [\"Oslo\"]"),
            std::string::npos);
  const std::map<std::string, nlohmann::json> fewer = {{"passkey-1", {"999"}}};
  EXPECT_NE(RefusalOf([&] { CheckSameItems(stored, "passkey", fewer); })
                .find("its candidate item 'passkey-0' is not in today's set"),
            std::string::npos);
}

// Pair 0 whole; pair 1 cut on the candidate's side; pair 2 with its baseline only. The cut and
// the lone member are to be measured again; after the resume supersedes them and measures pair 1
// again, the gates read pair 1's new members only.
TEST(ResumeTest, OnlyWholePairsAreKeptAndSupersededMembersReachNoGate) {
  history::testing::TempDir dir;
  history::HistoryDb db = history::HistoryDb::Open(dir.File("kvgate.db"));
  history::RunInfo info;
  info.policy_text = PolicyText();
  const int64_t run = db.BeginRun(info);
  std::vector<history::QualityItem> items(1);
  items[0].check = "qa";
  items[0].label = kBaseline;
  items[0].item_id = "qa-1";
  db.AddQualityItems(run, items);
  auto member = [&](int pair, const char* label, bool stopped, double goodput) {
    history::LoadRunMeta meta;
    meta.label = label;
    meta.pair_index = pair;
    meta.arrival = "closed";
    meta.summary = {{"stopped", stopped}, {"goodput_rps", goodput}};
    return db.AddLoadRun(run, meta, {});
  };
  member(0, kBaseline, false, 1);
  member(0, kCandidate, false, 1);
  const int64_t b1 = member(1, kBaseline, false, 1);
  const int64_t c1 = member(1, kCandidate, true, 1);
  const int64_t b2 = member(2, kBaseline, false, 1);
  db.FinishRun(run, history::RunStatus::kInterrupted, std::nullopt, 3, "signal");

  const StoredEvidence stored = ReadStoredEvidence(db, run);
  EXPECT_EQ(stored.whole_pairs, std::set<int>{0});
  EXPECT_EQ(stored.to_supersede, (std::vector<int64_t>{b1, c1, b2}));
  EXPECT_TRUE(stored.Has("qa", kBaseline, "qa-1"));
  EXPECT_FALSE(stored.Has("qa", kCandidate, "qa-1"));
  EXPECT_EQ(stored.Count("qa", kBaseline), 1u);

  EXPECT_EQ(stored.ItemCount(), 1u);
  ASSERT_EQ(db.ResumeRun(run, {}, stored.to_supersede), 2);
  member(1, kBaseline, false, 1);
  member(1, kCandidate, false, 1);
  const StoredEvidence after = ReadStoredEvidence(db, run);
  EXPECT_EQ(after.whole_pairs, (std::set<int>{0, 1}));
  EXPECT_TRUE(after.to_supersede.empty());  // pair 2's lone member is superseded already
  // Read as evidence, pair 2's lone baseline would be named as a pair without a candidate.
  for (const gates::GateResult& gate : RegateRun(db, run)) {
    if (gate.gate != "p99") continue;
    EXPECT_NE(gate.reason.find("only 2 interleaved A/B pairs"), std::string::npos) << gate.reason;
  }
}

}  // namespace
}  // namespace kvgate::suite
