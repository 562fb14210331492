// Schema version 3: every stored request carries its multi-turn session and turn
// (loadgen::RequestRecord::session, turn), and a version-2 file, written before sessions
// existed, opens with its requests read as one-turn sessions of their own.
#include <gtest/gtest.h>

#include "kvgate/history/history_db.h"
#include "schema.h"
#include "temp_dir.h"

namespace kvgate::history {
namespace {

TEST(SessionColumnsTest, SessionAndTurnRoundTrip) {
  testing::TempDir dir;
  HistoryDb db = HistoryDb::Open(dir.File("h.db").string());
  EXPECT_GE(HistoryDb::LatestSchemaVersion(), 3);
  RunInfo info;
  info.kind = "load";
  const int64_t run = db.BeginRun(info);
  LoadRunMeta meta;
  meta.label = "baseline";
  meta.arrival = "closed";
  std::vector<loadgen::RequestRecord> records(3);
  for (int i = 0; i < 3; ++i) {
    records[i].index = i;
    records[i].session = 4;
    records[i].turn = i + 1;
  }
  const int64_t load_run = db.AddLoadRun(run, meta, records);
  const std::vector<loadgen::RequestRecord> back =
      HistoryDb::Open(dir.File("h.db").string()).LoadRecords(load_run);
  ASSERT_EQ(back.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(back[i].session, 4);
    EXPECT_EQ(back[i].turn, i + 1);
  }
  EXPECT_EQ(ToJson(back[2])["turn"], 3);
  EXPECT_EQ(ToJson(back[2])["session"], 4);
}

TEST(SessionColumnsTest, AVersionTwoFileOpensWithOneTurnSessions) {
  testing::TempDir dir;
  const std::string path = dir.File("v2.db").string();
  {
    sqlite::Connection connection(path, true, 1000);
    connection.Exec("PRAGMA application_id = " + std::to_string(schema::kApplicationId), "test");
    ASSERT_EQ(schema::Migrate(connection, schema::Migrations().first(2)), 2);
    connection.Exec(
        "INSERT INTO runs (id, kind, status, started_at, git_commit, owner_host, owner_pid) "
        "VALUES (1, 'load', 'complete', '2026-12-01T00:00:00Z', 'abc', 'host', 1)",
        "test");
    connection.Exec(
        "INSERT INTO load_runs (id, run_id, label, arrival, seed, duration_s, valid, "
        "request_count) VALUES (1, 1, 'baseline', 'poisson', 0, 1.0, 1, 2)",
        "test");
    // chunk_ns x'01': the chunk-time encoding (chunk_times.h) of no chunks.
    for (int seq : {0, 1}) {
      connection.Exec(
          "INSERT INTO load_requests (load_run_id, seq, record_index, warmup, scheduled_ns, "
          "issued_ns, sent_ns, first_token_ns, end_ns, chunk_ns, prompt_tokens, "
          "completion_tokens, max_tokens, http_status) VALUES (1, " +
              std::to_string(seq) + ", " + std::to_string(seq + 10) +
              ", 0, 0, -1, -1, -1, -1, x'01', -1, -1, 8, 0)",
          "test");
    }
  }
  HistoryDb db = HistoryDb::Open(path);
  EXPECT_EQ(db.SchemaVersion(), HistoryDb::LatestSchemaVersion());
  const std::vector<loadgen::RequestRecord> records = db.LoadRecords(1);
  ASSERT_EQ(records.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(records[i].index, i + 10);
    EXPECT_EQ(records[i].session, i + 10);
    EXPECT_EQ(records[i].turn, 1);
  }
}

}  // namespace
}  // namespace kvgate::history
