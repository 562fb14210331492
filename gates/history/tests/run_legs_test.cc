// Schema version 4: a run measured in legs. An interrupted run resumes as its next leg, evidence
// names the leg that measured it, a pair measured again keeps its first rows marked superseded,
// and runs stored before version 4 read as one leg.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kvgate/history/history_db.h"
#include "schema.h"
#include "error_kind.h"
#include "temp_dir.h"

namespace kvgate::history {
namespace {

using Kind = HistoryError::Kind;

RunInfo Info() {
  RunInfo info;
  info.kind = "run";
  info.git_commit = "c0ffee";
  info.machine = {{"host", "first"}};
  return info;
}

LoadRunMeta Pair(const std::string& label, int pair) {
  LoadRunMeta meta;
  meta.label = label;
  meta.pair_index = pair;
  meta.arrival = "closed";
  meta.duration_s = 1.0;
  return meta;
}

QualityItem Item(const std::string& label, const std::string& id) {
  QualityItem item;
  item.check = "qa";
  item.label = label;
  item.item_id = id;
  item.prediction = "x";
  item.score = 50.0;
  return item;
}

using testing::KindOf;

// A process that has certainly ended, so MarkInterruptedRuns takes its run.
ProcessIdentity DeadOwner() {
  ProcessIdentity owner = ProcessIdentity::Current();
  owner.pid = 0x7ffffff0;
  owner.start_token = "gone";
  return owner;
}

TEST(RunLegsTest, ANewRunIsItsFirstLeg) {
  testing::TempDir dir;
  HistoryDb db = HistoryDb::Open(dir.File("h.db"));
  RunInfo info = Info();
  info.planned = {{"passkey", 200}, {"qa", 15000}};
  const int64_t run = db.BeginRun(info);
  EXPECT_EQ(db.GetRun(run).info.planned, info.planned);
  EXPECT_EQ(db.Export(run)["run"]["planned"]["qa"], 15000);
  info.planned = nlohmann::json::array();
  EXPECT_THROW(db.BeginRun(info), std::invalid_argument);
  db.SetLegServers(run, {{{"label", "baseline"}, {"model", "m"}}});
  const std::vector<RunLeg> legs = db.Legs(run);
  ASSERT_EQ(legs.size(), 1u);
  EXPECT_EQ(legs[0].leg, 1);
  EXPECT_EQ(legs[0].git_commit, "c0ffee");
  EXPECT_EQ(legs[0].machine["host"], "first");
  EXPECT_EQ(legs[0].servers[0]["model"], "m");
  EXPECT_FALSE(legs[0].ended_at);
  db.FinishRun(run, RunStatus::kComplete, "GO", 0);
  EXPECT_TRUE(db.Legs(run)[0].ended_at);
  EXPECT_EQ(db.Export(run)["legs"].size(), 1u);
}

TEST(RunLegsTest, AnInterruptedRunResumesAsItsNextLeg) {
  testing::TempDir dir;
  HistoryDb db = HistoryDb::Open(dir.File("h.db"));
  RunInfo info = Info();
  info.owner = DeadOwner();
  const int64_t run = db.BeginRun(info);
  const std::vector<QualityItem> first = {Item("baseline", "q1")};
  db.AddQualityItems(run, first);
  db.AddLoadRun(run, Pair("baseline", 0), {});
  ASSERT_EQ(db.MarkInterruptedRuns(), std::vector<int64_t>{run});
  EXPECT_NE(db.Legs(run)[0].end_reason.find("ended without finishing"), std::string::npos);
  EXPECT_FALSE(db.Legs(run)[0].ended_at);  // when the process died is not known

  ResumeInfo resume;
  resume.git_commit = "c0ffee";
  resume.machine = {{"host", "second"}};
  EXPECT_EQ(db.ResumeRun(run, resume), 2);
  const RunRow row = db.GetRun(run);
  EXPECT_EQ(row.status, RunStatus::kRunning);
  EXPECT_EQ(row.status_reason, "");
  EXPECT_EQ(row.info.owner, ProcessIdentity::Current());
  const std::vector<QualityItem> second = {Item("baseline", "q2")};
  db.AddQualityItems(run, second);
  db.AddLoadRun(run, Pair("candidate", 0), {});

  const std::vector<QualityItem> items = db.QualityItems(run);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].leg, 1);
  EXPECT_EQ(items[1].leg, 2);
  const std::vector<LoadRunRow> loads = db.LoadRuns(run);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0].leg, 1);
  EXPECT_EQ(loads[1].leg, 2);
  const std::vector<RunLeg> legs = db.Legs(run);
  ASSERT_EQ(legs.size(), 2u);
  EXPECT_EQ(legs[1].machine["host"], "second");
  EXPECT_FALSE(legs[1].ended_at);

  db.FinishRun(run, RunStatus::kComplete, "NO-GO", 1);
  EXPECT_TRUE(db.Legs(run)[1].ended_at);
  EXPECT_EQ(db.Export(run)["legs"].size(), 2u);
  EXPECT_EQ(db.Export(run)["quality_items"][1]["leg"], 2);
}

