// `kvgate load`: run the load generator (kvgate::loadgen) against an OpenAI-compatible server —
// one open- or closed-loop run, a sweep of rates, or an SLO capacity search — print the summary
// (ending with "Result is : VALID/INVALID"), and optionally write JSON and the run history.
//
// Exit status: 0 every run VALID; 1 some run INVALID (the generator could not hold its
// schedule, so its numbers describe the client, not the server, or SIGINT/SIGTERM stopped it:
// the run then ends within ~50 ms, its cut records printed and stored); 2 bad arguments; 3 the
// target could not be used at all.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvgate/command.h"
#include "kvgate/connection_options.h"
#include "kvgate/history/history_db.h"
#include "kvgate/loadgen/report.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/settings.h"
#include "kvgate/suite/stop_signals.h"
#include "kvgate/version.h"

namespace kvgate {
namespace {

using loadgen::LoadResult;
using loadgen::LoadSettings;

struct LoadOptions {
  std::string url;
  std::string model;
  ConnectionArgs connection;
  std::optional<double> rate;
  std::optional<int> concurrency;
  std::vector<double> rates;
  bool find_capacity = false;
  std::string arrival = "poisson";
  double burstiness = 1.0;
  int64_t requests = 0;
  double duration_s = 0;
  int64_t warmup = 0;
  double timeout_s = 300;
  uint64_t seed = 0;
  std::string workload = "synthetic";
  std::string prompts;
  std::string dataset;
  int min_tokens = 0;
  std::string trace;
  double time_scale = 1.0;
  int trace_block = 512;
  int input_len = 128;
  std::string input_unit = "words";
  std::string input_dist = "constant";
  double input_spread = 0;
  int output_len = 128;
  std::string output_dist = "constant";
  double output_spread = 0;
  std::vector<int> passkey_lengths = {1024};
  std::vector<double> passkey_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t distinct_prompts = 0;
  int multi_turn = 1;
  int think_time_ms = 0;
  int max_context_tokens = 0;
  std::string slo;
  double attainment = 0.9;
  double rate_min = 1.0;
  double rate_max = 1000.0;
  double tolerance = 0.05;
  int max_probes = 12;
  double max_send_lag_p99_ms = 1.0;
  double max_send_lag_share = 0.02;
  double min_achieved = 0.99;
  int max_connections = 8192;
  int spin_us = 100;
  int realtime_priority = 0;
  std::string extra_body;
  bool no_stream = false;
  std::string json_path;
  std::string db_path;
  bool quiet = false;
};

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
class ProgressBar {
 public:
  ProgressBar(const loadgen::LiveCounters& counters, bool enabled) : counters_(counters) {
    if (!enabled) return;
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!stop_) {
        Draw();
        wake_.wait_for(lock, std::chrono::milliseconds(200));
      }
      std::fprintf(stderr, "\r%80s\r", "");
    });
  }
  ~ProgressBar() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void Draw() {
    int64_t total = counters_.total.load(), done = counters_.finished.load();
    int64_t sent = counters_.sent.load(), errors = counters_.errored.load();
    constexpr int kWidth = 30;
    int filled = total > 0 ? static_cast<int>(kWidth * std::min<int64_t>(done, total) / total) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r[%s] %lld/%lld done, %lld sent, %lld errors ", bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total),
                 static_cast<long long>(sent), static_cast<long long>(errors));
    std::fflush(stderr);
  }

  const loadgen::LiveCounters& counters_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

