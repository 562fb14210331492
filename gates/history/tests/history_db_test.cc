#include "kvgate/history/history_db.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "error_kind.h"
#include "temp_dir.h"

namespace kvgate::history {
namespace {

using Kind = HistoryError::Kind;
using loadgen::RequestRecord;

// Tripwire: RequestRecord is an aggregate of 16 fields today, all stored by the history. If the
// load generator adds a field, this fails until history_db.cc stores it (and a schema migration
// adds its column) and ExpectSameRecord below compares it.
struct AnyField {
  template <typename T>
  operator T() const;  // never defined: only used in unevaluated brace-initialisation checks
};
template <typename T, size_t N>
constexpr bool BraceInitializableWith() {
  return []<size_t... I>(std::index_sequence<I...>) {
    return requires { T{(static_cast<void>(I), AnyField{})...}; };
  }(std::make_index_sequence<N>{});
}
static_assert(BraceInitializableWith<RequestRecord, 16>() &&
                  !BraceInitializableWith<RequestRecord, 17>(),
              "loadgen::RequestRecord changed: store the new field in the history");

// Plain SQLite access to the same file, to check what is really on disk.
class RawDb {
 public:
  explicit RawDb(const std::filesystem::path& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
  }
  ~RawDb() { sqlite3_close(db_); }
  std::string Text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sql;
    std::string out;
    if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0)) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }
  int64_t Int(const std::string& sql) { return std::stoll(Text(sql)); }
  void Exec(const std::string& sql) {
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
  }

 private:
  sqlite3* db_ = nullptr;
};

using testing::KindOf;

std::vector<RequestRecord> SampleRecords() {
  std::vector<RequestRecord> records;
  RequestRecord ok;
  ok.index = 0;
  ok.scheduled_ns = 1'000'000;
  ok.issued_ns = 1'000'100;
  ok.sent_ns = 1'000'500;
  ok.first_token_ns = 30'000'000;
  ok.end_ns = 95'000'000;
  ok.chunk_ns = {30'000'000, 31'500'000, 33'000'123, 95'000'000};
  ok.prompt_tokens = 812;
  ok.completion_tokens = 4;
  ok.max_tokens = 4;
  ok.http_status = 200;
  records.push_back(ok);

  RequestRecord warm = ok;
  warm.index = 1;
  warm.warmup = true;
  warm.session = 5;  // a later turn of another request's session
  warm.turn = 3;
  records.push_back(warm);

  RequestRecord refused;  // never sent: every time -1, no usage
  refused.index = 7;
  refused.scheduled_ns = 4'000'000'000;
  refused.max_tokens = 16;
  refused.error_cause = "connect";
  refused.error_text = "connection refused — 127.0.0.1:9 «ünïcode»";
  records.push_back(refused);

  RequestRecord server_error = ok;
  server_error.index = 3;  // out of schedule order on purpose: order must be kept as given
  server_error.chunk_ns.clear();
  server_error.first_token_ns = -1;
  server_error.http_status = 503;
  server_error.error_cause = "http_5xx";
  server_error.error_text = "{\"error\": {\"message\": \"overloaded\"}}";
  records.push_back(server_error);

  RequestRecord extreme = ok;
  extreme.index = std::numeric_limits<int64_t>::max();
  extreme.scheduled_ns = std::numeric_limits<int64_t>::min();
  extreme.chunk_ns = {std::numeric_limits<int64_t>::max(), 0, std::numeric_limits<int64_t>::min()};
  records.push_back(extreme);

  RequestRecord long_stream = ok;
  long_stream.index = 4;
  long_stream.chunk_ns.clear();
  for (int i = 0; i < 2000; ++i)
    long_stream.chunk_ns.push_back(30'000'000 + int64_t{i} * 1'234'567);
  long_stream.completion_tokens = 2000;
  records.push_back(long_stream);
  return records;
}

