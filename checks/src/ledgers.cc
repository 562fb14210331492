#include "kvgate/checks/ledgers.h"

#include <set>

#include "kvgate/checks/completion_client.h"
#include "kvgate/checks/errors.h"

namespace kvgate::checks {
namespace {

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

void RequirePrefix(std::string_view prefix) {
  if (prefix.empty()) {
    throw InvalidSetting("ledger prefix", "must not be empty (the server's series are named "
                                          "<prefix>capacity_bytes, ...)");
  }
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

LedgerSnapshot ExtractLedgers(const Exposition& exposition, std::string_view prefix) {
  RequirePrefix(prefix);
  LedgerSnapshot out;
  out.prefix = prefix;
  std::set<std::string> seen;
  for (const MetricSample& sample : exposition.samples) {
    bool keep = false;
    if (StartsWith(sample.name, prefix)) {
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
    const std::string series = std::string(prefix) + std::string(name);
    if (seen.count(series) == 0) out.missing.push_back(series);
  }
  return out;
}

LedgerSnapshot ScrapeLedgers(const std::string& url, std::string_view prefix,
                             const http::ClientConfig& config, std::chrono::milliseconds timeout) {
  RequirePrefix(prefix);  // before any connection
  ServerUrl server = ServerUrl::Parse(url);
  const std::string where = server.Join("/metrics");
  std::string body = HttpGet(server, "/metrics", timeout, config);
  Exposition exposition;
  try {
    exposition = ParsePrometheusText(body);
  } catch (const ExpositionError& e) {
    throw ServerError(where, 200, std::string("not Prometheus text: ") + e.what());
  }
  LedgerSnapshot out = ExtractLedgers(exposition, prefix);
  out.url = where;
  return out;
}

}  // namespace kvgate::checks
