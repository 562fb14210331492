// `kvgate bench attention`'s report: timing statistics of the launches, the JSON record and the
// table (attention_bench.h). Host code, every build.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "readkv/cuda/attention_bench.h"

namespace readkv::cuda {

TimingStats SummariseTimes(std::vector<double> times_us) {
  TimingStats stats;
  stats.launches = static_cast<int>(times_us.size());
  if (times_us.empty()) return stats;
  std::sort(times_us.begin(), times_us.end());
  const auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(times_us.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, times_us.size() - 1);
    return times_us[lo] + (pos - static_cast<double>(lo)) * (times_us[hi] - times_us[lo]);
  };
  stats.median_us = quantile(0.5);
  stats.p10_us = quantile(0.1);
  stats.p90_us = quantile(0.9);
  double sum = 0;
  for (double t : times_us) sum += t;
  stats.mean_us = sum / static_cast<double>(times_us.size());
  return stats;
}

namespace {

// PhaseTimes::late: each launch's (per_launch blocks of `clocks`) last kLateBlockShare to end.
PhaseTimes::Late LateBlocks(const std::vector<TilePhaseClocks>& clocks, size_t per_launch,
                            const std::vector<double>& lifetimes, double us_per_cycle) {
  const auto late_count = std::max<size_t>(
      1, static_cast<size_t>(std::ceil(kLateBlockShare * static_cast<double>(per_launch))));
  std::vector<double> late_start, late_lifetime, late_phase[kTilePhases];
  for (size_t first = 0; first < clocks.size(); first += per_launch) {
    std::vector<size_t> order(per_launch);
    uint64_t start_lo = UINT64_MAX;
    for (size_t i = 0; i < per_launch; ++i) {
      order[i] = first + i;
      start_lo = std::min<uint64_t>(start_lo, clocks[first + i].global_start_ns);
    }
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(late_count),
                      order.end(), [&clocks](size_t a, size_t b) {
                        return clocks[a].global_end_ns > clocks[b].global_end_ns;
                      });
    for (size_t j = 0; j < late_count; ++j) {
      const TilePhaseClocks& c = clocks[order[j]];
      late_start.push_back(static_cast<double>(c.global_start_ns - start_lo) / 1000.0);
      late_lifetime.push_back(lifetimes[order[j]]);
      for (int k = 0; k < kTilePhases; ++k) {
        late_phase[k].push_back(static_cast<double>(c.clock[k + 1] - c.clock[k]) * us_per_cycle);
      }
    }
  }
  PhaseTimes::Late late;
  late.blocks = static_cast<int>(late_start.size());
  late.start_us = SummariseTimes(std::move(late_start)).median_us;
  late.lifetime_median_us = SummariseTimes(std::move(late_lifetime)).median_us;
  for (int k = 0; k < kTilePhases; ++k) {
    late.median_us[k] = SummariseTimes(std::move(late_phase[k])).median_us;
  }
  return late;
}

// PhaseTimes::values_warps, over the blocks whose warps stamped their ends (checked: all or none).
PhaseTimes::Warps ValuesWarpBalance(const std::vector<TilePhaseClocks>& clocks,
                                    double us_per_cycle) {
  std::vector<double> fastest, slowest, gap;
  for (const TilePhaseClocks& c : clocks) {
    if (c.values_warp_end[0] == 0) continue;  // no Value tiles
    const auto [lo, hi] = std::minmax_element(std::begin(c.values_warp_end),
                                              std::end(c.values_warp_end));
    const auto after_cut = [&c](unsigned long long end) {  // 0 for a warp done before the stamp
      return end > c.clock[kStampCut] ? static_cast<double>(end - c.clock[kStampCut]) : 0.0;
    };
    fastest.push_back(after_cut(*lo) * us_per_cycle);
    slowest.push_back(after_cut(*hi) * us_per_cycle);
    gap.push_back(static_cast<double>(*hi - *lo) * us_per_cycle);
  }
  PhaseTimes::Warps w;
  w.blocks = static_cast<int>(gap.size());
  if (!gap.empty()) {
    w.fastest_median_us = SummariseTimes(std::move(fastest)).median_us;
    w.slowest_median_us = SummariseTimes(std::move(slowest)).median_us;
    const TimingStats g = SummariseTimes(std::move(gap));
    w.gap_median_us = g.median_us;
    w.gap_p90_us = g.p90_us;
  }
  return w;
}

}  // namespace