void ExpectSameRecord(const RequestRecord& a, const RequestRecord& b, size_t i) {
  SCOPED_TRACE("record " + std::to_string(i));
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.warmup, b.warmup);
  EXPECT_EQ(a.session, b.session);
  EXPECT_EQ(a.turn, b.turn);
  EXPECT_EQ(a.scheduled_ns, b.scheduled_ns);
  EXPECT_EQ(a.issued_ns, b.issued_ns);
  EXPECT_EQ(a.sent_ns, b.sent_ns);
  EXPECT_EQ(a.first_token_ns, b.first_token_ns);
  EXPECT_EQ(a.end_ns, b.end_ns);
  EXPECT_EQ(a.chunk_ns, b.chunk_ns);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.completion_tokens, b.completion_tokens);
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.http_status, b.http_status);
  EXPECT_EQ(a.error_cause, b.error_cause);
  EXPECT_EQ(a.error_text, b.error_text);
}

RunInfo SampleRunInfo() {
  RunInfo info;
  info.policy_text = "[gates.p99]\nmax_ratio = 1.05\n";
  info.policy_digest = "sha256:abc";
  info.git_commit = "0123456789ab";
  info.machine = DescribeMachine();
  info.device = {{"gpu", "none"}};
  info.server_commands = {"kvgate serve --kv fp8 --port 0", "kvgate serve --kv readkv --port 0"};
  info.notes = "test";
  return info;
}

LoadRunMeta SampleMeta() {
  LoadRunMeta meta;
  meta.label = "candidate";
  meta.pair_index = 2;
  meta.arrival = "poisson";
  meta.offered_rate = 12.5;
  meta.seed = std::numeric_limits<uint64_t>::max() - 6;  // above INT64_MAX on purpose
  meta.duration_s = 60.25;
  meta.settings = {{"requests", 500}, {"url", "http://127.0.0.1:1234"}};
  meta.summary = {{"p99_ttft_s", 0.31}};
  return meta;
}

class HistoryDbTest : public ::testing::Test {
 protected:
  std::filesystem::path DbPath() const { return dir_.File("kvgate.db"); }
  testing::TempDir dir_;
};

TEST_F(HistoryDbTest, LoadRecordsRoundTripFieldByFieldInOrder) {
  HistoryDb db = HistoryDb::Open(DbPath());
  int64_t run = db.BeginRun(SampleRunInfo());
  std::vector<RequestRecord> records = SampleRecords();
  int64_t load_run = db.AddLoadRun(run, SampleMeta(), records);
  // Read back through a fresh connection: what is on disk, not what is cached.
  HistoryDb reopened = HistoryDb::Open(DbPath());
  std::vector<RequestRecord> back = reopened.LoadRecords(load_run);
  ASSERT_EQ(back.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) ExpectSameRecord(records[i], back[i], i);
  EXPECT_EQ(KindOf([&] { reopened.LoadRecords(load_run + 100); }), Kind::kNotFound);
}

