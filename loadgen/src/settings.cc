#include "kvgate/loadgen/settings.h"

#include <cmath>
#include <sstream>

namespace kvgate::loadgen {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

void CheckLength(const LengthDistribution& dist, const std::string& field) {
  if (dist.mean < 1) throw SettingsError(field, "mean length must be >= 1");
  if (dist.max < 1) throw SettingsError(field, "max length must be >= 1");
  if (!(dist.spread >= 0.0) || !std::isfinite(dist.spread)) {
    throw SettingsError(field, "spread must be a finite number >= 0");
  }
  if (dist.kind == LengthDistributionKind::kUniform && dist.spread > 1.0) {
    throw SettingsError(field, "uniform spread (range ratio) must be in [0, 1]");
  }
}

}  // namespace

Slo ParseSlo(std::string_view text) {
  Slo slo;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = Trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw SettingsError("slo", "expected name=value, got '" + std::string(item) + "'");
    }
    std::string_view name = Trim(item.substr(0, eq));
    std::string value_text(Trim(item.substr(eq + 1)));
    double value = 0;
    try {
      size_t used = 0;
      value = std::stod(value_text, &used);
      if (used != value_text.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw SettingsError("slo",
                          "'" + std::string(name) + "' needs a number, got '" + value_text + "'");
    }
    if (!(value > 0) || !std::isfinite(value)) {
      throw SettingsError("slo", "'" + std::string(name) + "' must be > 0 ms");
    }
    if (name == "ttft_ms") {
      slo.ttft_ms = value;
    } else if (name == "tpot_ms") {
      slo.tpot_ms = value;
    } else if (name == "e2e_ms") {
      slo.e2e_ms = value;
    } else {
      throw SettingsError(
          "slo", "unknown bound '" + std::string(name) + "' (known: ttft_ms, tpot_ms, e2e_ms)");
    }
  }
  return slo;
}

std::string FormatSlo(const Slo& slo) {
  std::ostringstream out;
  const char* sep = "";
  if (slo.ttft_ms) {
    out << sep << "ttft_ms=" << *slo.ttft_ms;
    sep = ",";
  }
  if (slo.tpot_ms) {
    out << sep << "tpot_ms=" << *slo.tpot_ms;
    sep = ",";
  }
  if (slo.e2e_ms) {
    out << sep << "e2e_ms=" << *slo.e2e_ms;
  }
  return out.str();
}

std::string ReservedRequestField(const nlohmann::json& extra_body) {
  static constexpr std::string_view kReserved[] = {
      "prompt", "messages", "model", "max_tokens", "max_completion_tokens", "min_tokens",
      "ignore_eos", "temperature", "stream", "stream_options", "stop", "n", "best_of"};
  if (!extra_body.is_object()) return "";
  for (const auto& [key, value] : extra_body.items()) {
    for (std::string_view reserved : kReserved) {
      if (key == reserved) return key;
    }
  }
  return "";
}