LoadSettings ToSettings(const LoadOptions& o) {
  LoadSettings s;
  int modes = (o.rate ? 1 : 0) + (o.concurrency ? 1 : 0) + (o.rates.empty() ? 0 : 1) +
              (o.find_capacity ? 1 : 0);
  if (modes != 1) {
    throw UsageError(
        "choose exactly one load: --rate R (open loop), --concurrency C (closed loop), "
        "--rates R1,R2,... or --find-capacity");
  }
  if (o.concurrency) {
    s.mode = loadgen::LoadMode::kClosedLoop;
    s.concurrency = *o.concurrency;
  } else {
    s.mode = loadgen::LoadMode::kOpenLoop;
    s.rate_rps = o.rate ? *o.rate : o.rates.empty() ? o.rate_min : o.rates.front();
  }
  s.arrival = loadgen::ParseArrival(o.arrival);
  s.burstiness = o.burstiness;
  s.requests = o.requests;
  s.duration_s = o.duration_s;
  s.warmup_requests = o.warmup;
  s.request_timeout_s = o.timeout_s;
  s.seed = o.seed;
  s.workload.kind =
      o.prompts.empty() ? loadgen::ParseWorkload(o.workload) : loadgen::WorkloadKind::kPromptFile;
  if (!o.prompts.empty() && o.workload != "synthetic" && o.workload != "file") {
    throw UsageError("--prompts reads a prompt file; it cannot be combined with --workload " +
                     o.workload);
  }
  s.workload.prompt_file = o.prompts;
  s.workload.dataset = o.dataset;
  s.workload.trace = o.trace;
  s.workload.time_scale = o.time_scale;
  s.workload.trace_block_tokens = o.trace_block;
  if (!o.trace.empty() && s.workload.kind != loadgen::WorkloadKind::kTrace) {
    throw UsageError("--trace is the Mooncake trace of --workload trace");
  }
  if (!o.dataset.empty() && s.workload.kind != loadgen::WorkloadKind::kShareGpt) {
    throw UsageError("--dataset is the ShareGPT file of --workload sharegpt");
  }
  s.workload.input = {loadgen::ParseLengthDistribution(o.input_dist, "input-dist"), o.input_len,
                      o.input_spread, 1 << 20};
  s.workload.output = {loadgen::ParseLengthDistribution(o.output_dist, "output-dist"), o.output_len,
                       o.output_spread, 1 << 20};
  s.workload.input_unit = loadgen::ParseInputUnit(o.input_unit);
  s.workload.passkey_lengths = o.passkey_lengths;
  s.workload.passkey_depths = o.passkey_depths;
  s.workload.distinct_prompts = o.distinct_prompts;
  s.workload.multi_turn = o.multi_turn;
  s.workload.think_time_ms = o.think_time_ms;
  s.workload.max_context_tokens = o.max_context_tokens;
  s.slo = loadgen::ParseSlo(o.slo);
  s.validity.max_send_lag_p99_ms = o.max_send_lag_p99_ms;
  s.validity.max_send_lag_share = o.max_send_lag_share;
  s.validity.min_achieved_rate_fraction = o.min_achieved;
  s.max_connections = o.max_connections;
  s.spin_us = o.spin_us;
  s.realtime_priority = o.realtime_priority;
  if (!o.extra_body.empty()) {
    s.extra_body = nlohmann::json::parse(o.extra_body, nullptr, /*allow_exceptions=*/false);
    if (s.extra_body.is_discarded() || !s.extra_body.is_object()) {
      throw UsageError("--extra-body: expected a JSON object, got '" + o.extra_body + "'");
    }
  }
  s.stream = !o.no_stream;
  s.min_tokens = o.min_tokens;
  loadgen::ValidateSettings(s);
  return s;
}

// Records the runs in the SQLite history: one history run of kind "load" holding every load run.
class HistoryWriter {
 public:
  HistoryWriter(const std::string& path, const std::string& command_line) {
    if (path.empty()) return;
    db_.emplace(history::HistoryDb::Open(path));
    history::RunInfo info;
    info.kind = "load";
    info.git_commit = kGitCommit;
    info.machine = history::DescribeMachine();
    info.notes = command_line;
    run_id_ = db_->BeginRun(info);
  }
  ~HistoryWriter() {
    // Still running at destruction: the command failed part-way.
    if (db_ && !finished_) {
      try {
        db_->FinishRun(run_id_, history::RunStatus::kInterrupted, std::nullopt, std::nullopt);
      } catch (const std::exception& e) {
        std::cerr << "warning: could not mark history run " << run_id_
                  << " interrupted: " << e.what() << "\n";
      }
    }
  }
  HistoryWriter(const HistoryWriter&) = delete;
  HistoryWriter& operator=(const HistoryWriter&) = delete;