TEST_F(HistoryDbTest, LoadRunMetaAndEveryEvidenceTableRoundTrip) {
  HistoryDb db = HistoryDb::Open(DbPath());
  int64_t run = db.BeginRun(SampleRunInfo());
  LoadRunMeta closed;
  closed.label = "baseline";
  closed.arrival = "closed";
  closed.valid = false;
  closed.invalid_reason = "generator fell 12% behind the schedule";
  db.AddLoadRun(run, SampleMeta(), SampleRecords());
  db.AddLoadRun(run, closed, {});

  std::vector<QualityItem> items = {
      {"qa",
       "baseline",
       "q1",
       "len=8k",
       "Paris",
       {"Paris", "paris, France"},
       1.0,
       std::nullopt,
       {{"tokens", 3}}},
      {"passkey", "candidate", "k17", "", "The pass key is 71432", {71432}, 1.0, true, {}},
      {"passkey", "candidate", "k18", "", "", {5}, 0.0, false, {}},
  };
  std::vector<GateResult> gates = {
      {"passkey", "PASS", 200, 200, std::nullopt, std::nullopt, "", {}},
      {"p99_ttft",
       "INCONCLUSIVE",
       1.03,
       1.05,
       0.97,
       1.09,
       "interval straddles 1.05",
       {{"pairs", 5}}},
      {"goodput", "FAIL", 1.02, 1.10, 0.99, 1.06, "goodput gain 2% < 10%", {}},
  };
  std::vector<Ledger> ledgers = {{"candidate", "capacity_tokens", 1.5e6},
                                 {"baseline", "capacity_tokens", 1.0e6},
                                 {"candidate", "workspace_peak_bytes", 0.0}};
  CheckResult check{
      "codebook_mismatch", "PASS", "server refused the mismatched cache", {{"http_status", 409}}};
  db.AddQualityItems(run, items);
  db.AddGateResults(run, gates);
  db.AddLedgers(run, ledgers);
  db.AddCheckResult(run, check);

  std::vector<LoadRunRow> load_runs = db.LoadRuns(run);
  ASSERT_EQ(load_runs.size(), 2u);
  const LoadRunMeta expected = SampleMeta();
  EXPECT_EQ(load_runs[0].meta.label, expected.label);
  EXPECT_EQ(load_runs[0].meta.pair_index, expected.pair_index);
  EXPECT_EQ(load_runs[0].meta.arrival, expected.arrival);
  EXPECT_EQ(load_runs[0].meta.offered_rate, expected.offered_rate);
  EXPECT_EQ(load_runs[0].meta.seed, expected.seed);
  EXPECT_EQ(load_runs[0].meta.duration_s, expected.duration_s);
  EXPECT_TRUE(load_runs[0].meta.valid);
  EXPECT_EQ(load_runs[0].meta.settings, expected.settings);
  EXPECT_EQ(load_runs[0].meta.summary, expected.summary);
  EXPECT_EQ(load_runs[0].request_count, static_cast<int64_t>(SampleRecords().size()));
  EXPECT_EQ(load_runs[1].meta.pair_index, std::nullopt);
  EXPECT_EQ(load_runs[1].meta.offered_rate, std::nullopt);
  EXPECT_FALSE(load_runs[1].meta.valid);
  EXPECT_EQ(load_runs[1].meta.invalid_reason, closed.invalid_reason);
  EXPECT_EQ(load_runs[1].request_count, 0);

  EXPECT_EQ(db.QualityItems(run), items);
  EXPECT_EQ(db.GateResults(run), gates);
  EXPECT_EQ(db.Ledgers(run), ledgers);
  ASSERT_EQ(db.CheckResults(run).size(), 1u);
  EXPECT_EQ(db.CheckResults(run)[0], check);
}

TEST_F(HistoryDbTest, RunLifecycleRecordsStatusVerdictAndClosesEvidence) {
  HistoryDb db = HistoryDb::Open(DbPath());
  RunInfo info = SampleRunInfo();
  int64_t run = db.BeginRun(info);
  RunRow row = db.GetRun(run);
  EXPECT_EQ(row.status, RunStatus::kRunning);
  EXPECT_FALSE(row.ended_at.has_value());
  EXPECT_EQ(row.started_at.size(), 24u);  // 2025-01-31T12:00:00.123Z
  EXPECT_EQ(row.info.owner, ProcessIdentity::Current());
  EXPECT_EQ(row.info.policy_text, info.policy_text);
  EXPECT_EQ(row.info.machine, info.machine);
  EXPECT_EQ(row.info.server_commands, info.server_commands);

  db.FinishRun(run, RunStatus::kComplete, "NO-GO", 1);
  row = db.GetRun(run);
  EXPECT_EQ(row.status, RunStatus::kComplete);
  EXPECT_EQ(row.verdict, "NO-GO");
  EXPECT_EQ(row.exit_code, 1);
  ASSERT_TRUE(row.ended_at.has_value());
  EXPECT_GE(*row.ended_at, row.started_at);

  std::string message;
  EXPECT_EQ(KindOf([&] { db.FinishRun(run, RunStatus::kComplete, "GO", 0); }), Kind::kWrongState);
  EXPECT_EQ(KindOf(
                [&] {
                  db.AddLedgers(run, std::vector<Ledger>{{"a", "b", 1.0}});
                },
                &message),
            Kind::kWrongState);
  EXPECT_NE(message.find("complete"), std::string::npos) << message;
  EXPECT_EQ(KindOf([&] { db.AddLoadRun(run + 1, SampleMeta(), {}); }), Kind::kNotFound);
  EXPECT_EQ(KindOf([&] { db.GetRun(999); }), Kind::kNotFound);

  int64_t second = db.BeginRun(info);
  EXPECT_EQ(db.LatestRunId(), second);
  std::vector<RunRow> runs = db.ListRuns();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].id, second);  // newest first
  EXPECT_EQ(db.ListRuns(1).size(), 1u);
}

