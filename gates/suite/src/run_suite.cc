#include "kvgate/suite/run_suite.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>

#include <xxhash.h>
#include <fstream>
#include <memory>
#include <optional>

#include "evidence.h"
#include "output_lock.h"
#include "kvgate/checks/errors.h"
#include "kvgate/checks/ledgers.h"
#include "kvgate/checks/qa_set.h"
#include "kvgate/loadgen/metrics.h"
#include "kvgate/loadgen/report.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/secrets/redact.h"
#include "kvgate/report/report.h"
#include "kvgate/suite/server_process.h"
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

// One side of the comparison: a server the suite started, or an external URL.
struct System {
  std::string label;
  const policy::ServerSpec* spec = nullptr;
  std::unique_ptr<ServerProcess> process;
  std::string url;
  std::string model;
};

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

nlohmann::json ReadPolicyJson(const policy::ReadPolicySpec& rp) {
  nlohmann::json json = nlohmann::json::object();
  if (rp.read_bits) json["read_bits"] = *rp.read_bits;
  if (rp.reader) json["reader"] = *rp.reader;
  if (rp.key_bits) json["key_bits"] = *rp.key_bits;
  if (rp.value_bits) json["value_bits"] = *rp.value_bits;
  return json;
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
  s.slo = ToLoadSlo(p.slo);
  return s;
}

std::string NowIso() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buffer;
}

}  // namespace

std::vector<gates::GateResult> RegateRun(history::HistoryDb& db, int64_t run_id) {
  history::RunRow run = db.GetRun(run_id);
  policy::Policy policy = policy::ParsePolicy(run.info.policy_text, "run " + std::to_string(run_id));
  return DecideFromRows(db, run_id, policy);
}

RegateComparison CompareRegate(history::HistoryDb& db, int64_t run_id) {
  RegateComparison out;
  const std::vector<gates::GateResult> recomputed = RegateRun(db, run_id);
  out.verdict = gates::Decide(recomputed);
  out.recorded_verdict = db.GetRun(run_id).verdict;
  std::vector<history::GateResult> fresh;
  for (const auto& g : recomputed) fresh.push_back(ToHistoryGate(g));
  auto take_fresh = [&fresh](const std::string& gate) -> std::optional<history::GateResult> {
    auto it = std::find_if(fresh.begin(), fresh.end(), [&](const auto& g) { return g.gate == gate; });
    if (it == fresh.end()) return std::nullopt;
    history::GateResult found = *it;
    fresh.erase(it);
    return found;
  };
  for (const history::GateResult& recorded : db.GateResults(run_id)) {
    RegateComparison::Row row{recorded.gate, recorded, take_fresh(recorded.gate), {}};
    if (row.recomputed) {
      const history::GateResult& now = *row.recomputed;
      if (now.status != recorded.status) row.differences.push_back("status");
      if (now.observed != recorded.observed) row.differences.push_back("observed");
      if (now.threshold != recorded.threshold) row.differences.push_back("threshold");
      if (now.interval_lo != recorded.interval_lo || now.interval_hi != recorded.interval_hi) {
        row.differences.push_back("interval");
      }
      if (now.reason != recorded.reason) row.differences.push_back("reason");
    } else {
      row.differences.push_back("not decided any more");
    }
    out.rows.push_back(std::move(row));
  }
  for (history::GateResult& extra : fresh) {
    out.rows.push_back({extra.gate, std::nullopt, std::move(extra), {"not recorded"}});
  }
  out.identical = !out.rows.empty() &&
                  std::all_of(out.rows.begin(), out.rows.end(),
                              [](const auto& row) { return row.differences.empty(); });
  return out;
}

