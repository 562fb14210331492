// Scenario 5, crash recovery of the suite (issue 6): `kill -9` of `kvgate run` while it writes
// its history. On a real SQLite file that already holds one completed run, a tiny `kvgate run` is
// started and SIGKILLed as soon as its first evidence rows are committed (the database is polled
// for them). Then:
//  - PRAGMA integrity_check is "ok" and foreign_key_check finds nothing (plain SQLite, not kvgate);
//  - the completed run exports exactly as before (every row, every field);
//  - the rows the dead run had committed are still there;
//  - the next start of a history-opening command (`kvgate history list`) marks the dead run
//    `interrupted`, with a reason naming its dead owner process;
//  - the two servers the dead run had started exit by themselves (their death signal).
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "kvgate/checks/ledgers.h"
#include "kvgate/failure_tests/scenario.h"
#include "kvgate/history/history_db.h"
#include "kvgate/policy/policy.h"
#include "raw_sqlite.h"
#include "tiny_policy.h"

namespace kvgate::failure_tests {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

// A finished run with rows in every evidence table, written through the history API exactly as
// `kvgate run` writes one.
int64_t SeedCompletedRun(const std::string& path) {
  history::HistoryDb db = history::HistoryDb::Open(path);
  history::RunInfo info;
  info.kind = "run";
  info.policy_text = "name = \"seeded\"\n";
  info.policy_digest = "seeded";
  info.git_commit = "seeded";
  info.machine = history::DescribeMachine();
  info.notes = "completed run seeded by the suite_crash failure scenario";
  const int64_t run = db.BeginRun(info);
  std::vector<history::QualityItem> items;
  for (int i = 0; i < 4; ++i) {
    items.push_back({"passkey", i % 2 ? "candidate" : "baseline", "item-" + std::to_string(i / 2),
                     "len=512", " 4821" + std::to_string(i), json::array({"48213"}),
                     i == 0 ? 1.0 : 0.0, i == 0, json::object()});
  }
  db.AddQualityItems(run, items);
  std::vector<loadgen::RequestRecord> records(40);
  for (size_t i = 0; i < records.size(); ++i) {
    loadgen::RequestRecord& r = records[i];
    r.index = static_cast<int64_t>(i);
    r.scheduled_ns = static_cast<int64_t>(i) * 100'000'000;
    r.issued_ns = r.sent_ns = r.scheduled_ns + 1000;
    r.first_token_ns = r.sent_ns + 20'000'000;
    r.chunk_ns = {r.first_token_ns, r.first_token_ns + 5'000'000, r.first_token_ns + 10'000'000};
    r.end_ns = r.chunk_ns.back();
    r.prompt_tokens = 100;
    r.completion_tokens = 3;
    r.max_tokens = 3;
    r.http_status = 200;
  }
  history::LoadRunMeta meta;
  meta.label = "baseline";
  meta.pair_index = 0;
  meta.arrival = "poisson";
  meta.offered_rate = 10.0;
  meta.seed = 7;
  meta.duration_s = 4.0;
  db.AddLoadRun(run, meta, records);
  db.AddGateResults(run, std::vector<history::GateResult>{
                             {"passkey", "PASS", 1.0, 1.0, std::nullopt, std::nullopt, "", {}}});
  // One ledger row as a run stores it: <ledger prefix><series>, the default prefix.
  const std::string series =
      policy::ServerSpec().ledger_prefix + std::string(checks::kLedgerSeries[0]);
  db.AddLedgers(run, std::vector<history::Ledger>{{"baseline", series, 1024.0}});
  db.FinishRun(run, history::RunStatus::kComplete, "GO", 0);
  return run;
}

using Expect = std::function<void(bool condition, const std::string& what)>;

// After the kill, before any kvgate opens the file again: the file as plain SQLite sees it.
void CheckTheFileAsPlainSqlite(const std::string& db, const std::string& dead_run,
                               const std::string& rows_before_kill, json& evidence,
                               const Expect& expect) {
  RawSqlite raw(db);
  const std::string integrity = raw.One("PRAGMA integrity_check");
  const std::vector<std::string> foreign = raw.Column("PRAGMA foreign_key_check");
  const std::string status_before = raw.One("SELECT status FROM runs WHERE id = " + dead_run);
  const std::string rows_after =
      raw.One("SELECT count(*) FROM quality_items WHERE run_id = " + dead_run);
  evidence.update({{"integrity_check", integrity},
                   {"foreign_key_violations", foreign.size()},
                   {"dead_run_status_before_next_start", status_before},
                   {"dead_run_quality_rows_after_kill", rows_after}});
  expect(integrity == "ok", "PRAGMA integrity_check says '" + integrity + "'");
  expect(foreign.empty(), std::to_string(foreign.size()) + " foreign key violations");
  expect(status_before == "running", "the killed run's status is '" + status_before +
                                         "' before any restart, expected "
                                         "'running' (who finished it?)");
  expect(std::stoll(rows_after.empty() ? "0" : rows_after) >= std::stoll(rows_before_kill),
         "the killed run had " + rows_before_kill + " committed quality rows, now " + rows_after);
}

ScenarioResult RunSuiteCrash(const ScenarioContext& context) {
  ScenarioResult result;
  result.name = "suite_crash";
  auto say = [&context](const std::string& line) {
    if (context.progress) context.progress(line);
  };
  std::vector<std::string> failures;
  auto expect = [&failures](bool condition, const std::string& what) {
    if (!condition) failures.push_back(what);
  };
  auto finish = [&]() {
    result.evidence["failures"] = failures;
    result.passed = failures.empty();
    result.reason =
        result.passed
            ? "kill -9 of kvgate run mid-history: integrity_check ok, the completed run is "
              "unchanged, committed rows kept, and the next start marked the dead run interrupted"
            : failures.front() + (failures.size() > 1
                                      ? " (+" + std::to_string(failures.size() - 1) + " more)"
                                      : "");
    return result;
  };

  const fs::path dir(context.work_dir);
  const std::string db = (dir / "history.db").string();
  const std::string policy = (dir / "policy.toml").string();
  const int64_t completed = SeedCompletedRun(db);
  std::string completed_before;
  {
    history::HistoryDb reader = history::HistoryDb::Open(db);
    completed_before = reader.Export(completed).dump();
  }
  TinyPolicy tiny;
  tiny.name = "failure-suite-crash";
  std::ofstream(policy) << TinyPolicyToml(context, tiny);

  ChildProcess run({context.kvgate_binary, "run", "--policy", policy, "--db", db, "--out",
                    (dir / "out").string()},
                   (dir / "run.out").string(), (dir / "run.err").string());
  say("kvgate run started (pid " + std::to_string(run.pid()) + "); waiting for its first rows");

  // Poll the file (plain SQLite, as any reader would) until the new run's first evidence rows are
  // committed, and kill it at once: it is in the middle of its history writes.
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(150);
  const std::string new_run =
      "(SELECT max(id) FROM runs WHERE id > " + std::to_string(completed) + ")";
  std::string rows_before_kill = "0";
  std::string dead_run;
  {
    RawSqlite poll(db);
    while (run.Running() && Clock::now() < give_up) {
      dead_run = poll.One("SELECT " + new_run);
      if (!dead_run.empty()) {
        rows_before_kill =
            poll.One("SELECT count(*) FROM quality_items WHERE run_id = " + dead_run);
        if (rows_before_kill != "0") break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (!run.Running() || rows_before_kill == "0") {
    const std::string err = run.Stderr();
    expect(false, "`kvgate run` never committed evidence rows to kill it over (" +
                      (run.Running() ? std::string("still running after 150 s")
                                     : DescribeWaitStatus(*run.status())) +
                      "); stderr tail: " + err.substr(err.size() > 400 ? err.size() - 400 : 0));
    for (const auto& p : Descendants(run.pid())) KillIfAlive(p);
    run.Kill();
    return finish();
  }
  // Its servers are in their own process groups, so the SIGKILL does not reach them; their
  // parent's death does (a death signal armed when they were spawned, kvgate/suite/spawn.h):
  // each must drain and exit by itself. Noted first, then given 30 s.
  const std::vector<history::ProcessIdentity> servers = Descendants(run.pid());
  const int status = run.Kill();
  const Clock::time_point drained_by = Clock::now() + std::chrono::seconds(30);
  auto alive = [&servers] {
    int count = 0;
    for (const auto& server : servers) {
      count += history::CheckLiveness(server) == history::Liveness::kAlive ? 1 : 0;
    }
    return count;
  };
  while (alive() > 0 && Clock::now() < drained_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int orphans = 0;
  for (const auto& server : servers) orphans += KillIfAlive(server) ? 1 : 0;
  say("killed kvgate run with " + rows_before_kill + " quality rows of run " + dead_run +
      " committed; " + std::to_string(servers.size() - static_cast<size_t>(orphans)) + " of its " +
      std::to_string(servers.size()) + " servers exited by themselves");
  result.evidence = {{"completed_run", completed},
                     {"dead_run", dead_run},
                     {"run_status", DescribeWaitStatus(status)},
                     {"quality_rows_when_killed", rows_before_kill},
                     {"servers_of_the_killed_run", servers.size()},
                     {"servers_left_running_by_the_killed_run", orphans}};
  expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
         "`kvgate run` was not killed by SIGKILL (" + DescribeWaitStatus(status) + ")");
  expect(servers.size() == 2, "found " + std::to_string(servers.size()) +
                                  " servers under the killed `kvgate run`, expected 2");
  expect(orphans == 0, std::to_string(orphans) +
                           " servers were still running 30 s after `kvgate run` was killed");

  // 1. The file as plain SQLite sees it, before any kvgate opens it again.
  CheckTheFileAsPlainSqlite(db, dead_run, rows_before_kill, result.evidence, expect);

  // 2. The next start: any history-opening command marks the dead run.
  CommandOutcome list = RunCommand({context.kvgate_binary, "history", "list", "--db", db, "--json"},
                                   context.work_dir, "history-list", std::chrono::seconds(60));
  result.evidence["history_list"] = DescribeWaitStatus(list.status);
  expect(!list.timed_out && ExitCode(list.status) == 0,
         "`kvgate history list` after the crash ended with " + DescribeWaitStatus(list.status) +
             ": " + list.err);
  json listed = json::parse(list.out, nullptr, /*allow_exceptions=*/false);
  std::string listed_status;
  if (listed.is_array()) {
    for (const json& row : listed) {
      if (std::to_string(row.value("id", int64_t{0})) == dead_run) {
        listed_status = row.value("status", "");
      }
    }
  }
  result.evidence["dead_run_status_listed"] = listed_status;
  expect(listed_status == "interrupted", "`kvgate history list` shows the killed run as '" +
                                             listed_status + "', expected 'interrupted'");

  // 3. Through kvgate's own reader: the reason, the completed run unchanged, the file sound.
  history::HistoryDb reader = history::HistoryDb::Open(db);
  const history::RunRow dead = reader.GetRun(std::stoll(dead_run));
  result.evidence["dead_run_reason"] = dead.status_reason;
  expect(dead.status == history::RunStatus::kInterrupted,
         "the killed run is '" + std::string(history::ToString(dead.status)) + "' after restart");
  expect(dead.status_reason.find(std::to_string(run.pid())) != std::string::npos,
         "the interrupted run's reason does not name its dead owner (pid " +
             std::to_string(run.pid()) + "): '" + dead.status_reason + "'");
  const bool unchanged = reader.Export(completed).dump() == completed_before;
  result.evidence["completed_run_unchanged"] = unchanged;
  expect(unchanged, "the completed run's export differs from before the crash");
  const std::vector<std::string> problems = reader.CheckIntegrity();
  expect(problems.empty(), "after the restart the history reports: " +
                               (problems.empty() ? std::string() : problems.front()));
  return finish();
}

}  // namespace

KVGATE_REGISTER_SCENARIO("suite_crash",
                         "kill -9 kvgate run while it writes history: the file stays sound, "
                         "completed runs intact, the dead run is marked interrupted",
                         RunSuiteCrash);

}  // namespace kvgate::failure_tests
