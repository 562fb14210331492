// The phases of `kvgate run` (suite_run.h).
#include "suite_run.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "kvgate/checks/errors.h"
#include "kvgate/checks/ledgers.h"
#include "kvgate/checks/qa_set.h"
#include "kvgate/loadgen/metrics.h"
#include "kvgate/loadgen/report.h"
#include "kvgate/suite/stop_signals.h"

namespace kvgate::suite {
namespace {

class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted by a signal (SIGINT/SIGTERM)") {}
};

void ThrowIfStopped() {
  if (StopSignals::Requested()) throw Interrupted();
}

http::ClientConfig ClientConfigOf(const policy::ServerSpec& spec) {
  http::ClientConfig config;
  config.ca_file = spec.cacert;
  config.insecure = spec.insecure;
  if (!spec.api_key_env.empty()) {
    const char* key = std::getenv(spec.api_key_env.c_str());
    if (key != nullptr) config.api_key = key;
  }
  return config;
}

// A server the suite started died under it. What it measured since is the record of a crash,
// not of the system under test, so the run stops `interrupted` (keeping every row stored so far)
// rather than carrying on against a dead port and deciding gates on connection errors.
void RequireServersAlive(System (&systems)[2], const std::string& during) {
  for (System& system : systems) {
    if (!system.process || system.process->Alive()) continue;
    throw std::runtime_error(system.label + " server (pid " +
                             std::to_string(system.process->pid()) + ") died during " + during +
                             ": " + system.process->ExitDescription() + "; its log: " +
                             system.process->log_path());
  }
}

loadgen::LoadSettings LoadSettingsFor(const policy::Policy& p, int pair_index) {
  loadgen::LoadSettings s;
  const policy::LoadWorkload& load = p.load;
  if (load.concurrency > 0) {
    s.mode = loadgen::LoadMode::kClosedLoop;
    s.concurrency = load.concurrency;
  } else {
    s.mode = loadgen::LoadMode::kOpenLoop;
    s.rate_rps = load.rate_rps;
    s.arrival = loadgen::ParseArrival(load.arrival);
    s.burstiness = load.burstiness;
  }
  s.requests = load.requests + load.warmup;
  s.warmup_requests = load.warmup;
  s.duration_s = load.max_duration_s;
  s.request_timeout_s = load.request_timeout_s;
  // Both members of a pair share the schedule; pairs differ, so they are independent draws.
  s.seed = p.seed + 1000 + static_cast<uint64_t>(pair_index);
  s.workload.kind = loadgen::WorkloadKind::kSynthetic;
  s.workload.input = {loadgen::LengthDistributionKind::kConstant, load.prompt_words, 0.0, 1 << 20};
  s.workload.output = {loadgen::LengthDistributionKind::kConstant, load.output_tokens, 0.0,
                       1 << 20};
  s.workload.multi_turn = load.multi_turn;
  s.workload.think_time_ms = load.think_time_ms;
  s.slo = p.slo;
  return s;
}

}  // namespace

int64_t SuiteRun::Register() {
  nlohmann::json commands = nlohmann::json::array();
  for (const System& system : systems_) {
    if (system.spec->kind == policy::ServerSpec::Kind::kLocal) {
      std::string line;
      for (const auto& a : ServeCommand(system)) line += (line.empty() ? "" : " ") + a;
      commands.push_back({{"label", system.label},
                          {"command", secrets::RedactText(line + " --host 127.0.0.1 --port 0")}});
    } else {
      // How it is reached, for the history and every report (never the key itself).
      const http::ClientConfig client = ClientConfigOf(*system.spec);
      const http::Url url = http::Url::Parse(system.spec->url);
      commands.push_back({{"label", system.label},
                          {"url", secrets::RedactUrl(system.spec->url)},
                          {"endpoint", std::string(http::EndpointName(system.spec->endpoint))},
                          {"connection", http::Describe(url, client)},
                          {"tls_verification_off", http::VerificationOff(url, client)}});
    }
  }
  history::RunInfo info;
  info.kind = "run";
  info.policy_text = secrets::RedactText(policy_.text);
  info.policy_digest = PolicyDigest(info.policy_text);
  info.git_commit = options_.git_commit;
  info.machine = history::DescribeMachine();
  info.device = {{"kvgate_version", options_.version}};
  info.server_commands = commands;
  // The quality items it plans, so its gates can tell it cut short (docs/gates.md). A set that
  // cannot be made (a dataset file that does not read) is left out here: the quality phase
  // reports that error itself, with the run recorded.
  try {
    info.planned = {{"passkey", Items().passkey.size()}, {"qa", Items().qa.size()}};
  } catch (const std::exception&) {
  }
  info.notes = "policy " + policy_.name + " from " + policy_.source;
  run_id_ = db_.BeginRun(info);
  if (metrics_) metrics_->SetRunId(std::to_string(run_id_));
  Say("run " + std::to_string(run_id_) + ": policy '" + policy_.name + "', history " +
      options_.db_path.string() + ", output " + options_.out_dir.string());
  return run_id_;
}

