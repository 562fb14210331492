// Rate sweeps and the SLO capacity search (DistServe's "capacity at an SLO").
#include <cmath>
#include <cstdio>

#include "kvgate/loadgen/run_load.h"

namespace kvgate::loadgen {
namespace {

std::string Rate(double rps) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g req/s", rps);
  return buf;
}

// Discovers the model once so that every run of a sweep asks for the same one.
Target WithModel(const Target& target) {
  Target resolved = target;
  if (resolved.model.empty()) resolved.model = DiscoverModel(target);
  return resolved;
}

}  // namespace

std::vector<LoadResult> RunRates(const LoadSettings& settings, const Target& target,
                                 const std::vector<double>& rates_rps, LiveCounters* counters,
                                 const std::atomic<bool>* stop) {
  if (rates_rps.empty()) throw SettingsError("rates", "needs at least one rate");
  for (double rate : rates_rps) {
    if (!(rate > 0) || !std::isfinite(rate)) {
      throw SettingsError("rates", "every rate must be a finite number > 0 requests/s");
    }
  }
  LoadSettings run_settings = settings;
  run_settings.mode = LoadMode::kOpenLoop;
  ValidateSettings(run_settings);
  Target resolved = WithModel(target);
  std::vector<LoadResult> results;
  for (double rate : rates_rps) {
    run_settings.rate_rps = rate;
    results.push_back(RunLoad(run_settings, resolved, counters, stop));
    if (results.back().stopped) break;
  }
  return results;
}

CapacityResult FindCapacity(const LoadSettings& settings, const Target& target,
                            const CapacitySearch& search, LiveCounters* counters,
                            const std::atomic<bool>* stop) {
  if (search.slo.empty()) {
    throw SettingsError("slo", "a capacity search needs an SLO (e.g. ttft_ms=500,tpot_ms=50)");
  }
  if (!(search.attainment > 0 && search.attainment <= 1)) {
    throw SettingsError("attainment", "must be in (0, 1]");
  }
  if (!(search.rate_min_rps > 0) || !std::isfinite(search.rate_max_rps) ||
      !(search.rate_max_rps >= search.rate_min_rps)) {
    throw SettingsError("rate-min", "need 0 < rate_min <= rate_max");
  }
  if (!(search.tolerance > 0)) throw SettingsError("tolerance", "must be > 0");
  if (search.max_probes < 2) throw SettingsError("max-probes", "must be >= 2");
  LoadSettings probe_settings = settings;
  probe_settings.mode = LoadMode::kOpenLoop;
  probe_settings.slo = search.slo;
  probe_settings.rate_rps = search.rate_min_rps;
  ValidateSettings(probe_settings);
  Target resolved = WithModel(target);

  CapacityResult result;
  auto probe = [&](double rate) {
    probe_settings.rate_rps = rate;
    CapacityProbe p;
    p.rate_rps = rate;
    p.result = RunLoad(probe_settings, resolved, counters, stop);
    p.attainment = p.result.summary.slo_attainment;
    p.passed = p.attainment >= search.attainment && p.result.validity.valid;
    result.stopped = result.stopped || p.result.stopped;
    result.probes.push_back(std::move(p));
    return result.probes.back().passed;
  };
  auto probes_left = [&] {
    return !result.stopped && static_cast<int>(result.probes.size()) < search.max_probes;
  };
  auto stopped_reason = [&](std::optional<double> passing) {
    return "stopped by request after " + std::to_string(result.probes.size()) + " probes" +
           (passing ? ": capacity is at least " + Rate(*passing) : std::string(": no rate passed"));
  };
  auto failed_as_invalid = [&](double rate) {
    for (const CapacityProbe& p : result.probes) {
      if (p.rate_rps == rate) return !p.result.validity.valid;
    }
    return false;
  };

  if (!probe(search.rate_min_rps)) {
    if (result.stopped) {
      result.reason = stopped_reason(std::nullopt);
      return result;
    }
    result.first_failing_rps = search.rate_min_rps;
    result.limited_by_generator = failed_as_invalid(search.rate_min_rps);
    result.reason = "even rate_min " + Rate(search.rate_min_rps) + " failed (attainment " +
                    std::to_string(result.probes.back().attainment) +
                    (result.limited_by_generator ? ", run INVALID" : "") +
                    "): capacity is below it";
    return result;
  }
  double lo = search.rate_min_rps;
  std::optional<double> hi;
  // Bracket: double until a rate fails or rate_max passes.
  while (!hi && probes_left()) {
    if (lo >= search.rate_max_rps) break;
    double next = std::min(lo * 2.0, search.rate_max_rps);
    if (probe(next)) {
      lo = next;
    } else {
      hi = next;
    }
  }
  result.capacity_rps = lo;
  if (result.stopped) {
    result.reason = stopped_reason(lo);
    return result;
  }
  if (!hi) {
    result.reason = lo >= search.rate_max_rps
                        ? "rate_max passed: capacity is at least " + Rate(lo)
                        : "probe budget spent while bracketing: capacity is at least " + Rate(lo);
    return result;
  }
  // Bisect geometrically: rates span orders of magnitude, so the midpoint is sqrt(lo * hi).
  while (*hi / lo > 1.0 + search.tolerance && probes_left()) {
    double mid = std::sqrt(lo * *hi);
    if (probe(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  result.capacity_rps = lo;
  if (result.stopped) {
    result.reason = stopped_reason(lo);
    return result;
  }
  result.first_failing_rps = *hi;
  result.limited_by_generator = failed_as_invalid(*hi);
  result.reason =
      (*hi / lo <= 1.0 + search.tolerance ? "bracket " : "probe budget spent; bracket ") +
      Rate(lo) + " (passes) to " + Rate(*hi) + " (fails)";
  if (result.limited_by_generator) {
    result.reason +=
        "; the failing run was INVALID, so this bounds the load generator, not "
        "the server";
  }
  return result;
}

}  // namespace kvgate::loadgen
