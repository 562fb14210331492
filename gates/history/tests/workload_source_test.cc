// Schema version 2: a load run records where its requests came from (loadgen::WorkloadSource),
// a version-1 file is migrated in place, and LoadRunMetaOf carries the source from a LoadResult.
#include <gtest/gtest.h>

#include "kvgate/history/history_db.h"
#include "schema.h"
#include "temp_dir.h"

namespace kvgate::history {
namespace {

RunInfo Info() {
  RunInfo info;
  info.kind = "load";
  info.git_commit = "0123456789ab";
  info.notes = "workload source test";
  return info;
}

LoadRunMeta Meta() {
  LoadRunMeta meta;
  meta.label = "baseline";
  meta.arrival = "constant";
  meta.duration_s = 1.5;
  return meta;
}

TEST(WorkloadSourceTest, TheSourceRoundTripsAndIsInTheJson) {
  testing::TempDir dir;
  HistoryDb db = HistoryDb::Open(dir.File("h.db").string());
  EXPECT_GE(HistoryDb::LatestSchemaVersion(), 2);
  const int64_t run = db.BeginRun(Info());
  LoadRunMeta meta = Meta();
  meta.workload_kind = "trace";
  meta.workload_path = "/data/mooncake.jsonl";
  meta.workload_sha256 = std::string(64, 'a');
  db.AddLoadRun(run, meta, {});
  const std::vector<LoadRunRow> rows = HistoryDb::Open(dir.File("h.db").string()).LoadRuns(run);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].meta.workload_kind, "trace");
  EXPECT_EQ(rows[0].meta.workload_path, "/data/mooncake.jsonl");
  EXPECT_EQ(rows[0].meta.workload_sha256, std::string(64, 'a'));
  EXPECT_EQ(ToJson(rows[0])["workload_source"]["sha256"], std::string(64, 'a'));
}

TEST(WorkloadSourceTest, AVersionOneFileIsMigratedAndItsRunsHaveNoSource) {
  testing::TempDir dir;
  const std::string path = dir.File("v1.db").string();
  {
    sqlite::Connection connection(path, true, 1000);
    connection.Exec("PRAGMA application_id = " + std::to_string(schema::kApplicationId), "test");
    ASSERT_EQ(schema::Migrate(connection, schema::Migrations().first(1)), 1);
    connection.Exec(
        "INSERT INTO runs (id, kind, status, started_at, git_commit, owner_host, owner_pid) "
        "VALUES (1, 'load', 'complete', '2026-12-01T00:00:00Z', 'abc', 'host', 1)",
        "test");
    connection.Exec(
        "INSERT INTO load_runs (run_id, label, arrival, seed, duration_s, valid, request_count) "
        "VALUES (1, 'baseline', 'poisson', 0, 1.0, 1, 0)",
        "test");
  }
  HistoryDb db = HistoryDb::Open(path);
  EXPECT_EQ(db.SchemaVersion(), HistoryDb::LatestSchemaVersion());
  const std::vector<LoadRunRow> rows = db.LoadRuns(1);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].meta.label, "baseline");
  EXPECT_EQ(rows[0].meta.workload_kind, "");
  EXPECT_EQ(rows[0].meta.workload_sha256, "");
}

TEST(WorkloadSourceTest, LoadRunMetaOfCarriesTheResultsSource) {
  loadgen::LoadResult result;
  result.workload_source = {"sharegpt", "/data/sharegpt.json", std::string(64, 'b')};
  const LoadRunMeta meta = LoadRunMetaOf(result, "candidate");
  EXPECT_EQ(meta.workload_kind, "sharegpt");
  EXPECT_EQ(meta.workload_path, "/data/sharegpt.json");
  EXPECT_EQ(meta.workload_sha256, std::string(64, 'b'));
}

}  // namespace
}  // namespace kvgate::history
