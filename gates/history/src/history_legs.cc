// A run's legs (history_db.h, RunLeg): resuming an interrupted run (with the load runs it
// measures again), the systems each leg measured, and reading the legs back.
#include <string>

#include "history_impl.h"
#include "kvgate/history/history_db.h"
#include "sqlite_connection.h"

namespace kvgate::history {

using nlohmann::json;
using Kind = HistoryError::Kind;

int HistoryDb::ResumeRun(int64_t run_id, const ResumeInfo& info,
                         std::span<const int64_t> supersede) {
  const ProcessIdentity owner = info.owner.value_or(ProcessIdentity::Current());
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  const RunRow run = GetRun(run_id);
  const std::string name = "run " + std::to_string(run_id);
  if (run.status == RunStatus::kRunning) {
    impl_->Throw(Kind::kWrongState, name + " is running (pid " + std::to_string(run.info.owner->pid) +
                                        " on " + run.info.owner->host +
                                        "); only an interrupted run can be resumed");
  }
  if (run.status == RunStatus::kComplete) {
    impl_->Throw(Kind::kWrongState,
                 name + " is complete (verdict " + run.verdict.value_or("none") +
                     "); only an interrupted run can be resumed");
  }
  {
    sqlite::Statement gates(c, "SELECT count(*) FROM gate_results WHERE run_id = ?",
                            "count gate results");
    gates.Bind(1, run_id);
    gates.Step();
    if (gates.Int(0) > 0) {
      impl_->Throw(Kind::kWrongState, name +
                                          " already decided its gates before it stopped; "
                                          "`kvgate history regate` reads them again");
    }
  }
  const int leg = impl_->CurrentLeg(run_id) + 1;
  sqlite::Statement insert(c,
                           "INSERT INTO run_legs (run_id, leg, started_at, git_commit, "
                           "machine_json) VALUES (?, ?, ?, ?, ?)",
                           "insert leg");
  insert.Bind(1, run_id)
      .Bind(2, leg)
      .Bind(3, NowUtc())
      .Bind(4, info.git_commit)
      .Bind(5, Dump(info.machine));
  insert.Run();
  sqlite::Statement update(c,
                           "UPDATE runs SET status = 'running', ended_at = NULL, verdict = NULL, "
                           "exit_code = NULL, status_reason = '', owner_host = ?, owner_pid = ?, "
                           "owner_start_token = ? WHERE id = ?",
                           "resume run");
  update.Bind(1, owner.host).Bind(2, owner.pid).Bind(3, owner.start_token).Bind(4, run_id);
  update.Run();
  sqlite::Statement read(c, "SELECT superseded_in_leg FROM load_runs WHERE id = ? AND run_id = ?",
                         "read load run");
  sqlite::Statement mark(c, "UPDATE load_runs SET superseded_in_leg = ? WHERE id = ?",
                         "supersede load run");
  for (const int64_t id : supersede) {
    const std::string load_run = "load run " + std::to_string(id);
    read.Bind(1, id).Bind(2, run_id);
    if (!read.Step()) impl_->Throw(Kind::kNotFound, load_run + " is not a load run of " + name);
    const std::optional<int64_t> already = read.OptionalInt(0);
    read.Reset();
    if (already) {
      impl_->Throw(Kind::kWrongState, load_run + " was already superseded in leg " +
                                          std::to_string(*already));
    }
    mark.Bind(1, leg).Bind(2, id);
    mark.Run();
  }
  transaction.Commit();
  return leg;
}

void HistoryDb::SetLegServers(int64_t run_id, const json& servers) {
  if (!servers.is_array()) throw std::invalid_argument("leg servers must be a JSON array");
  auto& c = impl_->connection;
  sqlite::Transaction transaction(c);
  impl_->RequireRunning(run_id);
  sqlite::Statement stmt(c, "UPDATE run_legs SET servers_json = ? WHERE run_id = ? AND leg = ?",
                         "record the leg's servers");
  stmt.Bind(1, Dump(servers)).Bind(2, run_id).Bind(3, impl_->CurrentLeg(run_id));
  stmt.Run();
  transaction.Commit();
}

std::vector<RunLeg> HistoryDb::Legs(int64_t run_id) {
  impl_->RequireRunExists(run_id);
  sqlite::Statement stmt(impl_->connection,
                         "SELECT leg, started_at, ended_at, end_reason, git_commit, machine_json, "
                         "servers_json FROM run_legs WHERE run_id = ? ORDER BY leg",
                         "read legs");
  stmt.Bind(1, run_id);
  std::vector<RunLeg> legs;
  while (stmt.Step()) {
    RunLeg leg;
    leg.leg = static_cast<int>(stmt.Int(0));
    leg.started_at = stmt.Text(1);
    leg.ended_at = stmt.OptionalText(2);
    leg.end_reason = stmt.Text(3);
    leg.git_commit = stmt.Text(4);
    const std::string where = "run " + std::to_string(run_id) + " leg " + std::to_string(leg.leg);
    leg.machine = ParseJson(stmt.Text(5), path(), where + " machine_json");
    leg.servers = ParseJson(stmt.Text(6), path(), where + " servers_json");
    legs.push_back(std::move(leg));
  }
  return legs;
}

json ToJson(const RunLeg& leg) {
  return {{"leg", leg.leg},
          {"started_at", leg.started_at},
          {"ended_at", leg.ended_at ? json(*leg.ended_at) : json(nullptr)},
          {"end_reason", leg.end_reason},
          {"git_commit", leg.git_commit},
          {"machine", leg.machine},
          {"servers", leg.servers}};
}

}  // namespace kvgate::history