TEST_F(HistoryDbTest, InterruptedRunKeepsTheReasonItWasFinishedWith) {
  HistoryDb db = HistoryDb::Open(DbPath());
  const int64_t stopped = db.BeginRun(SampleRunInfo());
  const int64_t complete = db.BeginRun(SampleRunInfo());
  db.FinishRun(stopped, RunStatus::kInterrupted, std::nullopt, 3,
               "candidate server died: killed by signal 9");
  db.FinishRun(complete, RunStatus::kComplete, "GO", 0);
  RunRow row = db.GetRun(stopped);
  EXPECT_EQ(row.status, RunStatus::kInterrupted);
  EXPECT_EQ(row.status_reason, "candidate server died: killed by signal 9");
  EXPECT_EQ(row.exit_code, 3);
  EXPECT_TRUE(row.ended_at.has_value());
  EXPECT_EQ(db.GetRun(complete).status_reason, "");  // the reason stays optional
  EXPECT_EQ(history::ToJson(row)["status_reason"], "candidate server died: killed by signal 9");
}

TEST_F(HistoryDbTest, ExportHoldsEveryRowOfTheRun) {
  HistoryDb db = HistoryDb::Open(DbPath());
  int64_t run = db.BeginRun(SampleRunInfo());
  db.AddLoadRun(run, SampleMeta(), SampleRecords());
  db.AddGateResults(run, std::vector<GateResult>{{"passkey", "PASS", 200, 200, {}, {}, "", {}}});
  db.AddQualityItems(run, std::vector<QualityItem>{
                              {"qa", "baseline", "q1", "", "x", {"x"}, 1.0, std::nullopt, {}}});
  db.FinishRun(run, RunStatus::kComplete, "GO", 0);
  nlohmann::json out = db.Export(run);
  EXPECT_EQ(out["schema_version"], HistoryDb::LatestSchemaVersion());
  EXPECT_EQ(out["run"]["id"], run);
  EXPECT_EQ(out["run"]["verdict"], "GO");
  EXPECT_EQ(out["run"]["status"], "complete");
  ASSERT_EQ(out["load_runs"].size(), 1u);
  EXPECT_EQ(out["load_runs"][0]["seed"], SampleMeta().seed);
  ASSERT_EQ(out["load_runs"][0]["requests"].size(), SampleRecords().size());
  EXPECT_EQ(out["load_runs"][0]["requests"][0]["chunk_ns"],
            nlohmann::json(SampleRecords()[0].chunk_ns));
  EXPECT_EQ(out["gate_results"][0]["gate"], "passkey");
  EXPECT_EQ(out["quality_items"][0]["reference"], nlohmann::json({"x"}));
  EXPECT_TRUE(out["ledgers"].empty());
  EXPECT_TRUE(out["check_results"].empty());
}