  void Add(const LoadResult& result, const std::string& label) {
    if (!db_) return;
    db_->AddLoadRun(run_id_, history::LoadRunMetaOf(result, label), result.records);
  }

  void Finish(int exit_code) {
    if (!db_) return;
    db_->FinishRun(run_id_, history::RunStatus::kComplete, std::nullopt, exit_code);
    finished_ = true;
    std::cerr << "history: stored as run " << run_id_ << " in " << db_->path().string() << "\n";
  }

 private:
  std::optional<history::HistoryDb> db_;
  int64_t run_id_ = 0;
  bool finished_ = false;
};

void WriteJson(const std::string& path, const nlohmann::json& json) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write --json file '" + path + "'");
  out << json.dump(1) << "\n";
  if (!out) throw std::runtime_error("error writing --json file '" + path + "'");
}

std::string RateLabel(double rate) {
  std::ostringstream out;
  out << "rate=" << rate;
  return out.str();
}

int RunCommand(const LoadOptions& o, const std::string& command_line) {
  LoadSettings settings;
  try {
    settings = ToSettings(o);
  } catch (const loadgen::SettingsError& e) {
    throw UsageError("--" + e.field() + ": " + std::string(e.what()).substr(e.field().size() + 2));
  }
  loadgen::Target target{o.url, o.model, ClientConfigFrom(o.connection),
                         EndpointFrom(o.connection)};
  loadgen::LiveCounters counters;
  suite::StopSignals signals;
  const std::atomic<bool>* stop = &suite::StopSignals::Flag();
  HistoryWriter history(o.db_path, command_line);
  int exit_code = 0;
  try {
    if (o.find_capacity) {
      loadgen::CapacitySearch search;
      search.slo = settings.slo;
      search.attainment = o.attainment;
      search.rate_min_rps = o.rate_min;
      search.rate_max_rps = o.rate_max;
      search.tolerance = o.tolerance;
      search.max_probes = o.max_probes;
      loadgen::CapacityResult result;
      {
        ProgressBar bar(counters, !o.quiet && isatty(STDERR_FILENO));
        result = loadgen::FindCapacity(settings, target, search, &counters, stop);
      }
      for (const auto& probe : result.probes) history.Add(probe.result, RateLabel(probe.rate_rps));
      if (!o.quiet) {
        for (const auto& probe : result.probes)
          std::cout << loadgen::FormatSummary(probe.result) << "\n";
      }
      std::cout << loadgen::FormatCapacity(result);
      exit_code = result.limited_by_generator || result.stopped ? 1 : 0;
      if (!o.json_path.empty()) WriteJson(o.json_path, loadgen::CapacityToJson(result));
    } else {
      std::vector<LoadResult> results;
      {
        ProgressBar bar(counters, !o.quiet && isatty(STDERR_FILENO));
        if (!o.rates.empty()) {
          results = loadgen::RunRates(settings, target, o.rates, &counters, stop);
        } else {
          results.push_back(loadgen::RunLoad(settings, target, &counters, stop));
        }
      }
      for (const LoadResult& result : results) {
        history.Add(result, o.rates.empty() ? "load" : RateLabel(result.settings.rate_rps));
        std::cout << loadgen::FormatSummary(result);
        if (results.size() > 1) std::cout << "\n";
        if (!result.validity.valid) exit_code = 1;
      }
      if (results.size() > 1) {
        std::cout << "   rate (req/s)   goodput (req/s)   P99 TTFT (ms)   P99 TPOT (ms)   result\n";
        for (const LoadResult& r : results) {
          char line[160];
          std::snprintf(line, sizeof line, "   %12.3f   %15.3f   %13.2f   %13.2f   %s\n",
                        r.settings.rate_rps, r.summary.goodput_rps, r.summary.ttft.p99_ms,
                        r.summary.tpot.p99_ms, r.validity.valid ? "VALID" : "INVALID");
          std::cout << line;
        }
      }
      if (!o.json_path.empty()) {
        if (results.size() == 1) {
          WriteJson(o.json_path, loadgen::LoadResultToJson(results[0]));
        } else {
          nlohmann::json runs = nlohmann::json::array();
          for (const LoadResult& r : results) runs.push_back(loadgen::LoadResultToJson(r));
          WriteJson(o.json_path, {{"runs", std::move(runs)}});
        }
      }
    }
  } catch (const loadgen::SettingsError& e) {
    throw UsageError("--" + e.field() + ": " + std::string(e.what()).substr(e.field().size() + 2));
  }
  history.Finish(exit_code);
  return exit_code;
}