// The run's next leg: refused (ResumeRefused, HistoryError) with nothing changed unless the run
// is an interrupted `kvgate run` of this policy, commit and items; the pairs its legs left
// unfinished are marked superseded by the new leg, in the same transaction, to be measured again
// whole.
int64_t SuiteRun::Resume(int64_t run_id) {
  const history::RunRow run = db_.GetRun(run_id);
  CheckResumable(run, PolicyDigest(secrets::RedactText(policy_.text)), options_.git_commit);
  stored_ = ReadStoredEvidence(db_, run_id);
  std::map<std::string, nlohmann::json> keys, questions;
  for (const checks::PasskeyItem& item : Items().passkey) keys[item.id] = {item.key};
  for (const checks::QaItem& item : Items().qa) questions[item.id] = item.answers;
  CheckSameItems(stored_, "passkey", keys);
  CheckSameItems(stored_, "qa", questions);
  history::ResumeInfo info;
  info.git_commit = options_.git_commit;
  info.machine = history::DescribeMachine();
  const std::vector<history::RunLeg> earlier = db_.Legs(run_id);
  leg_ = db_.ResumeRun(run_id, info, stored_.to_supersede);
  run_id_ = run_id;
  if (metrics_) metrics_->SetRunId(std::to_string(run_id_));
  Say("run " + std::to_string(run_id_) + ": resumed as leg " + std::to_string(leg_) +
      " (the last leg stopped: " + run.status_reason + "); kept " +
      std::to_string(stored_.ItemCount()) + " quality items and " +
      std::to_string(stored_.whole_pairs.size()) + " whole load pairs, " +
      std::to_string(stored_.to_supersede.size()) +
      " load runs of unfinished pairs superseded; history " + options_.db_path.string() +
      ", output " + options_.out_dir.string());
  // Quality items kept from a leg on other hardware are compared as they are, and a leg's load
  // pairs are all its own; the report names each leg's machine. Say it here too.
  if (!earlier.empty()) {
    if (const std::string change = history::HardwareChange(earlier.back().machine, info.machine);
        !change.empty()) {
      Say("run " + std::to_string(run_id_) + ": leg " + std::to_string(leg_) +
          " runs on other hardware than leg " + std::to_string(earlier.back().leg) + " (" +
          change + "); the report names each leg's machine");
    }
  }
  return run_id_;
}