TEST_F(HistoryDbTest, EmptyFileIsMigratedInWalModeAndReopeningIsIdempotent) {
  { std::ofstream(DbPath()).flush(); }  // a zero-byte file
  ASSERT_EQ(std::filesystem::file_size(DbPath()), 0u);
  int64_t run = 0;
  {
    HistoryDb db = HistoryDb::Open(DbPath());
    EXPECT_EQ(db.SchemaVersion(), HistoryDb::LatestSchemaVersion());
    run = db.BeginRun(SampleRunInfo());
  }
  {
    HistoryDb again = HistoryDb::Open(DbPath());
    EXPECT_EQ(again.SchemaVersion(), HistoryDb::LatestSchemaVersion());
    EXPECT_EQ(again.GetRun(run).info.git_commit, "0123456789ab");
    EXPECT_EQ(again.ListRuns().size(), 1u);
  }
  RawDb raw(DbPath());
  EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "wal");  // WAL is a property of the file
  EXPECT_EQ(raw.Int("PRAGMA user_version"), HistoryDb::LatestSchemaVersion());
  EXPECT_EQ(raw.Int("PRAGMA application_id"), 0x4B564754);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                    "('runs', 'load_runs', 'load_requests', 'quality_items', 'gate_results', "
                    "'ledgers', 'check_results')"),
            7);
}

TEST_F(HistoryDbTest, GarbageFileGivesATypedErrorNamingTheFileAndIsLeftAlone) {
  std::string garbage;
  for (int i = 0; i < 8192; ++i) garbage.push_back(static_cast<char>((i * 7919 + 13) % 251));
  { std::ofstream(DbPath(), std::ios::binary) << garbage; }
  std::string message;
  EXPECT_EQ(KindOf([&] { HistoryDb::Open(DbPath()); }, &message), Kind::kNotADatabase);
  EXPECT_NE(message.find(DbPath().string()), std::string::npos) << message;
  std::ifstream in(DbPath(), std::ios::binary);
  std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, garbage);  // never silently recreated
}

TEST_F(HistoryDbTest, DamagedPagesAreReportedAsCorruptNamingTheFile) {
  {
    HistoryDb db = HistoryDb::Open(DbPath());
    int64_t run = db.BeginRun(SampleRunInfo());
    for (int i = 0; i < 5; ++i) db.AddLoadRun(run, SampleMeta(), SampleRecords());
  }
  {
    RawDb raw(DbPath());
    raw.Exec("PRAGMA wal_checkpoint(TRUNCATE)");  // move everything into the main file
  }
  const auto size = std::filesystem::file_size(DbPath());
  ASSERT_GT(size, 4 * 4096u);
  {
    // Keep the 100-byte header and page 1's b-tree header intact; scribble over the rest of
    // page 1's cells and the pages after it.
    std::fstream f(DbPath(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2048);
    for (int i = 0; i < 3 * 4096; ++i) f.put(static_cast<char>(0xA5 ^ (i & 0x3f)));
  }
  std::string message;
  Kind kind = KindOf(
      [&] {
        HistoryDb db = HistoryDb::Open(DbPath());
        db.ListRuns();
        db.LoadRecords(1);
        auto problems = db.CheckIntegrity();
        if (!problems.empty()) throw HistoryError(Kind::kCorrupt, DbPath(), problems[0]);
      },
      &message);
  EXPECT_EQ(kind, Kind::kCorrupt) << message;
  EXPECT_NE(message.find(DbPath().string()), std::string::npos) << message;
}

TEST_F(HistoryDbTest, ForeignSqliteDatabaseIsRefusedAndLeftUntouched) {
  {
    RawDb raw(DbPath());
    raw.Exec("CREATE TABLE contacts (name TEXT); INSERT INTO contacts VALUES ('x')");
  }
  std::string message;
  EXPECT_EQ(KindOf([&] { HistoryDb::Open(DbPath()); }, &message), Kind::kNotAKvgateHistory);
  EXPECT_NE(message.find(DbPath().string()), std::string::npos) << message;
  RawDb raw(DbPath());
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE name = 'runs'"), 0);
  EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "delete");  // not even switched to WAL
}

