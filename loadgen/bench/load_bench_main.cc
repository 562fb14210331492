// kvgate_loadgen_load_bench: one load run through the library (the same RunLoad the `kvgate load`
// subcommand calls) against a local endpoint, printed as one JSON line for run_bench.sh.
//
//   kvgate_loadgen_load_bench --url http://127.0.0.1:PORT (--rate R | --concurrency C)
//       [--duration S] [--spin-us N] [--input-len N] [--output-len N] [--realtime-priority P]
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kvgate/loadgen/run_load.h"

int main(int argc, char** argv) {
  CLI::App app{"One kvgate load run, printed as a JSON line"};
  std::string url;
  double rate = 0;
  int concurrency = 0;
  double duration = 5;
  int spin_us = kvgate::loadgen::LoadSettings{}.spin_us;
  int input_len = 16;
  int output_len = 1;
  int realtime_priority = 0;
  app.add_option("--url", url)->required();
  auto* rate_opt = app.add_option("--rate", rate);
  auto* conc_opt = app.add_option("--concurrency", concurrency);
  app.add_option("--duration", duration);
  app.add_option("--spin-us", spin_us);
  app.add_option("--input-len", input_len);
  app.add_option("--output-len", output_len);
  app.add_option("--realtime-priority", realtime_priority);
  CLI11_PARSE(app, argc, argv);
  if ((rate_opt->count() > 0) == (conc_opt->count() > 0)) {
    std::cerr << "give exactly one of --rate and --concurrency\n";
    return 2;
  }
  kvgate::loadgen::LoadSettings s;
  if (conc_opt->count() > 0) {
    s.mode = kvgate::loadgen::LoadMode::kClosedLoop;
    s.concurrency = concurrency;
  } else {
    s.rate_rps = rate;
  }
  s.duration_s = duration;
  s.spin_us = spin_us;
  s.realtime_priority = realtime_priority;
  s.request_timeout_s = 30;
  s.workload.input.mean = input_len;
  s.workload.output.mean = output_len;
  s.workload.distinct_prompts = 64;
  auto result = kvgate::loadgen::RunLoad(s, {url, "fixture-model"});
  const auto& v = result.validity;
  nlohmann::json line = {
      {"mode", s.mode == kvgate::loadgen::LoadMode::kOpenLoop ? "open" : "closed"},
      {"offered_rps", s.mode == kvgate::loadgen::LoadMode::kOpenLoop ? rate : 0.0},
      {"requests", result.summary.requests},
      {"completed", result.summary.completed},
      {"errored", result.summary.errored},
      {"request_throughput_rps", result.summary.request_throughput_rps},
      {"scheduled_rps", v.scheduled_rate_rps ? *v.scheduled_rate_rps : 0.0},
      {"achieved_rps", v.achieved_rate_rps ? *v.achieved_rate_rps : 0.0},
      {"achieved_fraction", v.achieved_fraction ? *v.achieved_fraction : 0.0},
      {"send_lag_p50_ms", v.send_lag.p50_ms},
      {"send_lag_p99_ms", v.send_lag.p99_ms},
      {"send_lag_max_ms", v.send_lag.max_ms},
      {"valid", v.valid},
      {"result_line", v.ResultLine()}};
  std::cout << line.dump() << std::endl;
  return 0;
}