SuiteOutcome RunSuite(const policy::Policy& policy, const SuiteOptions& options) {
  // Every line, stored text and error leaves through secrets::Redact*: a policy's URL may carry
  // a password or a token, which the connections need and nothing written may show.
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(secrets::RedactText(line));
  };
  SuiteOutcome outcome;
  // The output folder is this run's alone (server logs, reports) until it returns; a run that
  // cannot have it writes nothing, not even a history row.
  std::optional<OutputFolderLock> folder_lock;
  try {
    folder_lock.emplace(options.out_dir);
  } catch (const std::exception& e) {
    outcome.exit_code = 3;
    outcome.error = secrets::RedactText(e.what());
    return outcome;
  }
  StopSignals signals;
  history::HistoryDb db = history::HistoryDb::Open(options.db_path);
  for (int64_t id : db.MarkInterruptedRuns()) {
    say("history: run " + std::to_string(id) + " was left running by a dead process: marked interrupted");
  }

  System systems[2] = {{kBaseline, &policy.baseline, nullptr, "", ""},
                       {kCandidate, &policy.candidate, nullptr, "", ""}};
  nlohmann::json commands = nlohmann::json::array();
  for (System& system : systems) {
    if (system.spec->kind == policy::ServerSpec::Kind::kLocal) {
      std::vector<std::string> argv = {options.kvgate_binary, "serve"};
      argv.insert(argv.end(), system.spec->serve_args.begin(), system.spec->serve_args.end());
      std::string line;
      for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
      commands.push_back({{"label", system.label},
                          {"command", secrets::RedactText(line + " --host 127.0.0.1 --port 0")}});
    } else {
      commands.push_back({{"label", system.label}, {"url", secrets::RedactUrl(system.spec->url)}});
    }
  }
  history::RunInfo info;
  info.kind = "run";
  info.policy_text = secrets::RedactText(policy.text);
  XXH128_hash_t digest = XXH3_128bits(info.policy_text.data(), info.policy_text.size());
  char hex[40];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(digest.high64),
                static_cast<unsigned long long>(digest.low64));
  info.policy_digest = std::string("xxh3-128:") + hex;
  info.git_commit = options.git_commit;
  info.machine = history::DescribeMachine();
  info.device = {{"kvgate_version", options.version}};
  info.server_commands = commands;
  info.notes = "policy " + policy.name + " from " + policy.source;
  outcome.run_id = db.BeginRun(info);
  RunMetrics* metrics = options.metrics;
  if (metrics) metrics->SetRunId(std::to_string(outcome.run_id));
  auto phase = [metrics](std::string_view name) {
    if (metrics) metrics->SetPhase(name);
  };
  say("run " + std::to_string(outcome.run_id) + ": policy '" + policy.name + "', history " +
      options.db_path.string() + ", output " + options.out_dir.string());

  try {
    // 1. Servers.
    phase("servers");
    for (System& system : systems) {
      ThrowIfStopped();
      if (system.spec->kind == policy::ServerSpec::Kind::kLocal) {
        std::vector<std::string> argv = {options.kvgate_binary, "serve"};
        argv.insert(argv.end(), system.spec->serve_args.begin(), system.spec->serve_args.end());
        say(system.label + ": starting " + argv[0] + " serve ...");
        // Each run's log holds its own server's output only (the folder is locked to this run).
        const std::filesystem::path log = options.out_dir / (system.label + ".log");
        std::ofstream(log, std::ios::trunc).close();
        system.process = std::make_unique<ServerProcess>(
            argv, std::chrono::duration<double>(system.spec->startup_timeout_s), log.string());
        system.url = system.process->url();
      } else {
        system.url = system.spec->url;
      }
      system.model = system.spec->model.empty()
                         ? loadgen::DiscoverModel({system.url, "", ""})
                         : system.spec->model;
      say(system.label + ": " + system.url + " serving model '" + system.model + "'");
    }
    nlohmann::json candidate_extra = nlohmann::json::object();
    if (!policy.candidate_read_policy.empty()) {
      candidate_extra["readkv"] = ReadPolicyJson(policy.candidate_read_policy);
    }

    // 2. Quality, on both systems, the same items.
    phase("quality");
    checks::PasskeySettings passkey;
    passkey.items = policy.passkey.items;
    passkey.lengths.assign(policy.passkey.lengths.begin(), policy.passkey.lengths.end());
    passkey.depths = policy.passkey.depths;
    passkey.seed = policy.seed;
    passkey.key_digits = policy.passkey.key_digits;
    passkey.max_tokens = policy.passkey.max_tokens;
    std::vector<checks::QaItem> qa_items;
    if (!policy.qa.dataset.empty()) {
      qa_items = checks::LoadQaJsonl(policy.qa.dataset);
    } else {
      checks::QaSetSettings qa;
      qa.items = policy.qa.items;
      qa.lengths.assign(policy.qa.lengths.begin(), policy.qa.lengths.end());
      qa.seed = policy.seed + 1;
      qa.max_tokens = policy.qa.max_tokens;
      qa_items = checks::GenerateQaSet(qa);
    }
    for (System& system : systems) {
      checks::ClientOptions client;
      client.model = system.model;
      client.concurrency = 2;
      client.stop_requested = [] { return StopSignals::Requested(); };
      // Live progress: a line at every tenth of a check (they take minutes on a CPU).
      auto tenths = [&say, &system](const std::string& check) {
        return [&say, &system, check](size_t done, size_t total) {
          if (total >= 10 && done % (total / 10) != 0 && done != total) return;
          say(system.label + ": " + check + " " + std::to_string(done) + "/" +
              std::to_string(total));
        };
      };
      if (system.label == kCandidate) client.extra_body = candidate_extra;
      ThrowIfStopped();
      say(system.label + ": passkey check, " + std::to_string(passkey.items) + " items");
      checks::CheckRun run =
          checks::RunPasskeyCheck(system.url, passkey, client, tenths("passkey"));
      ThrowIfStopped();
      RequireServersAlive(systems, "the " + system.label + " passkey check");
      std::vector<history::QualityItem> rows;
      for (const auto& r : run.records) rows.push_back(ToHistoryItem(r, system.label));
      db.AddQualityItems(outcome.run_id, rows);
      say(system.label + ": passkey " + std::to_string(run.all().correct) + "/" +
          std::to_string(run.all().count) + " (" + std::to_string(run.all().errors) + " errors)");
      ThrowIfStopped();
      say(system.label + ": QA check, " + std::to_string(qa_items.size()) + " items");
      checks::CheckRun qa = checks::RunQaCheck(system.url, qa_items, policy.qa.max_tokens, client,
                                               tenths("QA"));
      ThrowIfStopped();
      RequireServersAlive(systems, "the " + system.label + " QA check");
      rows.clear();
      for (const auto& r : qa.records) rows.push_back(ToHistoryItem(r, system.label));
      db.AddQualityItems(outcome.run_id, rows);
      say(system.label + ": QA F1 " + std::to_string(qa.all().mean_score));
    }

    // 3. Interleaved load pairs: ABAB..., the same schedule within a pair.
    phase("load");
    for (int pair = 0; pair < policy.load.pairs; ++pair) {
      for (System& system : systems) {
        ThrowIfStopped();
        loadgen::LoadSettings settings = LoadSettingsFor(policy, pair);
        if (system.label == kCandidate) settings.extra_body = candidate_extra;
        // A SIGINT/SIGTERM reaches into the running load (within loadgen::kStopLatency), not
        // only between runs: a run can last load.max_duration_s.
        loadgen::LoadResult result = loadgen::RunLoad(settings, {system.url, system.model, ""},
                                                      nullptr, &StopSignals::Flag());
        history::LoadRunMeta meta;
        meta.label = system.label;
        meta.pair_index = pair;
        meta.arrival = settings.mode == loadgen::LoadMode::kClosedLoop
                           ? "closed"
                           : std::string(loadgen::ArrivalName(settings.arrival));
        if (settings.mode == loadgen::LoadMode::kOpenLoop) meta.offered_rate = settings.rate_rps;
        meta.seed = settings.seed;
        meta.duration_s = result.summary.duration_s;
        meta.valid = result.validity.valid;
        for (const auto& reason : result.validity.reasons) {
          meta.invalid_reason += (meta.invalid_reason.empty() ? "" : "; ") + reason;
        }
        meta.settings = loadgen::SettingsToJson(settings);
        meta.summary = loadgen::SummaryToJson(result.summary);
        meta.summary["validity"] = loadgen::ValidityToJson(result.validity);
        db.AddLoadRun(outcome.run_id, meta, result.records);
        if (metrics) {
          metrics->AddRequestsDone(system.label, static_cast<int64_t>(result.records.size()));
        }
        say("pair " + std::to_string(pair) + " " + system.label + ": goodput " +
            std::to_string(result.summary.goodput_rps) + " req/s, P99 TTFT " +
            std::to_string(result.summary.ttft.p99_ms) + " ms, P99 TPOT " +
            std::to_string(result.summary.tpot.p99_ms) + " ms, " +
            std::to_string(result.summary.errored) + " errors" +
            (result.validity.valid ? "" : ", INVALID: " + meta.invalid_reason));
        // After storing it: the cut load run, with a record per scheduled request, is evidence.
        ThrowIfStopped();
        RequireServersAlive(systems, "load pair " + std::to_string(pair) + " (" + system.label +
                                         ")");
      }
    }

    // 4. Ledgers, as each server reports them after the work.
    std::vector<history::Ledger> ledgers;
    for (System& system : systems) {
      try {
        checks::LedgerSnapshot snapshot = checks::ScrapeLedgers(system.url);
        for (std::string_view name : checks::kLedgerSeries) {
          if (snapshot.values.empty()) break;
          ledgers.push_back({system.label, std::string(name), snapshot.Total(name)});
        }
      } catch (const std::exception& e) {
        say(system.label + ": ledgers not read: " + e.what());
      }
    }
    db.AddLedgers(outcome.run_id, ledgers);

    // 5. Gates, from the stored rows (what regate does), then the verdict.
    phase("gates");
    outcome.gates = DecideFromRows(db, outcome.run_id, policy);
    if (metrics) {
      for (const auto& g : outcome.gates) {
        const gates::GateStatus st = g.status;
        metrics->SetGateResult(g.gate,
                               st == gates::GateStatus::kPass   ? "pass"
                               : st == gates::GateStatus::kFail ? "fail"
                                                                : "inconclusive",
                               g.observed, g.threshold);
      }
    }
    std::vector<history::GateResult> rows;
    for (const auto& g : outcome.gates) rows.push_back(ToHistoryGate(g));
    db.AddGateResults(outcome.run_id, rows);
    outcome.verdict = gates::Decide(outcome.gates);
    outcome.exit_code = gates::ExitCode(outcome.verdict);
    for (System& system : systems) {
      if (system.process) system.process->Stop();
    }
    db.FinishRun(outcome.run_id, history::RunStatus::kComplete, gates::ToString(outcome.verdict),
                 outcome.exit_code);
  } catch (const std::exception& e) {
    outcome.exit_code = 3;
    outcome.error = secrets::RedactText(e.what());
    for (System& system : systems) {
      if (system.process) system.process->Stop(std::chrono::seconds(5));
    }
    // The history keeps one line (a start-up failure carries the server's output after it).
    std::string reason = outcome.error.substr(0, outcome.error.find('\n'));
    if (reason.size() > 500) reason = reason.substr(0, 497) + "...";
    db.FinishRun(outcome.run_id, history::RunStatus::kInterrupted, std::nullopt, 3, reason);
    say("run " + std::to_string(outcome.run_id) + " could not complete: " + outcome.error);
  }
  phase("report");
  auto [json_path, html_path] = WriteReports(db, outcome.run_id, options.out_dir);
  outcome.report_json = json_path;
  outcome.report_html = html_path;
  if (metrics) {
    if (outcome.exit_code == 3) {
      metrics->SetPhase("failed");
    } else {
      metrics->SetVerdict(outcome.verdict == gates::Verdict::kGo     ? "go"
                          : outcome.verdict == gates::Verdict::kNoGo ? "no_go"
                                                                     : "inconclusive");
      metrics->SetPhase("done");
    }
  }
  return outcome;
}