TEST_F(HistoryDbTest, NewerSchemaVersionIsRefusedWithAClearMessage) {
  { HistoryDb::Open(DbPath()); }
  { RawDb(DbPath()).Exec("PRAGMA user_version = 99"); }
  std::string message;
  EXPECT_EQ(KindOf([&] { HistoryDb::Open(DbPath()); }, &message), Kind::kNewerSchema);
  EXPECT_NE(message.find("99"), std::string::npos) << message;
  EXPECT_NE(message.find(DbPath().string()), std::string::npos) << message;
}

TEST_F(HistoryDbTest, MissingFileIsAnErrorWhenNotCreatingAndIsNotCreated) {
  HistoryDb::Options options;
  options.create_if_missing = false;
  EXPECT_EQ(KindOf([&] { HistoryDb::Open(DbPath(), options); }), Kind::kCannotOpen);
  EXPECT_FALSE(std::filesystem::exists(DbPath()));
  EXPECT_EQ(KindOf([&] { HistoryDb::Open(dir_.File("no/such/dir/x.db")); }), Kind::kCannotOpen);
  EXPECT_EQ(KindOf([&] { HistoryDb::Open(dir_.path()); }), Kind::kCannotOpen);
}

TEST_F(HistoryDbTest, RunsOfDeadOwnersAreMarkedInterruptedAndLiveOnesAreNot) {
  // A child process that begins "its" run identity and exits without finishing.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();  // killed below
    _exit(0);
  }
  auto dead_owner = ProcessIdentity::OfPid(child);
  ASSERT_TRUE(dead_owner.has_value());
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);

  HistoryDb db = HistoryDb::Open(DbPath());
  RunInfo info = SampleRunInfo();
  info.owner = dead_owner;
  int64_t dead_run = db.BeginRun(info);
  info.owner = std::nullopt;  // this process: alive
  int64_t live_run = db.BeginRun(info);
  info.owner = ProcessIdentity::Current();
  info.owner->start_token += "9";  // our pid, but an earlier process that had it
  int64_t reused_pid_run = db.BeginRun(info);
  info.owner->host = "elsewhere.invalid";
  int64_t other_host_run = db.BeginRun(info);
  int64_t finished_run = db.BeginRun(SampleRunInfo());
  db.FinishRun(finished_run, RunStatus::kComplete, std::nullopt, 0);

  std::vector<int64_t> marked = db.MarkInterruptedRuns();
  EXPECT_EQ(marked, (std::vector<int64_t>{dead_run, reused_pid_run}));
  EXPECT_EQ(db.GetRun(dead_run).status, RunStatus::kInterrupted);
  EXPECT_NE(db.GetRun(dead_run).status_reason.find(std::to_string(child)), std::string::npos);
  EXPECT_EQ(db.GetRun(reused_pid_run).status, RunStatus::kInterrupted);
  EXPECT_EQ(db.GetRun(live_run).status, RunStatus::kRunning);
  EXPECT_EQ(db.GetRun(other_host_run).status, RunStatus::kRunning);
  EXPECT_EQ(db.GetRun(finished_run).status, RunStatus::kComplete);
  EXPECT_TRUE(db.MarkInterruptedRuns().empty());  // idempotent
  EXPECT_EQ(KindOf([&] {
              db.AddLedgers(dead_run, std::vector<Ledger>{{"a", "b", 1}});
            }),
            Kind::kWrongState);
}