TEST(RunLegsTest, OnlyAnInterruptedRunWithoutGatesCanBeResumed) {
  testing::TempDir dir;
  HistoryDb db = HistoryDb::Open(dir.File("h.db"));
  std::string message;
  const int64_t running = db.BeginRun(Info());
  EXPECT_EQ(KindOf([&] { db.ResumeRun(running, {}); }, &message), Kind::kWrongState);
  EXPECT_NE(message.find("is running"), std::string::npos) << message;

  const int64_t complete = db.BeginRun(Info());
  db.FinishRun(complete, RunStatus::kComplete, "GO", 0);
  EXPECT_EQ(KindOf([&] { db.ResumeRun(complete, {}); }, &message), Kind::kWrongState);
  EXPECT_NE(message.find("is complete (verdict GO)"), std::string::npos) << message;

  const int64_t decided = db.BeginRun(Info());
  GateResult gate;
  gate.gate = "passkey";
  gate.status = "PASS";
  const std::vector<GateResult> gates = {gate};
  db.AddGateResults(decided, gates);
  db.FinishRun(decided, RunStatus::kInterrupted, std::nullopt, 3, "stopped");
  EXPECT_EQ(KindOf([&] { db.ResumeRun(decided, {}); }, &message), Kind::kWrongState);
  EXPECT_NE(message.find("regate"), std::string::npos) << message;

  EXPECT_EQ(KindOf([&] { db.ResumeRun(999, {}); }), Kind::kNotFound);
  EXPECT_EQ(db.Legs(decided).size(), 1u);  // the refusals added no leg
}

// A resume marks the load runs it measures again, in its own transaction: a load run of another
// run, or one already superseded, refuses the whole resume and changes nothing.
TEST(RunLegsTest, AResumeSupersedesTheLoadRunsItMeasuresAgainOnce) {
  testing::TempDir dir;
  HistoryDb db = HistoryDb::Open(dir.File("h.db"));
  const int64_t run = db.BeginRun(Info());
  const int64_t cut = db.AddLoadRun(run, Pair("baseline", 0), {});
  db.FinishRun(run, RunStatus::kInterrupted, std::nullopt, 3, "signal");
  EXPECT_EQ(db.Legs(run)[0].end_reason, "signal");
  std::string message;
  const std::vector<int64_t> foreign = {cut + 100}, ids = {cut};
  EXPECT_EQ(KindOf([&] { db.ResumeRun(run, {}, foreign); }, &message), Kind::kNotFound);
  EXPECT_NE(message.find("is not a load run of run"), std::string::npos) << message;
  EXPECT_EQ(db.GetRun(run).status, RunStatus::kInterrupted);  // nothing changed
  EXPECT_EQ(db.Legs(run).size(), 1u);

  ASSERT_EQ(db.ResumeRun(run, {}, ids), 2);
  db.AddLoadRun(run, Pair("baseline", 0), {});
  std::vector<LoadRunRow> loads = db.LoadRuns(run);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0].superseded_in_leg, 2);
  EXPECT_FALSE(loads[1].superseded_in_leg);
  EXPECT_EQ(ToJson(loads[0])["superseded_in_leg"], 2);

  db.FinishRun(run, RunStatus::kInterrupted, std::nullopt, 3, "signal again");
  EXPECT_EQ(KindOf([&] { db.ResumeRun(run, {}, ids); }, &message), Kind::kWrongState);
  EXPECT_NE(message.find("already superseded in leg 2"), std::string::npos) << message;
  EXPECT_EQ(db.GetRun(run).status, RunStatus::kInterrupted);
  EXPECT_EQ(db.Legs(run).size(), 2u);
  loads = db.LoadRuns(run);
  EXPECT_EQ(loads[0].superseded_in_leg, 2);
}

// A file that reached version 4 before runs recorded their planned items is migrated to 5 in
// place (a development history of this very change had one).
TEST(RunLegsTest, AVersionFourFileGainsPlannedItems) {
  testing::TempDir dir;
  const std::string path = dir.File("v4.db").string();
  {
    sqlite::Connection connection(path, true, 1000);
    connection.Exec("PRAGMA application_id = " + std::to_string(schema::kApplicationId), "test");
    ASSERT_EQ(schema::Migrate(connection, schema::Migrations().first(4)), 4);
  }
  HistoryDb db = HistoryDb::Open(path);
  EXPECT_EQ(db.SchemaVersion(), 5);
  RunInfo info = Info();
  info.planned = {{"qa", 3}};
  EXPECT_EQ(db.GetRun(db.BeginRun(info)).info.planned, info.planned);
}

TEST(RunLegsTest, AVersionThreeFileGetsOneLegPerRun) {
  testing::TempDir dir;
  const std::string path = dir.File("v3.db").string();
  {
    sqlite::Connection connection(path, true, 1000);
    connection.Exec("PRAGMA application_id = " + std::to_string(schema::kApplicationId), "test");
    ASSERT_EQ(schema::Migrate(connection, schema::Migrations().first(3)), 3);
    connection.Exec(
        "INSERT INTO runs (id, kind, status, status_reason, started_at, git_commit, owner_host, "
        "owner_pid) VALUES (1, 'run', 'interrupted', 'cut by a signal', '2026-12-01T00:00:00Z', "
        "'abc', 'host', 1)",
        "test");
    connection.Exec(
        "INSERT INTO quality_items (run_id, check_name, label, item_id, prediction, "
        "reference_json, score) VALUES (1, 'qa', 'baseline', 'q1', 'x', '[]', 10)",
        "test");
  }
  HistoryDb db = HistoryDb::Open(path);
  EXPECT_EQ(db.SchemaVersion(), HistoryDb::LatestSchemaVersion());
  const std::vector<RunLeg> legs = db.Legs(1);
  ASSERT_EQ(legs.size(), 1u);
  EXPECT_EQ(legs[0].started_at, "2026-12-01T00:00:00Z");
  EXPECT_EQ(legs[0].end_reason, "cut by a signal");
  EXPECT_EQ(legs[0].git_commit, "abc");
  EXPECT_EQ(db.QualityItems(1)[0].leg, 1);
  EXPECT_EQ(db.GetRun(1).info.planned, nlohmann::json::object());  // not recorded then
  EXPECT_EQ(db.ResumeRun(1, {}), 2);
}

}  // namespace
}  // namespace kvgate::history
