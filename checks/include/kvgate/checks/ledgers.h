// Resource ledgers read from a server's /metrics: our server's readkv_* series (capacity,
// logical reads, physical traffic, workspace peak, encode cost; docs/ledgers.md) and
// vLLM's vllm:* counters and gauges, so a run can record them for either kind of server.
#pragma once

#include "kvgate/http/client_config.h"

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/checks/prometheus_text.h"

namespace kvgate::checks {

// The readkv_* ledger series the suite records with every run.
inline constexpr std::string_view kLedgerSeries[] = {
    "readkv_capacity_bytes", "readkv_logical_read_bytes_total",
    "readkv_physical_traffic_bytes_total", "readkv_workspace_peak_bytes",
    "readkv_encode_seconds_total"};

struct LedgerSnapshot {
  std::string url;  // the /metrics URL read
  // SeriesKey (name{labels}) → value: every readkv_* sample, and every vllm:* sample whose family
  // is a counter or a gauge (histogram and summary series are left out).
  std::map<std::string, double> values;
  std::vector<std::string> missing;  // names from kLedgerSeries that the server did not expose

  // Sum over all label sets of the series `name` (e.g. both KV backends); 0 when absent.
  double Total(std::string_view name) const;
};

// Picks the ledger series out of a parsed exposition.
LedgerSnapshot ExtractLedgers(const Exposition& exposition);

// GET <url>/metrics and ExtractLedgers. Throws InvalidSetting (bad URL), ServerUnreachable, or
// ServerError (non-200, or a body that is not Prometheus text; the message names the URL).
LedgerSnapshot ScrapeLedgers(const std::string& url, const http::ClientConfig& config = {},
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

}  // namespace kvgate::checks
