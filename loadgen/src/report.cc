#include "kvgate/loadgen/report.h"

#include <cstdio>
#include <sstream>

namespace kvgate::loadgen {
namespace {

std::string Format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

// One "name .... value" row of the table, 50 columns wide like vLLM's benchmark output.
void Row(std::ostringstream& out, const std::string& name, const std::string& value) {
  constexpr size_t kWidth = 50;
  out << name;
  size_t used = name.size() + value.size();
  out << std::string(used < kWidth ? kWidth - used : 1, ' ') << value << "\n";
}

void Title(std::ostringstream& out, const std::string& title) {
  constexpr size_t kWidth = 50;
  std::string text = " " + title + " ";
  size_t side = text.size() < kWidth ? (kWidth - text.size()) / 2 : 0;
  std::string line = std::string(side, '-') + text;
  out << line << std::string(line.size() < kWidth ? kWidth - line.size() : 0, '-') << "\n";
}

void LatencyRows(std::ostringstream& out, const std::string& name, const LatencyStats& stats) {
  Title(out, name);
  if (stats.count == 0) {
    Row(out, "(no samples)", "");
    return;
  }
  Row(out, "Mean " + name + " (ms):", Format("%.2f", stats.mean_ms));
  Row(out, "P50 " + name + " (ms):", Format("%.2f", stats.p50_ms));
  Row(out, "P90 " + name + " (ms):", Format("%.2f", stats.p90_ms));
  Row(out, "P99 " + name + " (ms):", Format("%.2f", stats.p99_ms));
  Row(out, "Max " + name + " (ms):", Format("%.2f", stats.max_ms));
}

}  // namespace

std::string FormatSummary(const LoadResult& result) {
  const LoadSettings& s = result.settings;
  const Summary& m = result.summary;
  const Validity& v = result.validity;
  std::ostringstream out;
  out << std::string(18, '=') << " kvgate load result " << std::string(12, '=') << "\n";
  Row(out, "Target:", result.url);
  Row(out, "Model:", result.model);
  Row(out, "Endpoint:", result.endpoint);
  Row(out, "Connection:", result.connection);
  if (!result.workload_source.path.empty()) {
    Row(out, "Workload:", result.workload_source.kind + " " + result.workload_source.path +
                              " (sha256 " + result.workload_source.sha256.substr(0, 16) + "...)");
  }
  Row(out, "Input lengths:", result.input_lengths);
  Row(out, "Output lengths:", result.output_lengths);
  if (result.tls_verification_off) {
    out << "WARNING: TLS certificate verification was OFF (--insecure): the server's identity "
           "was not checked\n";
  }
  if (s.mode == LoadMode::kOpenLoop) {
    Row(out, "Mode:",
        "open loop, " + std::string(ArrivalName(s.arrival)) +
            (s.arrival == Arrival::kGamma ? Format(" (burstiness %.3g)", s.burstiness)
                                          : std::string()));
    Row(out, "Offered rate (req/s):", Format("%.2f", s.rate_rps));
  } else {
    Row(out, "Mode:", "closed loop, concurrency " + std::to_string(s.concurrency));
  }
  if (s.workload.multi_turn > 1) {
    Row(out, "Sessions:", "up to " + std::to_string(s.workload.multi_turn) + " turns, think " +
                              std::to_string(s.workload.think_time_ms) + " ms (mean)");
  }
  Row(out, "Requests (measured / warmup):",
      std::to_string(m.requests) + " / " + std::to_string(s.warmup_requests));
  Row(out, "Completed:", std::to_string(m.completed));
  Row(out, "Errored:", std::to_string(m.errored));
  for (const auto& [cause, count] : m.errors_by_cause) {
    Row(out, "  " + cause + ":", std::to_string(count));
  }
  if (m.missing_usage > 0) Row(out, "Completed without usage:", std::to_string(m.missing_usage));
  Row(out, "Duration (s):", Format("%.3f", m.duration_s));
  Row(out, "Request throughput (req/s):", Format("%.2f", m.request_throughput_rps));
  Row(out, "Input tokens (usage):", std::to_string(m.total_input_tokens));
  Row(out, "Output tokens (usage):", std::to_string(m.total_output_tokens));
  Row(out, "Output token throughput (tok/s):", Format("%.2f", m.output_token_throughput));
  Row(out, "SLO:", s.slo.empty() ? "(none: every completed request is good)" : FormatSlo(s.slo));
  Row(out, "Good requests:", std::to_string(m.good));
  Row(out, "Goodput (req/s):", Format("%.2f", m.goodput_rps));
  Row(out, "SLO attainment (%):", Format("%.2f", 100.0 * m.slo_attainment));
  LatencyRows(out, "TTFT", m.ttft);
  LatencyRows(out, "TPOT", m.tpot);
  LatencyRows(out, "ITL", m.itl);
  LatencyRows(out, "E2E", m.e2e);
  if (!m.ttft_by_turn.empty()) {
    Title(out, "TTFT by turn");
    for (const auto& [turn, stats] : m.ttft_by_turn) {
      Row(out, "Turn " + std::to_string(turn) + " P50 / P99 TTFT (ms):",
          Format("%.2f", stats.p50_ms) + " / " + Format("%.2f", stats.p99_ms) + " (n=" +
              std::to_string(stats.count) + ")");
    }
  }
  Title(out, "Load generator");
  if (v.send_lag.count > 0) {
    Row(out, "P50 send lag (ms):", Format("%.3f", v.send_lag.p50_ms));
    Row(out, "P99 send lag (ms):", Format("%.3f", v.send_lag.p99_ms));
    Row(out, "Max send lag (ms):", Format("%.3f", v.send_lag.max_ms));
  }
  if (v.scheduled_rate_rps) {
    Row(out, "Scheduled send rate (req/s):", Format("%.2f", *v.scheduled_rate_rps));
    Row(out, "Achieved send rate (req/s):", Format("%.2f", *v.achieved_rate_rps));
  }
  if (v.unsent > 0) Row(out, "Never sent:", std::to_string(v.unsent));
  out << std::string(50, '=') << "\n";
  out << v.ResultLine() << "\n";
  return out.str();
}

std::string FormatCapacity(const CapacityResult& result) {
  std::ostringstream out;
  out << std::string(16, '=') << " kvgate capacity search " << std::string(10, '=') << "\n";
  out << "   rate (req/s)   attainment   run\n";
  for (const CapacityProbe& p : result.probes) {
    char line[128];
    std::snprintf(line, sizeof line, "   %12.3f   %9.2f%%   %s%s\n", p.rate_rps,
                  100.0 * p.attainment, p.passed ? "pass" : "fail",
                  p.result.validity.valid ? "" : " (INVALID)");
    out << line;
  }
  Row(out, "Capacity (req/s):",
      result.capacity_rps ? Format("%.3f", *result.capacity_rps) : std::string("below rate_min"));
  out << result.reason << "\n";
  return out.str();
}

nlohmann::json RecordToJson(const RequestRecord& r) {
  return {{"index", r.index},
          {"warmup", r.warmup},
          {"session", r.session},
          {"turn", r.turn},
          {"scheduled_ns", r.scheduled_ns},
          {"issued_ns", r.issued_ns},
          {"sent_ns", r.sent_ns},
          {"first_token_ns", r.first_token_ns},
          {"end_ns", r.end_ns},
          {"chunk_ns", r.chunk_ns},
          {"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"max_tokens", r.max_tokens},
          {"http_status", r.http_status},
          {"error_cause", r.error_cause},
          {"error_text", r.error_text}};
}

RequestRecord RecordFromJson(const nlohmann::json& j) {
  RequestRecord r;
  r.index = j.at("index").get<int64_t>();
  r.warmup = j.at("warmup").get<bool>();
  // Records written before sessions existed: every request was its own one-turn session.
  r.session = j.value("session", r.index);
  r.turn = j.value("turn", 1);
  r.scheduled_ns = j.at("scheduled_ns").get<int64_t>();
  r.issued_ns = j.value("issued_ns", int64_t{-1});
  r.sent_ns = j.at("sent_ns").get<int64_t>();
  r.first_token_ns = j.at("first_token_ns").get<int64_t>();
  r.end_ns = j.at("end_ns").get<int64_t>();
  r.chunk_ns = j.at("chunk_ns").get<std::vector<int64_t>>();
  r.prompt_tokens = j.at("prompt_tokens").get<int>();
  r.completion_tokens = j.at("completion_tokens").get<int>();
  r.max_tokens = j.at("max_tokens").get<int>();
  r.http_status = j.at("http_status").get<int>();
  r.error_cause = j.at("error_cause").get<std::string>();
  r.error_text = j.at("error_text").get<std::string>();
  return r;
}

nlohmann::json LatencyStatsToJson(const LatencyStats& s) {
  if (s.count == 0) return {{"count", 0}};
  return {{"count", s.count},   {"mean_ms", s.mean_ms}, {"min_ms", s.min_ms}, {"p50_ms", s.p50_ms},
          {"p90_ms", s.p90_ms}, {"p95_ms", s.p95_ms},   {"p99_ms", s.p99_ms}, {"max_ms", s.max_ms}};
}

nlohmann::json SummaryToJson(const Summary& m) {
  nlohmann::json j = {{"requests", m.requests},
                      {"completed", m.completed},
                      {"errored", m.errored},
                      {"errors_by_cause", m.errors_by_cause},
                      {"missing_usage", m.missing_usage},
                      {"duration_s", m.duration_s},
                      {"request_throughput_rps", m.request_throughput_rps},
                      {"total_input_tokens", m.total_input_tokens},
                      {"total_output_tokens", m.total_output_tokens},
                      {"input_token_throughput", m.input_token_throughput},
                      {"output_token_throughput", m.output_token_throughput},
                      {"good", m.good},
                      {"goodput_rps", m.goodput_rps},
                      {"slo_attainment", m.slo_attainment},
                      {"ttft", LatencyStatsToJson(m.ttft)},
                      {"tpot", LatencyStatsToJson(m.tpot)},
                      {"itl", LatencyStatsToJson(m.itl)},
                      {"e2e", LatencyStatsToJson(m.e2e)}};
  if (!m.ttft_by_turn.empty()) {
    nlohmann::json by_turn = nlohmann::json::object();
    for (const auto& [turn, stats] : m.ttft_by_turn) {
      by_turn[std::to_string(turn)] = LatencyStatsToJson(stats);
    }
    j["ttft_by_turn"] = std::move(by_turn);
  }
  return j;
}

nlohmann::json ValidityToJson(const Validity& v) {
  nlohmann::json j = {{"valid", v.valid},
                      {"reasons", v.reasons},
                      {"send_lag", LatencyStatsToJson(v.send_lag)},
                      {"unsent", v.unsent},
                      {"result_line", v.ResultLine()}};
  j["scheduled_rate_rps"] = v.scheduled_rate_rps ? nlohmann::json(*v.scheduled_rate_rps) : nullptr;
  j["achieved_rate_rps"] = v.achieved_rate_rps ? nlohmann::json(*v.achieved_rate_rps) : nullptr;
  j["achieved_fraction"] = v.achieved_fraction ? nlohmann::json(*v.achieved_fraction) : nullptr;
  return j;
}

nlohmann::json SettingsToJson(const LoadSettings& s) {
  auto dist = [](const LengthDistribution& d) {
    return nlohmann::json{{"kind", LengthDistributionName(d.kind)},
                          {"mean", d.mean},
                          {"spread", d.spread},
                          {"max", d.max}};
  };
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nullptr; };
  return {{"mode", LoadModeName(s.mode)},
          {"rate_rps", s.rate_rps},
          {"arrival", ArrivalName(s.arrival)},
          {"burstiness", s.burstiness},
          {"concurrency", s.concurrency},
          {"requests", s.requests},
          {"duration_s", s.duration_s},
          {"warmup_requests", s.warmup_requests},
          {"request_timeout_s", s.request_timeout_s},
          {"seed", s.seed},
          {"workload",
           {{"kind", WorkloadName(s.workload.kind)},
            {"input_unit", InputUnitName(s.workload.input_unit)},
            {"input", dist(s.workload.input)},
            {"output", dist(s.workload.output)},
            {"passkey_lengths", s.workload.passkey_lengths},
            {"passkey_depths", s.workload.passkey_depths},
            {"prompt_file", s.workload.prompt_file},
            {"dataset", s.workload.dataset},
            {"trace", s.workload.trace},
            {"time_scale", s.workload.time_scale},
            {"trace_block_tokens", s.workload.trace_block_tokens},
            {"distinct_prompts", s.workload.distinct_prompts},
            {"multi_turn", s.workload.multi_turn},
            {"think_time_ms", s.workload.think_time_ms},
            {"max_context_tokens", s.workload.max_context_tokens}}},
          {"slo",
           {{"ttft_ms", opt(s.slo.ttft_ms)},
            {"tpot_ms", opt(s.slo.tpot_ms)},
            {"e2e_ms", opt(s.slo.e2e_ms)}}},
          {"validity",
           {{"max_send_lag_p99_ms", s.validity.max_send_lag_p99_ms},
            {"max_send_lag_share", s.validity.max_send_lag_share},
            {"min_achieved_rate_fraction", s.validity.min_achieved_rate_fraction}}},
          {"stream", s.stream},
          {"temperature", s.temperature},
          {"ignore_eos", s.ignore_eos},
          {"min_tokens", s.min_tokens},
          {"extra_body", s.extra_body},
          {"max_connections", s.max_connections},
          {"spin_us", s.spin_us},
          {"realtime_priority", s.realtime_priority}};
}

nlohmann::json LoadResultToJson(const LoadResult& result, bool with_records) {
  nlohmann::json j = {{"url", result.url},
                      {"model", result.model},
                      {"endpoint", result.endpoint},
                      {"connection", result.connection},
                      {"tls_verification_off", result.tls_verification_off},
                      {"input_lengths", result.input_lengths},
                      {"input_tokens_exact", result.input_tokens_exact},
                      {"output_lengths", result.output_lengths},
                      {"output_tokens_exact", result.output_tokens_exact},
                      {"workload_source",
                       {{"kind", result.workload_source.kind},
                        {"path", result.workload_source.path},
                        {"sha256", result.workload_source.sha256}}},
                      {"start_unix_ms", result.start_unix_ms},
                      {"start_steady_ns", result.start_steady_ns},
                      {"settings", SettingsToJson(result.settings)},
                      {"summary", SummaryToJson(result.summary)},
                      {"validity", ValidityToJson(result.validity)},
                      {"result", result.validity.valid ? "VALID" : "INVALID"}};
  if (with_records) {
    nlohmann::json records = nlohmann::json::array();
    for (const RequestRecord& r : result.records) records.push_back(RecordToJson(r));
    j["records"] = std::move(records);
  }
  return j;
}

nlohmann::json CapacityToJson(const CapacityResult& result, bool with_records) {
  nlohmann::json probes = nlohmann::json::array();
  for (const CapacityProbe& p : result.probes) {
    probes.push_back({{"rate_rps", p.rate_rps},
                      {"attainment", p.attainment},
                      {"passed", p.passed},
                      {"run", LoadResultToJson(p.result, with_records)}});
  }
  return {{"capacity_rps", result.capacity_rps ? nlohmann::json(*result.capacity_rps) : nullptr},
          {"first_failing_rps",
           result.first_failing_rps ? nlohmann::json(*result.first_failing_rps) : nullptr},
          {"reason", result.reason},
          {"limited_by_generator", result.limited_by_generator},
          {"probes", std::move(probes)}};
}

}  // namespace kvgate::loadgen