PhaseTimes SummarisePhases(const std::vector<TilePhaseClocks>& clocks, int launches) {
  if (launches < 1 || clocks.empty() || clocks.size() % static_cast<size_t>(launches) != 0) {
    throw std::invalid_argument("phase clocks: " + std::to_string(clocks.size()) +
                                " block timelines are not " + std::to_string(launches) +
                                " launches of the same blocks");
  }
  const size_t per_launch = clocks.size() / static_cast<size_t>(launches);
  double cycles = 0, ns = 0;
  for (size_t i = 0; i < clocks.size(); ++i) {
    const TilePhaseClocks& c = clocks[i];
    const auto where = [&] {
      return "launch " + std::to_string(i / per_launch) + ", block " + std::to_string(i % per_launch);
    };
    for (int k = 0; k < kTilePhaseStamps; ++k) {
      if (c.clock[k] == 0 || (k > 0 && c.clock[k] < c.clock[k - 1])) {
        throw std::invalid_argument("phase clocks: " + where() + ": stamp " + std::to_string(k) +
                                    " missing or before the one ahead of it");
      }
    }
    int warps_stamped = 0;
    for (const unsigned long long end : c.values_warp_end) {
      if (end == 0) continue;
      ++warps_stamped;
      // A warp with no tile of its own may end before thread 0 stamps the cut, never before
      // the statistics' stamp (the barrier between them waits for thread 0).
      if (end < c.clock[kStampStatistics] || end > c.clock[kStampValues]) {
        throw std::invalid_argument("phase clocks: " + where() + ": a Values warp's end outside "
                                    "the block's cut and Values phases");
      }
    }
    if (warps_stamped != 0 && warps_stamped != kTilePhaseWarps) {
      throw std::invalid_argument("phase clocks: " + where() + ": " +
                                  std::to_string(warps_stamped) + " of " +
                                  std::to_string(kTilePhaseWarps) + " Values warps' ends stamped");
    }
    if (c.global_start_ns == 0 || c.global_end_ns <= c.global_start_ns) {
      throw std::invalid_argument("phase clocks: " + where() + ": global timer missing or not "
                                  "increasing");
    }
    cycles += static_cast<double>(c.clock[kStampEnd] - c.clock[kStampStart]);
    ns += static_cast<double>(c.global_end_ns - c.global_start_ns);
  }
  PhaseTimes t;
  t.launches = launches;
  t.blocks = static_cast<int>(clocks.size());
  t.sm_ghz = cycles / ns;
  const double us_per_cycle = 1.0 / (1000.0 * t.sm_ghz);
  std::vector<double> d(clocks.size());
  for (int k = 0; k < kTilePhases; ++k) {
    for (size_t i = 0; i < clocks.size(); ++i) {
      d[i] = static_cast<double>(clocks[i].clock[k + 1] - clocks[i].clock[k]) * us_per_cycle;
    }
    const TimingStats s = SummariseTimes(d);
    t.median_us[k] = s.median_us;
    t.p90_us[k] = s.p90_us;
  }
  for (size_t i = 0; i < clocks.size(); ++i) {
    d[i] = static_cast<double>(clocks[i].clock[kStampEnd] - clocks[i].clock[kStampStart]) *
           us_per_cycle;
  }
  t.lifetime_median_us = SummariseTimes(d).median_us;
  std::map<int, std::vector<double>> by_load;  // blocks an SM -> those blocks' lifetimes
  for (size_t first = 0; first < clocks.size(); first += per_launch) {
    std::map<unsigned, int> on_sm;
    for (size_t i = first; i < first + per_launch; ++i) ++on_sm[clocks[i].sm];
    for (size_t i = first; i < first + per_launch; ++i) {
      by_load[on_sm[clocks[i].sm]].push_back(d[i]);  // d: the lifetimes, from above
    }
  }
  for (auto& [load, lifetimes] : by_load) {
    const int blocks = static_cast<int>(lifetimes.size());
    t.by_sm_load.push_back({load, blocks, SummariseTimes(std::move(lifetimes)).median_us});
  }
  t.late = LateBlocks(clocks, per_launch, d, us_per_cycle);  // d: the lifetimes, from above
  t.values_warps = ValuesWarpBalance(clocks, us_per_cycle);
  std::vector<double> spread, span;
  for (size_t first = 0; first < clocks.size(); first += per_launch) {
    uint64_t start_lo = UINT64_MAX, start_hi = 0, end_hi = 0;
    for (size_t i = first; i < first + per_launch; ++i) {
      start_lo = std::min<uint64_t>(start_lo, clocks[i].global_start_ns);
      start_hi = std::max<uint64_t>(start_hi, clocks[i].global_start_ns);
      end_hi = std::max<uint64_t>(end_hi, clocks[i].global_end_ns);
    }
    spread.push_back(static_cast<double>(start_hi - start_lo) / 1000.0);
    span.push_back(static_cast<double>(end_hi - start_lo) / 1000.0);
  }
  t.start_spread_us = SummariseTimes(spread).median_us;
  t.span_us = SummariseTimes(span).median_us;
  return t;
}

