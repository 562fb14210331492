// The decode-attention benchmark behind `kvgate bench attention` (issue 8): for every (tokens,
// batch, KV backend) point it builds the paged caches on the GPU from seeded data, times each
// kernel over many cold-L2 launches, and reports the kernel's ledgers (docs/ledgers.md)
// next to the device's streaming-read bandwidth and an outside anchor (torch's
// scaled_dot_product_attention, passed in by the caller so this library stays torch-free).
//
// Cold L2: each timed launch reads a copy of its whole input set (cache pages, queries, page
// table, lengths, scales/codec tables) that no launch since the copy's previous use has touched:
// the harness rotates among N copies whose other N - 1 copies together hold at least 2 x the L2
// (one copy when a copy alone is larger). Every timed launch is preceded, outside the timed
// events, by a short GPU spin so the host has queued the launch before its start event fires.
//
// Host API: functions throw readkv::codec::InvalidArgument naming the flag ("--kv", "--tokens")
// for bad configuration and std::runtime_error for CUDA failures. Not thread-safe: one bench per
// process at a time (it uses device 0 and the legacy default stream).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/readers.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/one_pass_mode.h"
#include "readkv/cuda/tile_attention.h"

namespace readkv::cuda {

// One value of --kv: "dense", "fp8" (per-tensor scales), or "tile:W:R" / "tile:W:R:RK:RV" (the
// tile reader, TileDecodeAttention, on W-bit codes that TileAppend writes into the tile layout,
// R_K = R_V = R or a K/V split with mean R; its chunk is PlanTileDecode's unless --chunk-tokens
// is given), or "tile-kbytes:8:R:8:RV" (the tile reader on byte keys). The constrained GPU reader
// ("readkv:W:R") is gone (issue 37: the tile reader is faster); ParseKvSpec refuses it by name.
struct KvSpec {
  codec::KvBackend backend = codec::KvBackend::kDense;  // the server's one backend type
  int store_bits = 0;        // W, ReadKV (tile) only, in [2, 8]
  double read_bits = 0;      // R, ReadKV only, in [1, W]
  double key_bits = 0;       // R_K, ReadKV only, in [1, W]; R when no split is given
  double value_bits = 0;     // R_V, likewise
  // The tile reader on byte keys ("tile-kbytes:8:R:8:RV"; tile_attention.h, "Byte keys"): W = 8
  // and R_K = 8 only.
  bool byte_keys = false;
  // Canonical text: "dense", "fp8", "tile:8:2", "tile:8:2.5", "tile:8:4:6:2" (the split only
  // when unequal), "tile-kbytes:8:5:8:2".
  std::string Name() const;
};

// Throws InvalidArgument("--kv") for anything but the forms above (e.g. "tile:8", "full:8:8"),
// and for "readkv:..." with a message naming the forms that remain.
KvSpec ParseKvSpec(const std::string& text);
// A comma-separated list of specs; throws InvalidArgument("--kv") on an empty list or duplicate.
std::vector<KvSpec> ParseKvSpecs(const std::string& text);
// A comma-separated list of positive integers ("8192,32768"); throws InvalidArgument(flag).
std::vector<int64_t> ParsePositiveList(const std::string& flag, const std::string& text);

struct BenchConfig {
  std::vector<int64_t> tokens = {8192};  // T per sequence (the maximum when ragged)
  std::vector<int64_t> batches = {1};    // B
  int heads_q = 32;
  int heads_kv = 8;
  int head_dim = 128;
  std::vector<KvSpec> kv = {KvSpec{}};
  int iters = 50;               // timed launches per row, at least 20 ...
  double min_total_ms = 200.0;  // ... and until their kernel times add up to this
  int chunk_tokens = 0;  // tile rows' chunk: 512, 1024, 1536 or 2048 (kTileChunkStep steps up
                         // to kTileMaxChunk); 0: PlanTileDecode's, the choice kvgate serve uses.
  bool ragged = false;          // seq_lens uniform in [T/2, T] instead of all T
  uint64_t seed = 1;
  int outlier_cap = 0;  // tile rows: outlier lists of this cap (codec/outliers.h) from the same
                        // tokens; 0: none.
  int value_window = 0;  // tile rows: Value budgets per window of this many tokens, the chunk
                         // (TilePlan::value_window_tokens: 512-2048 by 512); 0: the row's.
  OnePassMode one_pass = OnePassMode::kAuto;  // byte-key tile rows in windows: one launch?
  SplitPlan split;  // dense, FP8 and anchor-ledger rows: their schedule (decode_attention.h)
  // Throws InvalidArgument naming the flag: "--tokens", "--batch", "--heads-q", "--heads-kv"
  // (must divide --heads-q with a group of 1, 2, 4 or 8), "--head-dim" (64 or 128), "--kv",
  // "--iters", "--chunk-tokens" (not 0 or a multiple of 512 up to 2048), "--outlier-cap"
  // (outside [0, 16], or above 0 without a tile: spec), "--value-window" (not 0 or 512-2048 by
  // 512, without a tile: spec, or beside a different --chunk-tokens), "--one-pass" (on without
  // --value-window), "--split-cluster" (a plan that is not valid()). A one-pass row whose
  // windows do not fit one cluster fails when its workspace is planned (InvalidArgument "plan").
  void Validate() const;
};

// An outside implementation timed on the same dense inputs, contiguous and unpaged. Only used
// when every sequence has T tokens (not with --ragged).
struct AnchorInputs {
  int batch = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t tokens = 0;
  const void* queries = nullptr;  // [B][H_q][d] bfloat16 (= [B][H_kv][g][d]), device
  const void* keys = nullptr;     // [B][H_kv][T][d] bfloat16, device
  const void* values = nullptr;   // [B][H_kv][T][d] bfloat16, device
  float* out = nullptr;           // [B][H_q][d] float, device; null on timed launches
};
struct Anchor {
  std::string name;  // row name, e.g. "torch_sdpa"
  // Enqueues one call on the legacy default stream (and, when out != null, the copy into out).
  std::function<void(const AnchorInputs&)> enqueue;
};

struct TimingStats {
  int launches = 0;
  double median_us = 0, p10_us = 0, p90_us = 0, mean_us = 0;
};
// Median and p10/p90 (linear interpolation between order statistics) of times in microseconds.
TimingStats SummariseTimes(std::vector<double> times_us);

// Where a one-pass block's lifetime goes (tile_attention.h, TilePhaseClocks): each phase's
// duration (stamp k to stamp k + 1: logits, barrier, statistics, cut, values, finish) over the
// blocks of a few launches after the timed ones, in microseconds at the SM clock the blocks ran
// at (their cycles over their global-timer nanoseconds).
inline constexpr int kTilePhases = kTilePhaseStamps - 1;
inline constexpr const char* kTilePhaseNames[kTilePhases] = {"logits", "barrier", "statistics",
                                                              "cut",    "values",  "finish"};
struct PhaseTimes {
  int launches = 0;  // 0: not measured (not a one-pass row)
  int blocks = 0;    // over all launches
  double median_us[kTilePhases] = {}, p90_us[kTilePhases] = {};
  double lifetime_median_us = 0;  // start to end, a block's
  double start_spread_us = 0;     // a launch's latest block start after its first (median)
  double span_us = 0;             // a launch's first block start to its last block end (median)
  double sm_ghz = 0;              // sum of cycles / sum of nanoseconds, start to end
  // By an SM's load: the blocks of a launch grouped by how many of that launch's blocks their
  // SM ran (load k, k >= 1), each group's size and median lifetime, in increasing k (the SMs'
  // uneven shares of a grid that does not divide among them show as lifetimes rising with k).
  struct Load {
    int blocks_an_sm = 0;
    int blocks = 0;  // over all launches
    double lifetime_median_us = 0;
  };
  std::vector<Load> by_sm_load;
  // The launches' last blocks to end, per launch the kLateBlockShare of its blocks that end last
  // by the global timer (at least one): their median start after the launch's first block
  // start, each phase's median and their median lifetime. The call ends with them, so a change
  // that shortens the median block but not these leaves the call where it was.
  struct Late {
    int blocks = 0;  // over all launches
    double start_us = 0;
    double median_us[kTilePhases] = {};
    double lifetime_median_us = 0;
  };
  Late late;
  // The Value stream's balance over a block's warps (TilePhaseClocks::values_warp_end), over the
  // blocks that read Value tiles: each block's fastest and slowest warp's stream (cut stamp to
  // its end) and the gap between them, medians (and the gap's p90). The Values phase waits for
  // the slowest.
  struct Warps {
    int blocks = 0;  // over all launches
    double fastest_median_us = 0, slowest_median_us = 0, gap_median_us = 0, gap_p90_us = 0;
  };
  Warps values_warps;
};
inline constexpr double kLateBlockShare = 0.05;
// PhaseTimes of `launches` launches' timelines, `clocks` holding each launch's blocks in turn.
// Throws std::invalid_argument naming the launch and block whose stamps are missing (0) or out
// of order (a warp's Values end outside its block's cut and Values phases, or only some warps'
// set), or when clocks.size() is not launches x a positive number of blocks.
PhaseTimes SummarisePhases(const std::vector<TilePhaseClocks>& clocks, int launches);

struct BenchRow {
  int64_t tokens = 0;  // T
  int64_t batch = 0;   // B
  std::string kv;      // KvSpec::Name() or the anchor's name
  bool anchor = false;
  codec::KvBackend backend = codec::KvBackend::kDense;  // the spec's; not for the anchor
  TimingStats time;
  int64_t context_tokens = 0;   // sum of seq_lens over the batch
  int64_t capacity_bytes = 0;   // ledger 1: cache pages (whole pages) + scales / codec tables
  int64_t workspace_bytes = 0;  // ledger 4: the launcher's workspace; -1: unknown (anchor)
  int chunk_tokens = 0;         // tile rows: the chunk of the call's TilePlan; 0 for the others
  int value_window_tokens = 0;  // tile rows: the TilePlan's Value window; 0 for the others
  bool one_pass = false;        // tile rows: TilePlan::one_pass (TileWindowPass) as it ran
  // Tile rows whose plan allows one pass (byte keys, a window, <= 16 chunks), whichever ran: the
  // call's clusters, a row each (batch x H_kv), and how many the device holds at once
  // (TileOnePassResidentClusters; fewer: one pass would run, or ran, in waves). 0 otherwise.
  int clusters = 0;
  int resident_clusters = 0;
  PhaseTimes phases;  // one-pass rows: where a block's lifetime went
  int64_t logical_bytes = 0;    // ledger 2: payload the reader chose
  TrafficBytes traffic;         // ledger 3 (the anchor: the dense kernel's model of the same reads)
  double achieved_gbps = 0;     // traffic.Total() / median time, 1e9 bytes/s
  double stream_fraction = 0;   // achieved_gbps / the device's streaming-read bandwidth
  double time_vs_fp8 = 0;       // median / the FP8 row's median of this point; 0 when absent
  double time_vs_dense = 0;     // median / the dense row's median of this point; 0 when absent
  bool finite = true;           // no NaN/Inf in the output
  double rel_l2_vs_dense = -1;  // ||out - dense|| / ||dense||; -1 for the dense row or no dense
  int copies = 1;               // rotation copies of the input set (cold L2)
  int64_t copy_bytes = 0;       // bytes of one copy
};

struct BenchReport {
  std::string device;        // name and sm_XY
  int driver_version = 0;    // cudaDriverGetVersion
  int runtime_version = 0;   // cudaRuntimeGetVersion
  int64_t l2_bytes = 0;      // the device's L2
  int64_t stream_bytes = 0;  // buffer the streaming-read kernel read per launch
  TimingStats stream_time;
  double stream_gbps = 0;  // stream_bytes / median time, 1e9 bytes/s
  std::string cold_l2_method;
  std::string anchor_note;  // why the anchor did not run, if it did not
  std::vector<BenchRow> rows;
};

// Runs the whole grid. `anchor` may be null; `progress` (may be null) gets one line per step.
// Throws std::runtime_error("no CUDA device: ...") without a device, std::runtime_error for a
// CUDA error (naming the call), InvalidArgument for a bad config.
BenchReport RunAttentionBench(const BenchConfig& config, const Anchor* anchor,
                              std::ostream* progress);

// What the JSON records beside the report.
struct BenchRunInfo {
  std::string version, git_commit, date_utc, command_line;
};
// The report as JSON text (2-space indent): {"bench": "attention", "version", "git_commit",
// "date_utc", "command_line", "device": {...}, "config": {...}, "stream": {...},
// "cold_l2_method", "anchor_note", "rows": [{...}, ...]}; a row's "reader" is the ReadKV reader's
// name ("tile", the only one on the GPU), null for the other rows.
std::string BenchReportJson(const BenchConfig& config, const BenchReport& report,
                            const BenchRunInfo& info);
// The human table, one line per row.
void PrintBenchTable(const BenchReport& report, std::ostream& out);

}  // namespace readkv::cuda