void ValidateSettings(const LoadSettings& s) {
  if (s.mode == LoadMode::kOpenLoop) {
    if (!(s.rate_rps > 0) || !std::isfinite(s.rate_rps)) {
      throw SettingsError("rate", "offered rate must be a finite number > 0 requests/s");
    }
    if (s.arrival == Arrival::kGamma && (!(s.burstiness > 0) || !std::isfinite(s.burstiness))) {
      throw SettingsError("burstiness", "must be > 0 (1 = Poisson)");
    }
  } else if (s.concurrency < 1) {
    throw SettingsError("concurrency", "must be >= 1");
  }
  if (s.requests < 0) throw SettingsError("requests", "must be >= 0");
  if (!(s.duration_s >= 0) || !std::isfinite(s.duration_s)) {
    throw SettingsError("duration", "must be a finite number of seconds >= 0");
  }
  if (s.warmup_requests < 0) throw SettingsError("warmup", "must be >= 0");
  int64_t bound = s.requests > 0 ? s.requests : 0;
  if (bound > 0 && s.warmup_requests >= bound) {
    throw SettingsError(
        "warmup", "must be smaller than the number of requests (" + std::to_string(bound) + ")");
  }
  if (!(s.request_timeout_s > 0) || !std::isfinite(s.request_timeout_s)) {
    throw SettingsError("timeout", "must be > 0 seconds");
  }
  CheckLength(s.workload.input, "input-len");
  CheckLength(s.workload.output, "output-len");
  if (s.workload.kind == WorkloadKind::kPasskey) {
    if (s.workload.passkey_lengths.empty()) {
      throw SettingsError("passkey-lengths", "needs at least one length");
    }
    for (int length : s.workload.passkey_lengths) {
      if (length < 1) throw SettingsError("passkey-lengths", "lengths must be >= 1 word");
    }
    if (s.workload.passkey_depths.empty()) {
      throw SettingsError("passkey-depths", "needs at least one depth");
    }
    for (double depth : s.workload.passkey_depths) {
      if (!(depth >= 0.0 && depth <= 1.0)) {
        throw SettingsError("passkey-depths", "depths must be in [0, 1]");
      }
    }
  }
  if (s.workload.kind == WorkloadKind::kPromptFile && s.workload.prompt_file.empty()) {
    throw SettingsError("prompts", "the prompt-file workload needs a JSONL file");
  }
  if (s.workload.kind == WorkloadKind::kTrace) {
    if (s.workload.trace.empty()) throw SettingsError("trace", "the trace workload needs a file");
    if (s.mode != LoadMode::kOpenLoop) {
      throw SettingsError("concurrency", "the trace workload sends at the trace's timestamps "
                                         "(open loop); it cannot run as a closed loop");
    }
    if (!(s.workload.time_scale > 0) || !std::isfinite(s.workload.time_scale)) {
      throw SettingsError("time-scale", "must be > 0");
    }
    if (s.workload.trace_block_tokens < 1) throw SettingsError("trace-block", "must be >= 1");
    if (s.workload.distinct_prompts > 0) {
      throw SettingsError("distinct-prompts", "the trace says which prompts repeat");
    }
  }
  if (s.workload.kind == WorkloadKind::kShareGpt && s.workload.dataset.empty()) {
    throw SettingsError("dataset", "the sharegpt workload needs a ShareGPT JSON file");
  }
  if (s.workload.distinct_prompts < 0) throw SettingsError("distinct-prompts", "must be >= 0");
  if (s.workload.multi_turn < 1 || s.workload.multi_turn > kMaxMultiTurn) {
    throw SettingsError("multi-turn",
                        "must be a number of turns in [1, " + std::to_string(kMaxMultiTurn) +
                            "] (1 = single turn), got " + std::to_string(s.workload.multi_turn));
  }
  if (s.workload.think_time_ms < 0 || s.workload.think_time_ms > kMaxThinkTimeMs) {
    throw SettingsError("think-time-ms", "must be in [0, " + std::to_string(kMaxThinkTimeMs) +
                                             "] milliseconds, got " +
                                             std::to_string(s.workload.think_time_ms));
  }
  if (s.workload.max_context_tokens < 0) {
    throw SettingsError("max-context-tokens", "must be >= 0 (0 = no limit)");
  }
  if (s.workload.multi_turn > 1 && s.workload.kind == WorkloadKind::kTrace) {
    throw SettingsError("multi-turn", "a trace replays its own requests at their timestamps; "
                                      "sessions apply to the other workloads");
  }
  if (s.workload.multi_turn == 1 && s.workload.think_time_ms > 0) {
    throw SettingsError("think-time-ms", "is the pause between a session's turns: it needs "
                                         "--multi-turn N > 1");
  }
  if (s.min_tokens < 0) throw SettingsError("min-tokens", "must be >= 0");
  if (s.workload.input_unit == InputUnit::kTokens && s.workload.kind != WorkloadKind::kSynthetic) {
    throw SettingsError("input-unit", "tokens sizes the synthetic workload's prompts only");
  }
  if (s.slo.ttft_ms && !(*s.slo.ttft_ms > 0)) throw SettingsError("slo", "ttft_ms must be > 0");
  if (s.slo.tpot_ms && !(*s.slo.tpot_ms > 0)) throw SettingsError("slo", "tpot_ms must be > 0");
  if (s.slo.e2e_ms && !(*s.slo.e2e_ms > 0)) throw SettingsError("slo", "e2e_ms must be > 0");
  if (!(s.validity.max_send_lag_p99_ms > 0)) {
    throw SettingsError("max-send-lag-p99-ms", "must be > 0");
  }
  if (!(s.validity.max_send_lag_share >= 0 && s.validity.max_send_lag_share < 1)) {
    throw SettingsError("max-send-lag-share", "must be in [0, 1)");
  }
  if (!(s.validity.min_achieved_rate_fraction > 0 && s.validity.min_achieved_rate_fraction <= 1)) {
    throw SettingsError("min-achieved", "must be in (0, 1]");
  }
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature)) {
    throw SettingsError("temperature", "must be >= 0");
  }
  if (s.max_connections < 1) throw SettingsError("max-connections", "must be >= 1");
  if (s.spin_us < 0 || s.spin_us > 10000) throw SettingsError("spin-us", "must be in [0, 10000]");
  if (s.realtime_priority < 0 || s.realtime_priority > 99) {
    throw SettingsError("realtime-priority", "must be 0 (off) or a SCHED_FIFO priority 1..99");
  }
  if (!s.extra_body.is_null() && !s.extra_body.is_object()) {
    throw SettingsError("extra-body", "must be a JSON object (its keys are added to each request)");
  }
  if (const std::string field = ReservedRequestField(s.extra_body); !field.empty()) {
    throw SettingsError("extra-body", "may not set '" + field +
                                          "': the load generator sets it, and overriding it would "
                                          "change what is measured");
  }
  if (s.max_schedule_bytes < 1) throw SettingsError("max-schedule-bytes", "must be >= 1");
}

