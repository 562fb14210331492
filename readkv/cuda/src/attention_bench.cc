// `kvgate bench attention`'s GPU run (attention_bench.h): per point, the paged caches and the tile
// reader's codec tables built on the device, cold-L2 timing of every kernel and the torch anchor,
// the streaming-read bandwidth and the ledgers. The input sets are in attention_bench_sets.cc, the
// configuration and the report in attention_bench_config.cc and attention_bench_report.cc.
#include "readkv/cuda/attention_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "readkv/codec/errors.h"
#include "readkv/cuda/codec_tables.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_attention.h"

#if defined(KVGATE_HAVE_CUDA)
#include <cuda_runtime.h>

#include "kvgate/stats/random.h"
#include "attention_bench_sets.h"
#include "bench_kernels.h"
#endif

namespace readkv::cuda {

using codec::InvalidArgument;
using codec::KvBackend;

// ---- The GPU run -----------------------------------------------------------------------------

#if !defined(KVGATE_HAVE_CUDA)

BenchReport RunAttentionBench(const BenchConfig& config, const Anchor*, std::ostream*) {
  config.Validate();
  throw std::runtime_error("no CUDA device: " + QueryDevices().reason);
}

#else

namespace {

using bench::AnchorSet;
using bench::Check;
using bench::DenseSet;
using bench::DeviceBuffer;
using bench::Download;
using bench::Fp8Set;
using bench::kMiB;
using bench::PointGeometry;
using bench::TileSet;

constexpr int64_t kAssumedL2Bytes = 60 * kMiB;  // issue 8: rotate past a 60 MiB L2
constexpr int kMaxLaunches = 2000;
constexpr int64_t kSpinNs = 200000;   // > the host's enqueue time of one (torch) call

// Times `launch(copy)` over rotating copies: a spin, then start event, launch, stop event.
// *next_copy (when given): the copy the rotation would use next, the least recently used.
TimingStats TimeLaunches(const std::function<void(int)>& launch, int copies,
                         const BenchConfig& config, const std::string& what,
                         int* next_copy = nullptr) {
  cudaEvent_t start = nullptr, stop = nullptr;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  struct EventGuard {
    cudaEvent_t a, b;
    ~EventGuard() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } guard{start, stop};
  const int warmup = std::min(copies, 2);
  for (int k = 0; k < warmup; ++k) launch(k);
  Check(cudaDeviceSynchronize(), what + " (warm-up)");
  std::vector<double> times;
  double total_ms = 0;
  int copy = warmup % copies;
  while ((static_cast<int>(times.size()) < config.iters || total_ms < config.min_total_ms) &&
         static_cast<int>(times.size()) < std::max(kMaxLaunches, config.iters)) {
    Check(bench::Spin(kSpinNs, 0), "spin");
    Check(cudaEventRecord(start, 0), "cudaEventRecord");
    launch(copy);
    Check(cudaEventRecord(stop, 0), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), what);
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(1000.0 * ms);
    total_ms += ms;
    copy = (copy + 1) % copies;
  }
  if (next_copy != nullptr) *next_copy = copy;
  return SummariseTimes(std::move(times));
}

bool AllFinite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

double RelativeL2(const std::vector<float>& x, const std::vector<float>& reference) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double diff = static_cast<double>(x[i]) - reference[i];
    num += diff * diff;
    den += static_cast<double>(reference[i]) * reference[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct DeviceInfo {
  std::string name;
  int sms = 1;
  int64_t l2_bytes = 0;
};

// Streaming-read bandwidth: a buffer far larger than the L2, read with 16-byte loads.
void MeasureStream(BenchReport& report, const DeviceInfo& device, int64_t bytes,
                   const BenchConfig& config, std::ostream* progress) {
  size_t free_bytes = 0, total_bytes = 0;
  Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  bytes = std::min<int64_t>(bytes, static_cast<int64_t>(free_bytes) * 6 / 10) / 4096 * 4096;
  const DeviceBuffer buffer(static_cast<size_t>(bytes), "streaming-read buffer");
  const DeviceBuffer sink(sizeof(uint32_t), "streaming-read sink");
  Check(cudaMemset(buffer.as<void>(), 1, static_cast<size_t>(bytes)), "fill streaming buffer");
  const int blocks = device.sms * 4;
  BenchConfig stream_config = config;
  stream_config.iters = 20;
  stream_config.min_total_ms = 0;
  report.stream_bytes = bytes;
  report.stream_time = TimeLaunches(
      [&](int) {
        Check(bench::StreamRead(buffer.as<const void>(), bytes, blocks, sink.as<uint32_t>(), 0),
              "stream read");
      },
      1, stream_config, "stream read");
  report.stream_gbps = static_cast<double>(bytes) / (report.stream_time.median_us * 1e3);
  if (progress != nullptr) {
    *progress << "streaming read: " << report.stream_gbps << " GB/s over " << bytes / kMiB
              << " MiB\n";
  }
}

int64_t DenseCopyBytes(const BenchConfig& config, int64_t tokens, int64_t batch) {
  const int64_t pages = batch * ((tokens + kPageTokens - 1) / kPageTokens);
  return 2 * pages * config.heads_kv * kPageTokens * config.head_dim * 2;
}

// One (tokens, batch) point's input sets and scratch, shared by its timed launches.
struct Point {
  PointGeometry g;
  size_t page_elems = 0;
  size_t out_elems = 0;
  DeviceBuffer queries, out, workspace;
  DenseSet dense;
  Fp8Set fp8;
  std::vector<std::unique_ptr<TileSet> > tiles;  // one set per (W, byte keys) of the tile specs
  AnchorSet anchor;
  bool run_anchor = false;
  std::vector<float> reference;  // the dense kernel's output

  float* out_ptr() const { return out.as<float>(); }
  void* ws() const { return workspace.as<void>(); }
  // Poisons the output (NaN) so that a launch that writes nothing cannot pass.
  void Poison() const {
    Check(cudaMemset(out.as<void>(), 0xFF, out_elems * sizeof(float)), "poison output");
  }
  // The tile set of a spec's W and key format.
  const TileSet& Tile(const KvSpec& spec) const {
    for (const auto& candidate : tiles) {
      if (candidate->store_bits == spec.store_bits && candidate->byte_keys == spec.byte_keys) {
        return *candidate;
      }
    }
    throw std::logic_error("no tile set for " + spec.Name());
  }
};

// Builds every input set of one point on the device (each backend from the same dense pages),
// replicates them for the rotation, and runs the dense kernel once for the reference output.
void BuildPoint(Point& p, const BenchConfig& config, int64_t tokens, bool run_anchor,
                const DeviceInfo& device, std::ostream* progress) {
  const DecodeShape& s = p.g.shape;
  p.page_elems = bench::PageElements(p.g);
  p.out_elems = static_cast<size_t>(s.batch) * s.heads_q * s.head_dim;
  const bool want_fp8 = std::any_of(config.kv.begin(), config.kv.end(),
                                    [](const KvSpec& k) { return k.backend == KvBackend::kFp8; });
  std::set<std::pair<int, bool> > tile_sets;  // (W, byte keys)
  for (const KvSpec& k : config.kv) {
    if (k.backend == KvBackend::kReadKv) tile_sets.insert({k.store_bits, k.byte_keys});
  }

  // Point-wide scratch.
  p.queries = DeviceBuffer(p.out_elems * sizeof(float), "queries");
  Check(bench::FillQueries(p.queries.as<float>(), s.batch, s.heads_q, s.head_dim,
                           kvgate::stats::DeriveSeed(config.seed, 103), 0),
        "fill queries");
  p.out = DeviceBuffer(p.out_elems * sizeof(float), "output");
  size_t workspace_bytes = SplitDecodeWorkspaceBytes(s);

  const float* queries = p.queries.as<const float>();
  bench::BuildDense(p.dense, p.g, config, queries, device.l2_bytes);
  if (want_fp8) bench::BuildFp8(p.fp8, p.g, p.dense, queries, device.l2_bytes);
  if (!tile_sets.empty()) {
    const codec::Calibration calibration = bench::CalibrateFromPages(p.g, p.dense);
    for (const auto& [w, byte_keys] : tile_sets) {
      p.tiles.push_back(std::make_unique<TileSet>());
      p.tiles.back()->store_bits = w;
      p.tiles.back()->byte_keys = byte_keys;
      bench::BuildTile(*p.tiles.back(), p.g, p.dense, calibration, queries, config, device.sms,
                       device.l2_bytes, progress);
      workspace_bytes =
          std::max(workspace_bytes, TileDecodeWorkspaceBytes(p.tiles.back()->shape,
                                                             p.tiles.back()->plan));
    }
  }
  p.workspace = DeviceBuffer(std::max<size_t>(workspace_bytes, 256), "workspace");
  p.run_anchor = run_anchor;
  if (run_anchor) bench::BuildAnchor(p.anchor, p.g, p.dense, queries, tokens, device.l2_bytes);

  p.dense.set.Replicate("dense set");
  if (want_fp8) p.fp8.set.Replicate("fp8 set");
  for (const auto& tile : p.tiles) tile->set.Replicate("tile set");
  if (run_anchor) p.anchor.set.Replicate("anchor set");

  // One untimed launch per backend for the outputs the correctness checks compare.
  p.Poison();
  Check(DenseDecodeAttention(s, p.dense.common.Inputs(p.dense.set, 0, p.out_ptr()),
                             p.dense.Cache(0), p.ws(), 0, config.split),
        "DenseDecodeAttention");
  Check(cudaDeviceSynchronize(), "DenseDecodeAttention");
  p.reference = Download(p.out_ptr(), p.out_elems, "download dense output");
}

// One backend's row of a point: ledgers, the timed launches, finiteness and error vs dense.
BenchRow MeasureBackend(const Point& p, const KvSpec& spec, int64_t tokens, int64_t batch,
                        const BenchConfig& config, std::ostream* progress) {
  const PointGeometry& g = p.g;
  const DecodeShape& s = g.shape;
  float* out_ptr = p.out_ptr();
  void* ws = p.ws();
  const SplitPlan split = config.split;
  BenchRow row;
  row.tokens = tokens;
  row.batch = batch;
  row.kv = spec.Name();
  row.backend = spec.backend;
  row.context_tokens = g.context_tokens;
  std::function<void(int)> launch;
  std::vector<float> output;
  if (spec.backend == KvBackend::kDense) {
    const DenseSet& dense = p.dense;
    launch = [&](int k) {
      Check(DenseDecodeAttention(s, dense.common.Inputs(dense.set, k, out_ptr), dense.Cache(k),
                                 ws, 0, split),
            "DenseDecodeAttention");
    };
    row.logical_bytes = DenseLogicalBytes(s, g.seq_lens.data());
    row.traffic = DenseDecodeTraffic(s, g.seq_lens.data(), split);
    row.copies = dense.set.copies();
    row.copy_bytes = static_cast<int64_t>(dense.set.copy_bytes());
    row.capacity_bytes = static_cast<int64_t>(2 * p.page_elems * sizeof(uint16_t));
    row.workspace_bytes = static_cast<int64_t>(SplitDecodeWorkspaceBytes(s));
    output = p.reference;
  } else if (spec.backend == KvBackend::kFp8) {
    const Fp8Set& fp8 = p.fp8;
    launch = [&](int k) {
      Check(Fp8DecodeAttention(s, fp8.common.Inputs(fp8.set, k, out_ptr), fp8.Cache(k), ws, 0,
                               split),
            "Fp8DecodeAttention");
    };
    p.Poison();
    launch(0);
    Check(cudaDeviceSynchronize(), "Fp8DecodeAttention");
    output = Download(out_ptr, p.out_elems, "download fp8 output");
    row.logical_bytes = Fp8LogicalBytes(s, g.seq_lens.data());
    row.traffic = Fp8DecodeTraffic(s, g.seq_lens.data(), split);
    row.copies = fp8.set.copies();
    row.copy_bytes = static_cast<int64_t>(fp8.set.copy_bytes());
    row.capacity_bytes = static_cast<int64_t>(2 * p.page_elems + 2 * s.heads_kv * sizeof(float));
    row.workspace_bytes = static_cast<int64_t>(SplitDecodeWorkspaceBytes(s));
  } else {  // ReadKV: the tile reader
    launch = bench::TileRow(p.Tile(spec), spec, out_ptr, p.out_elems, ws, row, output);
  }
  if (progress != nullptr) *progress << "  timing " << row.kv << "\n";
  int next_copy = 0;
  row.time = TimeLaunches(launch, row.copies, config, row.kv, &next_copy);
  if (row.one_pass) {  // where its blocks' time went, launched as the timed ones were
    row.phases = bench::TilePhases(p.Tile(spec), spec, out_ptr, ws, next_copy, kSpinNs);
  }
  row.finite = AllFinite(output);
  if (spec.backend != KvBackend::kDense) row.rel_l2_vs_dense = RelativeL2(output, p.reference);
  return row;
}

// The outside anchor's row of a point; its failure becomes report.anchor_note, not an error.
void MeasureAnchor(const Point& p, const Anchor& anchor, int64_t tokens, int64_t batch,
                   const BenchConfig& config, BenchReport& report, std::ostream* progress) {
  const DecodeShape& s = p.g.shape;
  const AnchorSet& anchor_set = p.anchor;
  float* out_ptr = p.out_ptr();
  BenchRow row;
  row.tokens = tokens;
  row.batch = batch;
  row.kv = anchor.name;
  row.anchor = true;
  row.context_tokens = p.g.context_tokens;
  row.logical_bytes = DenseLogicalBytes(s, p.g.seq_lens.data());
  row.traffic = DenseDecodeTraffic(s, p.g.seq_lens.data());
  row.copies = anchor_set.set.copies();
  row.copy_bytes = static_cast<int64_t>(anchor_set.set.copy_bytes());
  row.capacity_bytes =
      static_cast<int64_t>(2 * sizeof(uint16_t)) * s.batch * s.heads_kv * tokens * s.head_dim;
  row.workspace_bytes = -1;
  const auto inputs = [&](int k, float* o) {
    AnchorInputs in;
    in.batch = s.batch;
    in.heads_q = s.heads_q;
    in.heads_kv = s.heads_kv;
    in.head_dim = s.head_dim;
    in.tokens = tokens;
    in.queries = anchor_set.set.At<const void>(k, anchor_set.queries);
    in.keys = anchor_set.set.At<const void>(k, anchor_set.keys);
    in.values = anchor_set.set.At<const void>(k, anchor_set.values);
    in.out = o;
    return in;
  };
  try {
    p.Poison();
    anchor.enqueue(inputs(0, out_ptr));
    Check(cudaDeviceSynchronize(), anchor.name);
    const std::vector<float> output = Download(out_ptr, p.out_elems, "download anchor output");
    if (progress != nullptr) *progress << "  timing " << row.kv << "\n";
    row.time = TimeLaunches([&](int k) { anchor.enqueue(inputs(k, nullptr)); }, row.copies,
                            config, row.kv);
    row.finite = AllFinite(output);
    row.rel_l2_vs_dense = RelativeL2(output, p.reference);
    report.rows.push_back(row);
  } catch (const std::exception& e) {
    // The outside anchor failing (e.g. torch out of memory) must not lose our own rows.
    cudaGetLastError();
    report.anchor_note = anchor.name + " failed at T=" + std::to_string(tokens) +
                         " B=" + std::to_string(batch) + ": " + e.what();
  }
}

// Ratios within the point (its rows from first_row on).
void SetRatios(BenchReport& report, size_t first_row) {
  double fp8_us = 0, dense_us = 0;
  for (size_t i = first_row; i < report.rows.size(); ++i) {
    const BenchRow& r = report.rows[i];
    if (r.anchor) continue;
    if (r.backend == KvBackend::kFp8) fp8_us = r.time.median_us;
    if (r.backend == KvBackend::kDense) dense_us = r.time.median_us;
  }
  for (size_t i = first_row; i < report.rows.size(); ++i) {
    BenchRow& r = report.rows[i];
    const double us = r.time.median_us;
    r.achieved_gbps = us > 0 ? static_cast<double>(r.traffic.Total()) / (us * 1e3) : 0;
    r.stream_fraction = report.stream_gbps > 0 ? r.achieved_gbps / report.stream_gbps : 0;
    r.time_vs_fp8 = fp8_us > 0 ? us / fp8_us : 0;
    r.time_vs_dense = dense_us > 0 ? us / dense_us : 0;
  }
}

// Everything one (tokens, batch) point measures.
void RunPoint(const BenchConfig& config, int64_t tokens, int64_t batch, const Anchor* anchor,
              const DeviceInfo& device, BenchReport& report, std::ostream* progress) {
  Point p;
  p.g = bench::MakeGeometry(config, tokens, batch);
  if (progress != nullptr) {
    *progress << "T=" << tokens << " B=" << batch << ": " << p.g.context_tokens << " tokens in "
              << p.g.num_pages << " pages\n";
  }
  const bool run_anchor = anchor != nullptr && !config.ragged && report.anchor_note.empty();
  BuildPoint(p, config, tokens, run_anchor, device, progress);
  const size_t first_row = report.rows.size();
  for (const KvSpec& spec : config.kv) {
    report.rows.push_back(MeasureBackend(p, spec, tokens, batch, config, progress));
  }
  if (run_anchor) MeasureAnchor(p, *anchor, tokens, batch, config, report, progress);
  SetRatios(report, first_row);
}

}  // namespace

BenchReport RunAttentionBench(const BenchConfig& config, const Anchor* anchor,
                              std::ostream* progress) {
  config.Validate();
  const DeviceReport devices = QueryDevices();
  if (devices.device_count < 1) throw std::runtime_error("no CUDA device: " + devices.reason);
  Check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  DeviceInfo device;
  device.name = devices.first_device;
  device.sms = std::max(prop.multiProcessorCount, 1);
  device.l2_bytes = std::max<int64_t>(prop.l2CacheSize, kAssumedL2Bytes);

  BenchReport report;
  report.device = device.name;
  report.l2_bytes = prop.l2CacheSize;
  Check(cudaDriverGetVersion(&report.driver_version), "cudaDriverGetVersion");
  Check(cudaRuntimeGetVersion(&report.runtime_version), "cudaRuntimeGetVersion");
  std::ostringstream method;
  method << "rotation: each timed launch reads one of N copies of its whole input set (cache "
            "pages, queries, page table, lengths, scales/codec tables); the other N-1 copies "
            "hold >= 2 x "
         << device.l2_bytes / kMiB << " MiB (N = 1 when one copy is larger); a " << kSpinNs / 1000
         << " us GPU spin precedes each launch outside the timed events";
  report.cold_l2_method = method.str();
  if (anchor != nullptr && config.ragged) {
    report.anchor_note = anchor->name + " skipped: --ragged lengths need a mask it is not given";
  }

  int64_t largest = 4 * 1024 * kMiB;
  for (int64_t t : config.tokens) {
    for (int64_t b : config.batches) largest = std::max(largest, DenseCopyBytes(config, t, b));
  }
  MeasureStream(report, device, largest, config, progress);
  for (int64_t t : config.tokens) {
    for (int64_t b : config.batches) RunPoint(config, t, b, anchor, device, report, progress);
  }
  return report;
}

#endif  // KVGATE_HAVE_CUDA

}  // namespace readkv::cuda
