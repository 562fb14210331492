#include "kvgate/checks/ledgers.h"

#include <set>

#include "kvgate/checks/completion_client.h"
#include "kvgate/checks/errors.h"

namespace kvgate::checks {
namespace {

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

double LedgerSnapshot::Total(std::string_view name) const {
  double sum = 0.0;
  for (const auto& [key, value] : values) {
    if (key == name ||
        (StartsWith(key, name) && key.size() > name.size() && key[name.size()] == '{')) {
      sum += value;
    }
  }
  return sum;
}

LedgerSnapshot ExtractLedgers(const Exposition& exposition) {
  LedgerSnapshot out;
  std::set<std::string> seen;
  for (const MetricSample& sample : exposition.samples) {
    bool keep = false;
    if (StartsWith(sample.name, "readkv_")) {
      keep = true;
    } else if (StartsWith(sample.name, "vllm:")) {
      std::string type = exposition.TypeOf(sample.name);
      keep = type == "counter" || type == "gauge";
    }
    if (!keep) continue;
    out.values[SeriesKey(sample)] = sample.value;
    seen.insert(sample.name);
  }
  for (std::string_view name : kLedgerSeries) {
    if (seen.count(std::string(name)) == 0) out.missing.emplace_back(name);
  }
  return out;
}

LedgerSnapshot ScrapeLedgers(const std::string& url, const http::ClientConfig& config,
                             std::chrono::milliseconds timeout) {
  ServerUrl server = ServerUrl::Parse(url);
  const std::string where = server.Join("/metrics");
  std::string body = HttpGet(server, "/metrics", timeout, config);
  Exposition exposition;
  try {
    exposition = ParsePrometheusText(body);
  } catch (const ExpositionError& e) {
    throw ServerError(where, 200, std::string("not Prometheus text: ") + e.what());
  }
  LedgerSnapshot out = ExtractLedgers(exposition);
  out.url = where;
  return out;
}

}  // namespace kvgate::checks