void SuiteRun::StartServers() {
  Phase("servers");
  if (placement_) Say(placement_->Describe());
  for (System& system : systems_) {
    ThrowIfStopped();
    if (system.spec->kind == policy::ServerSpec::Kind::kLocal) {
      const std::vector<std::string> argv = ServeCommand(system);
      Say(system.label + ": starting " + argv[0] + " serve ...");
      // Each run's log holds its own server's output only (the folder is locked to this run);
      // a resumed run's later legs keep the earlier legs' logs (baseline.leg2.log, ...).
      const std::string leg = leg_ > 1 ? ".leg" + std::to_string(leg_) : "";
      const std::filesystem::path log = options_.out_dir / (system.label + leg + ".log");
      std::ofstream(log, std::ios::trunc).close();
      system.process = std::make_unique<ServerProcess>(
          argv, std::chrono::duration<double>(system.spec->startup_timeout_s), log.string(),
          /*append_address=*/true, placement_->pinned ? placement_->servers : CpuList{});
      system.url = system.process->url();
    } else {
      system.url = system.spec->url;
    }
    system.client = ClientConfigOf(*system.spec);
    system.model = system.spec->model.empty() ? loadgen::DiscoverModel(system.target())
                                              : system.spec->model;
    Say(system.label + ": " + system.url + " serving model '" + system.model + "' via " +
        std::string(http::EndpointName(system.spec->endpoint)) + ", " +
        http::Describe(http::Url::Parse(system.url), system.client));
    if (http::VerificationOff(http::Url::Parse(system.url), system.client)) {
      Say("WARNING: " + system.label + ": TLS certificate verification is OFF (insecure = true)");
    }
  }
  std::vector<LegServer> servers;
  for (const System& system : systems_) {
    const bool local = system.spec->kind == policy::ServerSpec::Kind::kLocal;
    servers.push_back({system.label, local, local ? "" : secrets::RedactUrl(system.url),
                       system.model, local ? FormatCpuList(placement_->servers) : "",
                       local ? FormatCpuList(placement_->suite) : ""});
  }
  // A resumed run measures the systems its first leg did, or nothing more (wherever it runs).
  if (leg_ > 1) CheckSameServers(db_.Legs(run_id_), servers);
  db_.SetLegServers(run_id_, ToJson(servers));
}

// Quality, on both systems, the same items.
void SuiteRun::RunQualityChecks() {
  Phase("quality");
  const QualityItems& policy_items = Items();
  for (System& system : systems_) {
    checks::ClientOptions client;
    client.model = system.model;
    client.client = system.client;
    client.endpoint = system.spec->endpoint;
    client.concurrency = 2;
    client.stop_requested = [] { return StopSignals::Requested(); };
    if (!system.spec->extra_body.empty()) client.extra_body = system.spec->extra_body;
    // Live progress: a line at every tenth of a check (they take minutes on a CPU).
    auto tenths = [this, &system](const std::string& check) {
      return [this, &system, check](size_t done, size_t total) {
        if (total >= 10 && done % (total / 10) != 0 && done != total) return;
        Say(system.label + ": " + check + " " + std::to_string(done) + "/" +
            std::to_string(total));
      };
    };
    // Each check asks only what the run's earlier legs did not store, and stores as it goes.
    const auto ask = [&](const std::string& check, const auto& items, auto run_check,
                         const std::string& name) {
      const size_t kept = stored_.Count(check, system.label), total = items.size();
      // The items no earlier leg stored: all of them (no copy: a 16K QA set is ~16 KB an item)
      // unless this is a resumed run that stored some.
      std::remove_cvref_t<decltype(items)> unstored;
      if (kept > 0) {
        for (const auto& item : items) {
          if (!stored_.Has(check, system.label, item.id)) unstored.push_back(item);
        }
      }
      const auto& missing = kept > 0 ? unstored : items;
      if (missing.empty()) {
        Say(system.label + ": " + name + ": all " + std::to_string(total) +
            " items stored by earlier legs");
        return;
      }
      ThrowIfStopped();
      Say(system.label + ": " + name + " check, " + std::to_string(missing.size()) + " items" +
          (kept > 0 ? " (" + std::to_string(kept) + " stored by earlier legs)" : ""));
      QualityStore store(db_, run_id_, system.label, [this] { return ServersAlive(); });
      checks::CheckRun run;
      try {
        run = run_check(missing, tenths(name), store.Sink());
      } catch (...) {
        store.Flush();
        throw;
      }
      const size_t stored = store.Flush();
      if (store.dropped() > 0) {
        Say(system.label + ": " + std::to_string(store.dropped()) + " " + name +
            " answers with errors not stored: a server had died");
      }
      ThrowIfStopped();
      RequireServersAlive(systems_, "the " + system.label + " " + name + " check");
      if (stored != missing.size()) {  // every item was sent, so every record reached the sink
        throw std::logic_error(name + " check stored " + std::to_string(stored) + " of " +
                               std::to_string(missing.size()) + " items");
      }
      const checks::SubsetSummary& all = run.all();
      Say(system.label + ": " + name + " " +
          (check == "passkey" ? std::to_string(all.correct) + "/" + std::to_string(all.count) +
                                    " (" + std::to_string(all.errors) + " errors)"
                              : "F1 " + std::to_string(all.mean_score)) +
          (kept > 0 ? " over this leg's items" : ""));
    };
    ask("passkey", policy_items.passkey,
        [&](const std::vector<checks::PasskeyItem>& items, const checks::CheckProgress& progress,
            const checks::RecordSink& sink) {
          return checks::RunPasskeyItems(system.url, items, policy_.passkey.max_tokens, client,
                                         progress, sink);
        },
        "passkey");
    ask("qa", policy_items.qa,
        [&](const std::vector<checks::QaItem>& items, const checks::CheckProgress& progress,
            const checks::RecordSink& sink) {
          return checks::RunQaCheck(system.url, items, policy_.qa.max_tokens, client, progress,
                                    sink);
        },
        "QA");
  }
}

