// `kvgate bench attention`: issue 8's kernel benchmark. Times the dense, FP8 and ReadKV decode
// kernels of readkv/cuda (ReadKV: the tile reader) over a (tokens x batch) grid with
// a cold L2, next to the device's streaming-read bandwidth and torch's
// scaled_dot_product_attention on the same dense inputs (readkv/cuda/bench/README.md explains
// every column). Prints a table, and JSON with --json.
// (`kvgate bench decode`, the runtime's whole decode step, is in bench_decode_command.cc.)
// Exit statuses: 0 done; 1 some kernel produced NaN/Inf; 2 bad arguments (the message names the
// flag); 3 no CUDA device ("no CUDA device: <reason>") or a CUDA failure.
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvgate/command.h"
#include "kvgate/version.h"
#include "readkv/codec/errors.h"
#include "readkv/cuda/attention_bench.h"
#include "readkv/cuda/device.h"
#include "readkv/model/sdpa_bench.h"

namespace kvgate {

void AddBenchDecode(CLI::App& bench, CommandContext& context);  // bench_decode_command.cc

namespace {

using readkv::codec::InvalidArgument;

struct BenchArgs {
  std::string device = "cuda";
  std::string tokens = "8192,32768,131072";
  std::string batch = "1,16";
  int heads_q = 32;
  int heads_kv = 8;
  int head_dim = 128;
  std::string kv = "dense,fp8,tile:8:4,tile:8:2";
  int iters = 50;
  double min_total_ms = 200.0;
  int chunk_tokens = 0;
  bool ragged = false;
  int outlier_cap = 0;
  int value_window = 0;
  std::string one_pass = "auto";
  std::string split_cluster = "auto";
  bool no_anchor = false;
  uint64_t seed = 1;
  std::string json;
};

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// The process's own argv as the kernel recorded it, space-joined.
std::string CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string line, arg;
  while (std::getline(in, arg, '\0')) line += (line.empty() ? "" : " ") + arg;
  return line;
}

readkv::cuda::BenchConfig ToConfig(const BenchArgs& a) {
  if (a.device != "cuda") {
    throw InvalidArgument("--device", "only 'cuda' is supported, got '" + a.device + "'");
  }
  readkv::cuda::BenchConfig config;
  config.tokens = readkv::cuda::ParsePositiveList("--tokens", a.tokens);
  config.batches = readkv::cuda::ParsePositiveList("--batch", a.batch);
  config.heads_q = a.heads_q;
  config.heads_kv = a.heads_kv;
  config.head_dim = a.head_dim;
  config.kv = readkv::cuda::ParseKvSpecs(a.kv);
  config.iters = a.iters;
  if (!(a.min_total_ms >= 0 && a.min_total_ms <= 60000)) {
    throw InvalidArgument("--min-total-ms", "must be in [0, 60000]");
  }
  config.min_total_ms = a.min_total_ms;
  config.chunk_tokens = a.chunk_tokens;
  config.ragged = a.ragged;
  config.outlier_cap = a.outlier_cap;
  config.value_window = a.value_window;
  if (!readkv::cuda::ParseOnePassMode(a.one_pass, &config.one_pass)) {
    throw InvalidArgument("--one-pass", "must be auto, on or off, got '" + a.one_pass + "'");
  }
  if (!readkv::cuda::ParseSplitPlan(a.split_cluster, &config.split)) {
    throw InvalidArgument("--split-cluster",
                          "must be auto, off, 1, 2, 4 or 8, got '" + a.split_cluster + "'");
  }
  config.seed = a.seed;
  config.Validate();
  return config;
}

void RunBenchAttention(const BenchArgs& args, CommandContext& context) {
  const readkv::cuda::BenchConfig config = ToConfig(args);
  const readkv::cuda::DeviceReport devices = readkv::cuda::QueryDevices();
  if (devices.device_count < 1) {
    std::cerr << "no CUDA device: " << devices.reason << "\n";
    context.exit_code = 3;
    return;
  }

  readkv::cuda::Anchor anchor;
  std::string anchor_note;
  const bool use_anchor = !args.no_anchor && readkv::model::SdpaAnchorAvailable(&anchor_note);
  if (args.no_anchor) anchor_note = "disabled by --no-anchor";
  if (use_anchor) {
    anchor.name = readkv::model::SdpaAnchorName();
    anchor.enqueue = [](const readkv::cuda::AnchorInputs& in) {
      readkv::model::SdpaDecodeProblem p;
      p.batch = in.batch;
      p.heads_q = in.heads_q;
      p.heads_kv = in.heads_kv;
      p.head_dim = in.head_dim;
      p.tokens = in.tokens;
      readkv::model::SdpaDecode(p, in.queries, in.keys, in.values, in.out);
    };
  }

  readkv::cuda::BenchReport report;
  try {
    report = readkv::cuda::RunAttentionBench(config, use_anchor ? &anchor : nullptr, &std::cerr);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    context.exit_code = 3;
    return;
  }
  if (report.anchor_note.empty()) report.anchor_note = anchor_note;

  const bool json_to_stdout = args.json == "-";
  PrintBenchTable(report, json_to_stdout ? std::cerr : std::cout);
  if (!args.json.empty()) {
    const readkv::cuda::BenchRunInfo info{kVersion, kGitCommit, UtcNow(), CommandLine()};
    const std::string text = readkv::cuda::BenchReportJson(config, report, info);
    if (json_to_stdout) {
      std::cout << text << "\n";
    } else {
      std::ofstream out(args.json);
      out << text << "\n";
      if (!out) {
        std::cerr << "error: cannot write --json file '" << args.json << "'\n";
        context.exit_code = 3;
        return;
      }
    }
  }
  bool all_finite = true;
  for (const auto& row : report.rows) all_finite = all_finite && row.finite;
  if (!all_finite) std::cerr << "error: some kernel output held NaN/Inf (marked !NaN)\n";
  context.exit_code = all_finite ? 0 : 1;
}

void AddBenchCommand(CLI::App& app, CommandContext& context) {
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks: the decode-attention kernels (CUDA) and the runtime's decode step");
  bench->require_subcommand(1);
  auto* cmd = bench->add_subcommand(
      "attention",
      "Decode-attention kernels (dense, FP8, ReadKV: the tile reader) with a cold "
      "L2, their ledgers, streaming bandwidth and torch SDPA as the anchor");
  auto args = std::make_shared<BenchArgs>();
  cmd->add_option("--device", args->device, "Device kind (cuda)")->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "Tokens per sequence, comma-separated")
      ->capture_default_str();
  cmd->add_option("--batch", args->batch, "Batch sizes, comma-separated")->capture_default_str();
  cmd->add_option("--heads-q", args->heads_q, "Query heads")->capture_default_str();
  cmd->add_option("--heads-kv", args->heads_kv, "KV heads (group 1, 2, 4 or 8)")
      ->capture_default_str();
  cmd->add_option("--head-dim", args->head_dim, "Head dim (64 or 128)")->capture_default_str();
  cmd->add_option("--kv", args->kv,
                  "Backends: dense, fp8, tile:W:R[:RK:RV] (the tile reader), tile-kbytes:8:R:8:RV "
                  "(the tile reader on byte keys), comma-separated")
      ->capture_default_str();
  cmd->add_option("--iters", args->iters, "Timed launches per row (>= 20)")->capture_default_str();
  cmd->add_option("--min-total-ms", args->min_total_ms,
                  "Keep launching until the row's kernel time reaches this")
      ->capture_default_str();
  cmd->add_option("--chunk-tokens", args->chunk_tokens,
                  "Tile rows: tokens per thread block (512-2048 by 512; 0: the automatic choice "
                  "kvgate serve uses)")
      ->capture_default_str();
  cmd->add_flag("--ragged", args->ragged, "Sequence lengths uniform in [T/2, T]");
  cmd->add_option("--outlier-cap", args->outlier_cap,
                  "Tile rows: outlier lists of this many entries per token and KV head, K and "
                  "V (0: none)")
      ->capture_default_str();
  cmd->add_option("--value-window", args->value_window,
                  "Tile rows: Value budgets per window of this many tokens, the rows' chunk "
                  "(512-2048 by 512; 0: the row's)")
      ->capture_default_str();
  // Given alone it means on (CLI11: an optional value, its default_str taken when absent).
  cmd->add_option("--one-pass", args->one_pass,
                  "Byte-key tile rows with --value-window: one launch a call (TileWindowPass, a "
                  "row's windows in one cluster of at most 16). auto (when absent): kvgate "
                  "serve's choice, one pass when the device holds every row's cluster at once; "
                  "on (also --one-pass alone); off: the two launches")
      ->expected(0, 1)
      ->default_str("on");
  cmd->add_option("--split-cluster", args->split_cluster,
                  "Dense and FP8 rows' schedule: auto, off (persistent blocks and a merge), or "
                  "a cluster of 1, 2, 4 or 8 blocks per head")
      ->capture_default_str();
  cmd->add_flag("--no-anchor", args->no_anchor, "Skip torch's scaled_dot_product_attention");
  cmd->add_option("--seed", args->seed, "Seed of the data, queries and page permutation")
      ->capture_default_str();
  cmd->add_option("--json", args->json, "Write JSON to FILE, or '-' for stdout");
  cmd->callback([args, &context] { RunBenchAttention(*args, context); });
  AddBenchDecode(*bench, context);
}

KVGATE_REGISTER_COMMAND(800, AddBenchCommand);

}  // namespace
}  // namespace kvgate