// ---- Output ----------------------------------------------------------------------------------

namespace {

// A one-pass row's phases, or null where they were not measured.
nlohmann::json PhasesJson(const PhaseTimes& t) {
  if (t.launches == 0) return nullptr;
  nlohmann::json names = nlohmann::json::array(), median = nlohmann::json::array(),
                 p90 = nlohmann::json::array();
  for (int k = 0; k < kTilePhases; ++k) {
    names.push_back(kTilePhaseNames[k]);
    median.push_back(t.median_us[k]);
    p90.push_back(t.p90_us[k]);
  }
  nlohmann::json by_load = nlohmann::json::array();
  for (const PhaseTimes::Load& l : t.by_sm_load) {
    by_load.push_back({{"blocks_an_sm", l.blocks_an_sm},
                       {"blocks", l.blocks},
                       {"lifetime_median_us", l.lifetime_median_us}});
  }
  nlohmann::json late_median = nlohmann::json::array();
  for (int k = 0; k < kTilePhases; ++k) late_median.push_back(t.late.median_us[k]);
  return {{"launches", t.launches},
          {"blocks", t.blocks},
          {"names", names},
          {"median_us", median},
          {"p90_us", p90},
          {"lifetime_median_us", t.lifetime_median_us},
          {"start_spread_us", t.start_spread_us},
          {"span_us", t.span_us},
          {"sm_ghz", t.sm_ghz},
          {"by_sm_load", by_load},
          {"values_warps", {{"blocks", t.values_warps.blocks},
                            {"fastest_median_us", t.values_warps.fastest_median_us},
                            {"slowest_median_us", t.values_warps.slowest_median_us},
                            {"gap_median_us", t.values_warps.gap_median_us},
                            {"gap_p90_us", t.values_warps.gap_p90_us}}},
          {"late", {{"share", kLateBlockShare},
                    {"blocks", t.late.blocks},
                    {"start_us", t.late.start_us},
                    {"median_us", late_median},
                    {"lifetime_median_us", t.late.lifetime_median_us}}}};
}

nlohmann::json TimingJson(const TimingStats& t) {
  return {{"launches", t.launches},
          {"median_us", t.median_us},
          {"p10_us", t.p10_us},
          {"p90_us", t.p90_us},
          {"mean_us", t.mean_us}};
}

// NaN/absent ratios become null rather than a number a script could misread.
nlohmann::json PositiveOrNull(double value) {
  return value > 0 && std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

}  // namespace

std::string BenchReportJson(const BenchConfig& config, const BenchReport& report,
                            const BenchRunInfo& info) {
  nlohmann::json kv = nlohmann::json::array();
  for (const KvSpec& spec : config.kv) kv.push_back(spec.Name());
  nlohmann::json rows = nlohmann::json::array();
  for (const BenchRow& r : report.rows) {
    nlohmann::json kernels = nlohmann::json::array();  // the same bytes by launch
    for (const KernelTraffic& k : r.traffic.kernels) {
      if (k.kernel != nullptr) {
        kernels.push_back({{"kernel", k.kernel}, {"read", k.read}, {"write", k.write}});
      }
    }
    rows.push_back({{"tokens", r.tokens},
                    {"batch", r.batch},
                    {"kv", r.kv},
                    {"reader", !r.anchor && r.backend == codec::KvBackend::kReadKv
                                   ? nlohmann::json(std::string(
                                         codec::ReaderName(codec::ReaderKind::kTile)))
                                   : nlohmann::json(nullptr)},
                    {"anchor", r.anchor},
                    {"context_tokens", r.context_tokens},
                    {"time", TimingJson(r.time)},
                    {"capacity_bytes", r.capacity_bytes},
                    {"logical_bytes", r.logical_bytes},
                    {"traffic_bytes",
                     {{"payload", r.traffic.payload},
                      {"metadata", r.traffic.metadata},
                      {"scores", r.traffic.scores},
                      {"schedule", r.traffic.schedule},
                      {"partials", r.traffic.partials},
                      {"io", r.traffic.io},
                      {"total", r.traffic.Total()}}},
                    {"traffic_kernels", kernels},
                    {"workspace_bytes", r.workspace_bytes},
                    {"chunk_tokens", r.chunk_tokens},
                    {"value_window_tokens", r.value_window_tokens},
                    {"one_pass", r.one_pass},
                    {"clusters", r.clusters},
                    {"resident_clusters", r.resident_clusters},
                    {"phases", PhasesJson(r.phases)},
                    {"achieved_gbps", r.achieved_gbps},
                    {"stream_fraction", r.stream_fraction},
                    {"time_vs_fp8", PositiveOrNull(r.time_vs_fp8)},
                    {"time_vs_dense", PositiveOrNull(r.time_vs_dense)},
                    {"finite", r.finite},
                    {"rel_l2_vs_dense", r.rel_l2_vs_dense >= 0 ? nlohmann::json(r.rel_l2_vs_dense)
                                                               : nlohmann::json(nullptr)},
                    {"copies", r.copies},
                    {"copy_bytes", r.copy_bytes}});
  }
  const nlohmann::json out = {{"bench", "attention"},
                              {"version", info.version},
                              {"git_commit", info.git_commit},
                              {"date_utc", info.date_utc},
                              {"command_line", info.command_line},
                              {"device",
                               {{"name", report.device},
                                {"driver_version", report.driver_version},
                                {"runtime_version", report.runtime_version},
                                {"l2_bytes", report.l2_bytes}}},
                              {"config",
                               {{"tokens", config.tokens},
                                {"batch", config.batches},
                                {"heads_q", config.heads_q},
                                {"heads_kv", config.heads_kv},
                                {"head_dim", config.head_dim},
                                {"kv", kv},
                                {"iters", config.iters},
                                {"min_total_ms", config.min_total_ms},
                                {"chunk_tokens", config.chunk_tokens},
                                {"ragged", config.ragged},
                                {"outlier_cap", config.outlier_cap},
                                {"value_window", config.value_window},
                                {"one_pass", OnePassModeName(config.one_pass)},
                                {"split_cluster", config.split.cluster},
                                {"seed", config.seed}}},
                              {"stream",
                               {{"bytes", report.stream_bytes},
                                {"time", TimingJson(report.stream_time)},
                                {"gbps", report.stream_gbps}}},
                              {"cold_l2_method", report.cold_l2_method},
                              {"anchor_note", report.anchor_note},
                              {"rows", rows}};
  return out.dump(2);
}

void PrintBenchTable(const BenchReport& report, std::ostream& out) {
  out << "device: " << report.device << " (driver " << report.driver_version << ", runtime "
      << report.runtime_version << ", L2 " << report.l2_bytes / (1024 * 1024) << " MiB)\n";
  out << "streaming read: " << std::fixed << std::setprecision(1) << report.stream_gbps
      << " GB/s (median of " << report.stream_time.launches << " reads of "
      << report.stream_bytes / (1024 * 1024) << " MiB)\n";
  out << "cold L2: " << report.cold_l2_method << "\n";
  if (!report.anchor_note.empty()) out << "anchor: " << report.anchor_note << "\n";
  out << std::setw(8) << "tokens" << std::setw(6) << "batch" << std::setw(22) << "kv"
      << std::setw(11) << "median_us" << std::setw(11) << "p10_us" << std::setw(11) << "p90_us"
      << std::setw(12) << "logical_MB" << std::setw(12) << "traffic_MB" << std::setw(9) << "GB/s"
      << std::setw(8) << "%strm" << std::setw(8) << "vs_fp8" << std::setw(9) << "vs_dense"
      << std::setw(11) << "relL2_dns" << std::setw(7) << "copies"
      << "\n";
  const auto ratio = [](double v) {
    std::ostringstream s;
    if (v > 0 && std::isfinite(v)) {
      s << std::fixed << std::setprecision(3) << v;
    } else {
      s << "-";
    }
    return s.str();
  };
  for (const BenchRow& r : report.rows) {
    std::ostringstream rel;
    if (r.rel_l2_vs_dense >= 0) {
      rel << std::scientific << std::setprecision(2) << r.rel_l2_vs_dense;
    } else {
      rel << "-";
    }
    out << std::setw(8) << r.tokens << std::setw(6) << r.batch << std::setw(22)
        << (r.kv + (r.finite ? "" : "!NaN")) << std::fixed << std::setprecision(1) << std::setw(11)
        << r.time.median_us << std::setw(11) << r.time.p10_us << std::setw(11) << r.time.p90_us
        << std::setprecision(2) << std::setw(12) << static_cast<double>(r.logical_bytes) / 1e6
        << std::setw(12) << static_cast<double>(r.traffic.Total()) / 1e6 << std::setprecision(1)
        << std::setw(9) << r.achieved_gbps << std::setw(8) << 100.0 * r.stream_fraction
        << std::setw(8) << ratio(r.time_vs_fp8) << std::setw(9) << ratio(r.time_vs_dense)
        << std::setw(11) << rel.str() << std::setw(7) << r.copies << "\n";
    if (r.clusters > 0) {  // which shape ran, and whether one pass's clusters fit at once
      const bool waves = r.resident_clusters < r.clusters;
      out << std::setw(36) << (r.one_pass ? "one pass: " : "two launches: ") << r.clusters
          << " clusters, " << r.resident_clusters << " resident at once"
          << (waves ? (r.one_pass ? " (runs in waves)" : " (one pass would run in waves)") : "")
          << "\n";
    }
    if (r.phases.launches > 0) {  // where a block's lifetime went
      const PhaseTimes& t = r.phases;
      out << std::setw(36) << "phases: " << t.blocks << " blocks, median/p90 us:";
      for (int k = 0; k < kTilePhases; ++k) {
        out << (k == 0 ? " " : ", ") << kTilePhaseNames[k] << " " << t.median_us[k] << "/"
            << t.p90_us[k];
      }
      out << "; lifetime " << t.lifetime_median_us << ", starts within " << t.start_spread_us
          << ", span " << t.span_us << " (SM " << std::setprecision(2) << t.sm_ghz << " GHz)\n"
          << std::setprecision(1);
      out << std::setw(36) << "by SM load: " << "blocks an SM: blocks, lifetime median us:";
      for (size_t k = 0; k < t.by_sm_load.size(); ++k) {
        const PhaseTimes::Load& l = t.by_sm_load[k];
        out << (k == 0 ? " " : ", ") << l.blocks_an_sm << ": " << l.blocks << ", "
            << l.lifetime_median_us;
      }
      out << "\n";
      out << std::setw(36) << "last to end: " << t.late.blocks << " blocks (each launch's last "
          << std::setprecision(0) << 100.0 * kLateBlockShare << std::setprecision(1)
          << "%), median us: start +" << t.late.start_us;
      for (int k = 0; k < kTilePhases; ++k) {
        out << ", " << kTilePhaseNames[k] << " " << t.late.median_us[k];
      }
      out << "; lifetime " << t.late.lifetime_median_us << "\n";
      const PhaseTimes::Warps& w = t.values_warps;
      out << std::setw(36) << "values warps: " << w.blocks << " blocks, median us: fastest "
          << w.fastest_median_us << ", slowest " << w.slowest_median_us << ", gap "
          << w.gap_median_us << " (p90 " << w.gap_p90_us << ")\n";
    }
  }
}

}  // namespace readkv::cuda