// Interleaved load pairs: ABAB..., the same schedule within a pair.
void SuiteRun::RunLoadPairs() {
  Phase("load");
  for (int pair = 0; pair < policy_.load.pairs; ++pair) {
    if (stored_.whole_pairs.count(pair) > 0) {
      Say("pair " + std::to_string(pair) + ": measured whole by an earlier leg");
      continue;
    }
    for (System& system : systems_) RunLoadOnce(system, pair);
  }
}

void SuiteRun::RunLoadOnce(System& system, int pair) {
  ThrowIfStopped();
  loadgen::LoadSettings settings = LoadSettingsFor(policy_, pair);
  if (!system.spec->extra_body.empty()) settings.extra_body = system.spec->extra_body;
  // A SIGINT/SIGTERM reaches into the running load (within loadgen::kStopLatency), not only
  // between runs: a run can last load.max_duration_s.
  const loadgen::LoadResult result =
      loadgen::RunLoad(settings, system.target(), nullptr, &StopSignals::Flag());
  const history::LoadRunMeta meta = history::LoadRunMetaOf(result, system.label, pair);
  db_.AddLoadRun(run_id_, meta, result.records);
  if (metrics_) {
    metrics_->AddRequestsDone(system.label, static_cast<int64_t>(result.records.size()));
  }
  Say("pair " + std::to_string(pair) + " " + system.label + ": goodput " +
      std::to_string(result.summary.goodput_rps) + " req/s, P99 TTFT " +
      std::to_string(result.summary.ttft.p99_ms) + " ms, P99 TPOT " +
      std::to_string(result.summary.tpot.p99_ms) + " ms, " +
      std::to_string(result.summary.errored) + " errors" +
      (result.validity.valid ? "" : ", INVALID: " + meta.invalid_reason));
  // After storing it: the cut load run, with a record per scheduled request, is evidence.
  ThrowIfStopped();
  RequireServersAlive(systems_,
                      "load pair " + std::to_string(pair) + " (" + system.label + ")");
}

// Ledgers, as each server reports them after the work.
void SuiteRun::StoreLedgers() {
  std::vector<history::Ledger> ledgers;
  for (System& system : systems_) {
    try {
      const std::string& prefix = system.spec->ledger_prefix;
      checks::LedgerSnapshot snapshot = checks::ScrapeLedgers(system.url, prefix, system.client);
      for (std::string_view name : checks::kLedgerSeries) {
        if (snapshot.values.empty()) break;
        const std::string series = prefix + std::string(name);
        ledgers.push_back({system.label, series, snapshot.Total(series)});
      }
    } catch (const std::exception& e) {
      Say(system.label + ": ledgers not read: " + e.what());
    }
  }
  db_.AddLedgers(run_id_, ledgers);
}

// Gates, from the stored rows (what regate does), stored with the run.
std::vector<gates::GateResult> SuiteRun::DecideGates() {
  Phase("gates");
  std::vector<gates::GateResult> results = DecideFromRows(db_, run_id_, policy_);
  if (metrics_) {
    for (const auto& g : results) {
      const gates::GateStatus st = g.status;
      metrics_->SetGateResult(g.gate,
                              st == gates::GateStatus::kPass   ? "pass"
                              : st == gates::GateStatus::kFail ? "fail"
                                                               : "inconclusive",
                              g.observed, g.threshold);
    }
  }
  std::vector<history::GateResult> rows;
  for (const auto& g : results) rows.push_back(ToHistoryGate(g));
  db_.AddGateResults(run_id_, rows);
  return results;
}

}  // namespace kvgate::suite
