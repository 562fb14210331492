// Throughput of storing and reading back load records: a `kvgate run` of R pairs × N requests
// writes 2·R·N records, so this bounds the history's share of a run's wall time.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kvgate/history/history_db.h"

namespace kvgate::history {
namespace {

// 1000 requests of 128 output tokens, ~21 ms apart, with irregular gaps like real streams.
std::vector<loadgen::RequestRecord> Records() {
  std::vector<loadgen::RequestRecord> records(1000);
  for (size_t i = 0; i < records.size(); ++i) {
    auto& r = records[i];
    r.index = static_cast<int64_t>(i);
    r.scheduled_ns = static_cast<int64_t>(i) * 100'000'000;
    r.issued_ns = r.scheduled_ns + 1'000;
    r.sent_ns = r.scheduled_ns + 5'000;
    r.first_token_ns = r.scheduled_ns + 80'000'000;
    for (int64_t c = 0; c < 128; ++c) {
      r.chunk_ns.push_back(r.first_token_ns + c * 21'000'000 + (c * 7919) % 1'000'000);
    }
    r.end_ns = r.chunk_ns.back();
    r.prompt_tokens = 1000;
    r.completion_tokens = 128;
    r.max_tokens = 128;
    r.http_status = 200;
  }
  return records;
}

std::filesystem::path BenchFile() {
  auto path = std::filesystem::temp_directory_path() /
              ("kvgate_history_bench_" + std::to_string(getpid()) + ".db");
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path.string() + suffix);
  return path;
}

void BM_AddLoadRun(benchmark::State& state) {
  const auto path = BenchFile();
  HistoryDb db = HistoryDb::Open(path);
  const int64_t run = db.BeginRun(RunInfo{});
  const auto records = Records();
  LoadRunMeta meta;
  meta.label = "candidate";
  meta.arrival = "poisson";
  for (auto _ : state) benchmark::DoNotOptimize(db.AddLoadRun(run, meta, records));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(records.size()));
  std::filesystem::remove(path);
}
BENCHMARK(BM_AddLoadRun)->Unit(benchmark::kMillisecond);

void BM_LoadRecords(benchmark::State& state) {
  const auto path = BenchFile();
  HistoryDb db = HistoryDb::Open(path);
  const int64_t run = db.BeginRun(RunInfo{});
  const auto records = Records();
  LoadRunMeta meta;
  meta.label = "candidate";
  meta.arrival = "poisson";
  const int64_t load_run = db.AddLoadRun(run, meta, records);
  for (auto _ : state) benchmark::DoNotOptimize(db.LoadRecords(load_run));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(records.size()));
  std::filesystem::remove(path);
}
BENCHMARK(BM_LoadRecords)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvgate::history