TEST_F(HistoryDbTest, IntegrityCheckIsCleanAfterManyWrites) {
  HistoryDb db = HistoryDb::Open(DbPath());
  for (int r = 0; r < 3; ++r) {
    int64_t run = db.BeginRun(SampleRunInfo());
    for (int i = 0; i < 4; ++i) db.AddLoadRun(run, SampleMeta(), SampleRecords());
    db.AddLedgers(run, std::vector<Ledger>{{"candidate", "reads", double(r)}});
    db.FinishRun(run, RunStatus::kComplete, "GO", 0);
  }
  EXPECT_TRUE(db.CheckIntegrity().empty());
  RawDb raw(DbPath());
  EXPECT_EQ(raw.Text("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(raw.Int("SELECT count(*) FROM load_requests"),
            static_cast<int64_t>(3 * 4 * SampleRecords().size()));
}

TEST_F(HistoryDbTest, AnInsertFailingMidwayLeavesNothingWritten) {
  HistoryDb db = HistoryDb::Open(DbPath());
  int64_t run = db.BeginRun(SampleRunInfo());

  std::vector<RequestRecord> records = SampleRecords();
  records[2].http_status = 1000;  // breaks a CHECK after two rows were inserted
  std::string message;
  EXPECT_EQ(KindOf([&] { db.AddLoadRun(run, SampleMeta(), records); }, &message),
            Kind::kConstraint);
  EXPECT_NE(message.find("record 2"), std::string::npos) << message;
  EXPECT_TRUE(db.LoadRuns(run).empty());

  std::vector<QualityItem> items = {{"qa", "baseline", "q1", "", "a", {"a"}, 1.0, {}, {}},
                                    {"qa", "baseline", "q2", "", "b", {"b"}, 0.5, {}, {}},
                                    {"qa", "baseline", "q1", "", "c", {"c"}, 0.0, {}, {}}};
  EXPECT_EQ(KindOf([&] { db.AddQualityItems(run, items); }, &message), Kind::kConstraint);
  EXPECT_NE(message.find("q1"), std::string::npos) << message;
  EXPECT_TRUE(db.QualityItems(run).empty());

  std::vector<GateResult> gates = {{"goodput", "PASS", 1.2, 1.1, 1.15, 1.25, "", {}},
                                   {"goodput", "PASS", 1.2, 1.1, 1.15, 1.25, "", {}}};
  EXPECT_EQ(KindOf([&] { db.AddGateResults(run, gates); }), Kind::kConstraint);
  EXPECT_TRUE(db.GateResults(run).empty());

  RawDb raw(DbPath());
  EXPECT_EQ(raw.Int("SELECT count(*) FROM load_runs"), 0);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM load_requests"), 0);
  // The connection is still usable after the rollbacks.
  EXPECT_NO_THROW(db.AddLoadRun(run, SampleMeta(), SampleRecords()));
  EXPECT_EQ(raw.Int("SELECT count(*) FROM load_requests"),
            static_cast<int64_t>(SampleRecords().size()));
}

TEST_F(HistoryDbTest, InvalidArgumentsAreRejectedNamingTheField) {
  HistoryDb db = HistoryDb::Open(DbPath());
  int64_t run = db.BeginRun(SampleRunInfo());
  auto message_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "<no std::invalid_argument>";
  };
  std::vector<GateResult> no_reason = {{"p99_tpot", "FAIL", 1.3, 1.05, 1.2, 1.4, "", {}}};
  EXPECT_NE(message_of([&] { db.AddGateResults(run, no_reason); }).find("p99_tpot"),
            std::string::npos);
  std::vector<GateResult> nan = {{"goodput", "PASS", std::nan(""), 1.1, {}, {}, "", {}}};
  EXPECT_NE(message_of([&] { db.AddGateResults(run, nan); }).find("observed"), std::string::npos);
  std::vector<GateResult> bad_status = {{"goodput", "OK", {}, {}, {}, {}, "", {}}};
  EXPECT_NE(message_of([&] { db.AddGateResults(run, bad_status); }).find("status"),
            std::string::npos);
  LoadRunMeta meta = SampleMeta();
  meta.valid = false;
  EXPECT_NE(message_of([&] { db.AddLoadRun(run, meta, {}); }).find("invalid_reason"),
            std::string::npos);
  meta = SampleMeta();
  meta.label = "";
  EXPECT_NE(message_of([&] { db.AddLoadRun(run, meta, {}); }).find("label"), std::string::npos);
  EXPECT_NE(
      message_of([&] { db.FinishRun(run, RunStatus::kComplete, "MAYBE", 0); }).find("verdict"),
      std::string::npos);
  EXPECT_THROW(db.FinishRun(run, RunStatus::kRunning, std::nullopt, 0), std::invalid_argument);
  EXPECT_EQ(db.GetRun(run).status, RunStatus::kRunning);  // none of the above changed it
}