nlohmann::json BuildReportJson(history::HistoryDb& db, int64_t run_id) {
  history::RunRow run = db.GetRun(run_id);
  nlohmann::json report;
  report["kvgate_report_version"] = 1;
  report["generated_at"] = NowIso();
  report["run"] = history::ToJson(run);
  std::optional<policy::Policy> policy;
  try {
    policy = policy::ParsePolicy(run.info.policy_text, "run " + std::to_string(run_id));
    report["run"]["policy_name"] = policy->name;
  } catch (const std::exception& e) {
    report["run"]["policy_error"] = e.what();
  }
  report["verdict"] = run.verdict ? nlohmann::json(*run.verdict) : nlohmann::json(nullptr);
  report["exit_code"] = run.exit_code ? nlohmann::json(*run.exit_code) : nlohmann::json(nullptr);
  report["gates"] = nlohmann::json::array();
  std::optional<gates::GateResult> goodput, qa;
  for (const auto& row : db.GateResults(run_id)) {
    gates::GateResult g = FromHistoryGate(row);
    report["gates"].push_back(gates::ToJson(g));
    if (g.gate == "goodput") goodput = g;
    if (g.gate == "qa_f1") qa = g;
  }

  // Quality: passkey tallies and per-subset F1 per label.
  std::map<std::string, std::pair<int, int>> passkey;  // label -> (correct, items)
  std::map<std::string, std::map<std::string, std::pair<double, int>>> f1;  // subset -> label -> sum, n
  const std::vector<history::QualityItem> quality_items = db.QualityItems(run_id);
  for (const auto& item : quality_items) {
    if (item.check == "passkey") {
      auto& tally = passkey[item.label];
      tally.first += item.correct.value_or(false);
      tally.second += 1;
    } else if (item.check == "qa") {
      std::vector<std::string> names = SubsetsOf(item);
      names.insert(names.begin(), "all");
      for (const auto& name : names) {
        auto& cell = f1[name][item.label];
        cell.first += item.score;
        cell.second += 1;
      }
    }
  }
  nlohmann::json quality;
  for (const auto& [label, tally] : passkey) {
    quality["passkey"][label] = {{"correct", tally.first}, {"items", tally.second}};
  }
  quality["qa"]["subsets"] = nlohmann::json::array();
  for (const auto& [subset, by_label] : f1) {
    nlohmann::json entry = {{"subset", subset}};
    for (const auto& [label, cell] : by_label) {
      entry[label + "_f1"] = cell.second ? cell.first / cell.second : 0.0;
    }
    if (qa) {
      for (const auto& s : qa->details.value("subsets", nlohmann::json::array())) {
        if (s.value("subset", "") == subset) entry["drop"] = s["drop"];
      }
    }
    quality["qa"]["subsets"].push_back(entry);
  }
  quality["disagreements"] = QualityDisagreements(quality_items);
  report["quality"] = quality;

  // Load: per-pair summaries (recomputed from records) and the latency samples for the CDFs.
  nlohmann::json load;
  load["pairs"] = nlohmann::json::array();
  std::map<int, nlohmann::json> pairs;
  loadgen::Slo slo = policy ? ToLoadSlo(policy->slo) : loadgen::Slo{};
  std::map<std::string, std::vector<double>> ttft, tpot;
  for (const auto& load_run : db.LoadRuns(run_id)) {
    std::vector<loadgen::RequestRecord> records = db.LoadRecords(load_run.id);
    loadgen::Summary summary =
        loadgen::Summarize(records, slo, loadgen::MeasuredDurationSeconds(records));
    const std::string& label = load_run.meta.label;
    for (const auto& r : records) {
      if (r.warmup) continue;
      if (auto t = r.TtftSeconds(); t && r.ok()) ttft[label].push_back(*t);
      if (auto t = r.TpotSeconds()) tpot[label].push_back(*t);
    }
    if (!load_run.meta.pair_index) continue;
    nlohmann::json& pair = pairs[*load_run.meta.pair_index];
    pair["pair_index"] = *load_run.meta.pair_index;
    pair[label] = {{"goodput_rps", summary.goodput_rps},
                   {"p99_ttft_s", summary.ttft.p99_ms / 1000},
                   {"p99_tpot_s", summary.tpot.p99_ms / 1000},
                   {"requests", summary.requests},
                   {"errored", summary.errored},
                   {"valid", load_run.meta.valid},
                   {"invalid_reason", load_run.meta.invalid_reason}};
  }
  for (auto& [index, pair] : pairs) load["pairs"].push_back(pair);
  if (goodput && goodput->interval) {
    load["goodput_ratio"] = {{"estimate", goodput->interval->estimate},
                             {"lo", goodput->interval->lo},
                             {"hi", goodput->interval->hi}};
  }
  // At most 2000 evenly spaced order statistics per curve keep the report small.
  auto thin = [](std::vector<double> xs) {
    std::sort(xs.begin(), xs.end());
    if (xs.size() <= 2000) return xs;
    std::vector<double> out;
    for (size_t i = 0; i < 2000; ++i) out.push_back(xs[i * (xs.size() - 1) / 1999]);
    return out;
  };
  for (auto& [label, xs] : ttft) load["cdf"][label]["ttft_s"] = thin(xs);
  for (auto& [label, xs] : tpot) load["cdf"][label]["tpot_s"] = thin(xs);
  report["load"] = load;

  nlohmann::json ledgers = nlohmann::json::object();
  for (const auto& ledger : db.Ledgers(run_id)) ledgers[ledger.label][ledger.name] = ledger.value;
  report["ledgers"] = ledgers;
  return report;
}

std::pair<std::filesystem::path, std::filesystem::path> WriteReports(
    history::HistoryDb& db, int64_t run_id, const std::filesystem::path& out_dir) {
  std::filesystem::create_directories(out_dir);
  nlohmann::json report = BuildReportJson(db, run_id);
  std::filesystem::path json_path = out_dir / "report.json";
  std::filesystem::path html_path = out_dir / "report.html";
  // Write to a temporary name and rename, so a reader never sees half a report.
  for (auto [path, text] : {std::pair{json_path, report.dump(2, ' ', false,
                                                            nlohmann::json::error_handler_t::replace)},
                            std::pair{html_path, report::RenderHtml(report)}}) {
    std::filesystem::path tmp = path;
    tmp += ".tmp";
    std::ofstream(tmp, std::ios::binary | std::ios::trunc) << text;
    std::filesystem::rename(tmp, path);
  }
  return {json_path, html_path};
}

}  // namespace kvgate::suite