void AddLoadCommand(CLI::App& app, CommandContext& context) {
  auto* cmd = app.add_subcommand(
      "load", "Load-test an OpenAI-compatible server (open/closed loop, rate sweep, capacity)");
  auto o = std::make_shared<LoadOptions>();
  auto rate = std::make_shared<double>(0);
  auto concurrency = std::make_shared<int>(0);
  cmd->add_option("--url", o->url,
                  "Base URL of the server, e.g. http://127.0.0.1:8000 or https://host/v1")
      ->required();
  cmd->add_option("--model", o->model, "Model name (default: first entry of GET /v1/models)");
  AddConnectionOptions(cmd, o->connection);
  auto* rate_opt = cmd->add_option("--rate", *rate, "Open loop: offered requests per second");
  auto* conc_opt =
      cmd->add_option("--concurrency", *concurrency, "Closed loop: requests kept in flight");
  cmd->add_option("--rates", o->rates, "Open-loop sweep: comma-separated offered rates")
      ->delimiter(',');
  cmd->add_flag("--find-capacity", o->find_capacity,
                "Search the highest rate meeting --slo at --attainment");
  cmd->add_option("--arrival", o->arrival, "poisson | gamma | constant (default poisson)");
  cmd->add_option("--burstiness", o->burstiness,
                  "Gamma shape, vLLM's definition: 1 = Poisson, < 1 burstier (default 1)");
  cmd->add_option("--requests", o->requests,
                  "Requests to send, warmup included (default 1000 when --duration is not set)");
  cmd->add_option("--duration", o->duration_s, "Seconds of schedule / of issuing (0 = none)");
  cmd->add_option("--warmup", o->warmup, "First N requests excluded from metrics");
  cmd->add_option("--timeout", o->timeout_s,
                  "Per-request limit in seconds from its scheduled time (default 300)");
  cmd->add_option("--seed", o->seed, "Seed of the schedule and workload (default 0)");
  cmd->add_option("--workload", o->workload,
                  "synthetic | passkey | file | sharegpt | trace (default synthetic; docs/workloads.md)");
  cmd->add_option("--dataset", o->dataset,
                  "sharegpt: ShareGPT JSON; prompt = first human turn, max_tokens = its reply's "
                  "tokens (server /tokenize), pruned as vLLM does");
  cmd->add_option("--trace", o->trace,
                  "trace: Mooncake JSONL {timestamp ms, input_length, output_length, hash_ids}, "
                  "sent at its timestamps; equal hash_ids are equal prompt text");
  cmd->add_option("--time-scale", o->time_scale, "trace: replay this many times faster (default 1)");
  cmd->add_option("--trace-block", o->trace_block,
                  "trace: tokens per hash id block (default 512, Mooncake's)");
  cmd->add_option("--prompts", o->prompts,
                  "JSONL prompt file: {\"prompt\": ..., \"max_tokens\": ...} per line");
  cmd->add_option("--input-len", o->input_len,
                  "Mean prompt length in --input-unit (default 128)");
  cmd->add_option("--input-unit", o->input_unit,
                  "words | tokens: tokens cuts each synthetic prompt to its length through the "
                  "server's POST /tokenize (the summary says whether counts are exact)");
  cmd->add_option("--input-dist", o->input_dist, "constant | uniform | normal | lognormal");
  cmd->add_option("--input-spread", o->input_spread,
                  "uniform: range ratio; normal: sd/mean; lognormal: sigma of log");
  cmd->add_option("--output-len", o->output_len, "Mean max_tokens (default 128)");
  cmd->add_option("--output-dist", o->output_dist, "constant | uniform | normal | lognormal");
  cmd->add_option("--output-spread", o->output_spread, "As --input-spread, for max_tokens");
  cmd->add_option("--passkey-lengths", o->passkey_lengths, "Passkey prompt lengths in words")
      ->delimiter(',');
  cmd->add_option("--passkey-depths", o->passkey_depths, "Needle depths in [0, 1]")->delimiter(',');
  cmd->add_option("--distinct-prompts", o->distinct_prompts,
                  "Reuse K distinct requests cyclically (0 = all distinct)");
  cmd->add_option("--multi-turn", o->multi_turn,
                  "Sessions of N turns: each turn resends the conversation so far (prompts and "
                  "replies) plus a new user message (default 1 = single requests; "
                  "docs/workloads.md)");
  cmd->add_option("--think-time-ms", o->think_time_ms,
                  "Multi-turn: mean pause between a reply and the next turn, drawn uniformly "
                  "from [1, 2x] ms, seeded (default 0)");
  cmd->add_option("--max-context-tokens", o->max_context_tokens,
                  "Multi-turn: end a session before a turn that would pass this many tokens "
                  "(the model's context; default 0 = no limit)");
  cmd->add_option("--slo", o->slo, "SLO for goodput, e.g. ttft_ms=500,tpot_ms=50");
  cmd->add_option("--attainment", o->attainment,
                  "Capacity search: share of requests that must meet the SLO (default 0.9)");
  cmd->add_option("--rate-min", o->rate_min, "Capacity search: lowest rate (default 1)");
  cmd->add_option("--rate-max", o->rate_max, "Capacity search: highest rate (default 1000)");
  cmd->add_option("--tolerance", o->tolerance,
                  "Capacity search: stop when the bracket is this narrow, relative (default 0.05)");
  cmd->add_option("--max-probes", o->max_probes, "Capacity search: most runs (default 12)");
  cmd->add_option("--max-send-lag-p99-ms", o->max_send_lag_p99_ms,
                  "Open loop: INVALID above this P99 send lag, or above --max-send-lag-share of "
                  "the run's P99 TTFT if that is larger (default 1 ms)");
  cmd->add_option("--max-send-lag-share", o->max_send_lag_share,
                  "Open loop: the P99 send lag bound relative to the run's P99 TTFT "
                  "(default 0.02)");
  cmd->add_option("--min-achieved", o->min_achieved,
                  "INVALID below this achieved/scheduled send rate (default 0.99)");
  cmd->add_option("--max-connections", o->max_connections,
                  "Client connection cap; waiting for one counts as send lag (default 8192)");
  cmd->add_option("--spin-us", o->spin_us,
                  "Spin this many µs before each send time for precision (default 100)");
  cmd->add_option("--realtime-priority", o->realtime_priority,
                  "Send from a SCHED_FIFO thread at this priority 1..99 (needs CAP_SYS_NICE); "
                  "keeps a busy shared machine from delaying sends (default 0 = off)");
  cmd->add_option("--extra-body", o->extra_body,
                  "JSON object merged into every request, e.g. '{\"readkv\": {\"read_bits\": 2}}'");
  cmd->add_flag("--no-stream", o->no_stream, "Non-streaming requests (TTFT = E2E)");
  cmd->add_option("--min-tokens", o->min_tokens,
                  "Send vLLM's min_tokens (capped at each max_tokens) and ignore_eos; the "
                  "summary says whether output lengths were exact (default 0 = not sent)");
  cmd->add_option("--json", o->json_path, "Write the summary and every request record here");
  cmd->add_option("--db", o->db_path, "Store the run(s) in this SQLite history (e.g. kvgate.db)");
  cmd->add_flag("--quiet", o->quiet, "No progress bar, no per-probe summaries");
  cmd->callback([cmd, o, rate, concurrency, rate_opt, conc_opt, &context] {
    o->rate = rate_opt->count() > 0 ? std::optional<double>(*rate) : std::nullopt;
    o->concurrency = conc_opt->count() > 0 ? std::optional<int>(*concurrency) : std::nullopt;
    // The options as given, for the history's notes: no key, header names only.
    context.exit_code = RunCommand(*o, GivenOptions(cmd, "kvgate load"));
  });
}

KVGATE_REGISTER_COMMAND(200, AddLoadCommand);

}  // namespace
}  // namespace kvgate