TEST_F(HistoryDbTest, ConnectionsInSeveralThreadsShareTheFile) {
  { HistoryDb::Open(DbPath()); }
  constexpr int kThreads = 4;
  constexpr int kRunsEach = 10;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this] {
      HistoryDb db = HistoryDb::Open(DbPath());  // one connection per thread
      for (int i = 0; i < kRunsEach; ++i) {
        int64_t run = db.BeginRun(SampleRunInfo());
        db.AddLoadRun(run, SampleMeta(), SampleRecords());
        db.FinishRun(run, RunStatus::kComplete, "GO", 0);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  HistoryDb db = HistoryDb::Open(DbPath());
  EXPECT_EQ(db.ListRuns(1000).size(), static_cast<size_t>(kThreads * kRunsEach));
  EXPECT_TRUE(db.CheckIntegrity().empty());
}

TEST(DescribeMachineTest, NamesTheHostAndItsCores) {
  nlohmann::json machine = DescribeMachine();
  EXPECT_EQ(machine["host"], ProcessIdentity::Current().host);
  EXPECT_GE(machine["logical_cores"].get<int>(), 1);
  EXPECT_TRUE(machine.contains("os"));
}

// A resumed run's legs on an H200 and then an H100 machine: the GPUs are named, in order; host,
// OS and memory are not hardware changes.
TEST(DescribeMachineTest, HardwareChangeNamesTheGpusAndIgnoresTheHost) {
  const nlohmann::json h200 = {{"host", "vm"},           {"os", "Linux 6.18.44-fc-v1252-gpu"},
                               {"cpu_model", "Xeon"},    {"logical_cores", 16},
                               {"memory_bytes", 135129063424}, {"gpus", {"NVIDIA H200"}}};
  nlohmann::json h100 = h200;
  h100["os"] = "Linux 6.18.44-fc-v1272-gpu";
  h100["memory_bytes"] = 135129059328;
  EXPECT_EQ(HardwareChange(h200, h100), "");
  h100["gpus"] = {"NVIDIA H100 80GB HBM3"};
  EXPECT_EQ(HardwareChange(h200, h100),
            "gpus [\"NVIDIA H200\"] -> [\"NVIDIA H100 80GB HBM3\"]");
  h100["logical_cores"] = 32;
  h100.erase("gpus");
  EXPECT_EQ(HardwareChange(h200, h100), "logical_cores 16 -> 32; gpus [\"NVIDIA H200\"] -> (none)");
  EXPECT_EQ(HardwareChange(nlohmann::json::object(), nlohmann::json::object()), "");
}

// The driver's folder as it looks on a two-GPU host, and on a host without the driver.
TEST(DescribeMachineTest, ListsTheDriversGpusByModel) {
  testing::TempDir dir;
  const std::filesystem::path gpus = dir.File("gpus");
  const std::pair<const char*, const char*> cards[] = {
      {"0000:9a:00.0", "Model: \t\t NVIDIA H200\nIRQ:   \t\t 18\n"},
      {"0000:18:00.0", "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 17\n"},
      {"0000:00:00.0", "IRQ:   \t\t 16\n"}};  // no model line: left out
  for (const auto& [bus, text] : cards) {
    std::filesystem::create_directories(gpus / bus);
    std::ofstream(gpus / bus / "information") << text;
  }
  EXPECT_EQ(ListNvidiaGpus(gpus),
            (std::vector<std::string>{"NVIDIA H100 80GB HBM3", "NVIDIA H200"}));
  EXPECT_TRUE(ListNvidiaGpus(dir.File("absent")).empty());
}

}  // namespace
}  // namespace kvgate::history