std::string_view ArrivalName(Arrival arrival) {
  switch (arrival) {
    case Arrival::kPoisson:
      return "poisson";
    case Arrival::kGamma:
      return "gamma";
    case Arrival::kConstant:
      return "constant";
  }
  return "?";
}

Arrival ParseArrival(std::string_view name) {
  if (name == "poisson") return Arrival::kPoisson;
  if (name == "gamma") return Arrival::kGamma;
  if (name == "constant") return Arrival::kConstant;
  throw SettingsError(
      "arrival", "unknown arrival '" + std::string(name) + "' (known: poisson, gamma, constant)");
}

std::string_view LoadModeName(LoadMode mode) {
  return mode == LoadMode::kOpenLoop ? "open_loop" : "closed_loop";
}

std::string_view LengthDistributionName(LengthDistributionKind kind) {
  switch (kind) {
    case LengthDistributionKind::kConstant:
      return "constant";
    case LengthDistributionKind::kUniform:
      return "uniform";
    case LengthDistributionKind::kNormal:
      return "normal";
    case LengthDistributionKind::kLogNormal:
      return "lognormal";
  }
  return "?";
}

LengthDistributionKind ParseLengthDistribution(std::string_view name, const std::string& field) {
  if (name == "constant") return LengthDistributionKind::kConstant;
  if (name == "uniform") return LengthDistributionKind::kUniform;
  if (name == "normal") return LengthDistributionKind::kNormal;
  if (name == "lognormal") return LengthDistributionKind::kLogNormal;
  throw SettingsError(field, "unknown distribution '" + std::string(name) +
                                 "' (known: constant, uniform, normal, lognormal)");
}

std::string_view WorkloadName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kSynthetic:
      return "synthetic";
    case WorkloadKind::kPasskey:
      return "passkey";
    case WorkloadKind::kPromptFile:
      return "file";
    case WorkloadKind::kShareGpt:
      return "sharegpt";
    case WorkloadKind::kTrace:
      return "trace";
  }
  return "?";
}

std::string_view InputUnitName(InputUnit unit) {
  return unit == InputUnit::kTokens ? "tokens" : "words";
}

InputUnit ParseInputUnit(std::string_view name) {
  if (name == "words") return InputUnit::kWords;
  if (name == "tokens") return InputUnit::kTokens;
  throw SettingsError("input-unit",
                      "unknown unit '" + std::string(name) + "' (known: words, tokens)");
}

WorkloadKind ParseWorkload(std::string_view name) {
  if (name == "synthetic") return WorkloadKind::kSynthetic;
  if (name == "passkey") return WorkloadKind::kPasskey;
  if (name == "file") return WorkloadKind::kPromptFile;
  if (name == "sharegpt") return WorkloadKind::kShareGpt;
  if (name == "trace") return WorkloadKind::kTrace;
  throw SettingsError("workload", "unknown workload '" + std::string(name) +
                                      "' (known: synthetic, passkey, file, sharegpt, trace)");
}

}  // namespace kvgate::loadgen
