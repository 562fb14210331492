// Resource ledgers read from a server's /metrics: the optional ledger series of the contract
// (docs/contract.md, "Ledgers": capacity, logical reads, physical traffic, workspace peak, encode
// cost), each named <prefix><series> under the server's own ledger prefix (the reference
// server's is "readkv_"; a policy's [<server>] ledger_prefix), and vLLM's vllm:* counters and
// gauges, so a run can record them for any kind of server.
#pragma once

#include "kvgate/http/client_config.h"

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/checks/prometheus_text.h"

namespace kvgate::checks {

// The ledger series the suite records with every run, without the server's prefix.
inline constexpr std::string_view kLedgerSeries[] = {
    "capacity_bytes", "logical_read_bytes_total", "physical_traffic_bytes_total",
    "workspace_peak_bytes", "encode_seconds_total"};

struct LedgerSnapshot {
  std::string url;     // the /metrics URL read
  std::string prefix;  // the ledger prefix the series were read under
  // SeriesKey (name{labels}) → value: every sample whose name starts with the prefix, and every
  // vllm:* sample whose family is a counter or a gauge (histogram and summary series are left
  // out).
  std::map<std::string, double> values;
  std::vector<std::string> missing;  // <prefix><kLedgerSeries> the server did not expose

  // Sum over all label sets of the series `name` (e.g. both KV backends); 0 when absent.
  double Total(std::string_view name) const;
};

// Picks the ledger series named under `prefix` (non-empty; InvalidSetting otherwise) out of a
// parsed exposition.
LedgerSnapshot ExtractLedgers(const Exposition& exposition, std::string_view prefix);

// GET <url>/metrics and ExtractLedgers. Throws InvalidSetting (bad URL or empty prefix),
// ServerUnreachable, or ServerError (non-200, or a body that is not Prometheus text; the message
// names the URL).
LedgerSnapshot ScrapeLedgers(const std::string& url, std::string_view prefix,
                             const http::ClientConfig& config = {},
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

}  // namespace kvgate::checks
