#include "kvgate/checks/ledgers.h"

#include <gtest/gtest.h>

#include "kvgate/checks/errors.h"
#include "scripted_server.h"

namespace kvgate::checks {
namespace {

using testing::ScriptedReply;
using testing::ScriptedRequest;
using testing::ScriptedServer;

constexpr char kMetrics[] = R"(# HELP readkv_capacity_bytes Persistent KV bytes.
# TYPE readkv_capacity_bytes gauge
readkv_capacity_bytes{backend="readkv"} 1.5e6
readkv_capacity_bytes{backend="fp8"} 500000
# TYPE readkv_logical_read_bytes counter
readkv_logical_read_bytes_total{backend="readkv"} 123456789
# TYPE readkv_physical_traffic_bytes counter
readkv_physical_traffic_bytes_total{backend="readkv"} 2.5e8
# TYPE readkv_workspace_peak_bytes gauge
readkv_workspace_peak_bytes{backend="readkv"} 65536
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="tiny"} 4096
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="tiny"} 0.25
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="tiny"} 9
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 1.5
vllm:time_to_first_token_seconds_count{model_name="tiny"} 9
process_cpu_seconds_total 12
# HELP vllm:generation_tokens_total Python-client style: TYPE names the _total series.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="tiny"} 77.0
vllm:generation_tokens_created{model_name="tiny"} 1.7e9
)";

// The reference server's prefix, as a policy's default ledger_prefix names it.
constexpr char kPrefix[] = "readkv_";

TEST(ExtractLedgersTest, KeepsThePrefixedSeriesAndVllmCountersAndGauges) {
  LedgerSnapshot s = ExtractLedgers(ParsePrometheusText(kMetrics), kPrefix);
  EXPECT_EQ(s.prefix, kPrefix);
  EXPECT_DOUBLE_EQ(s.values.at("readkv_capacity_bytes{backend=\"readkv\"}"), 1.5e6);
  EXPECT_DOUBLE_EQ(s.values.at("readkv_capacity_bytes{backend=\"fp8\"}"), 5e5);
  EXPECT_DOUBLE_EQ(s.values.at("readkv_logical_read_bytes_total{backend=\"readkv\"}"), 123456789);
  EXPECT_DOUBLE_EQ(s.values.at("vllm:prompt_tokens_total{model_name=\"tiny\"}"), 4096);
  EXPECT_DOUBLE_EQ(s.values.at("vllm:kv_cache_usage_perc{model_name=\"tiny\"}"), 0.25);
  EXPECT_EQ(s.values.count("vllm:time_to_first_token_seconds_sum{model_name=\"tiny\"}"), 0u);
  EXPECT_EQ(s.values.count("process_cpu_seconds_total"), 0u);
  EXPECT_DOUBLE_EQ(s.values.at("vllm:generation_tokens_total{model_name=\"tiny\"}"), 77.0);
  EXPECT_EQ(s.values.count("vllm:generation_tokens_created{model_name=\"tiny\"}"), 0u);
  EXPECT_EQ(s.values.size(), 8u);
  EXPECT_EQ(s.missing, std::vector<std::string>{"readkv_encode_seconds_total"});
  EXPECT_DOUBLE_EQ(s.Total("readkv_capacity_bytes"), 2e6);
  EXPECT_DOUBLE_EQ(s.Total("readkv_capacity"), 0.0);  // a prefix is not a series
  EXPECT_DOUBLE_EQ(s.Total("readkv_encode_seconds_total"), 0.0);
}

// Another server's series under its own prefix: the same ledgers, and nothing of a server whose
// names merely look alike.
TEST(ExtractLedgersTest, ReadsTheSeriesUnderAnotherServersPrefix) {
  const std::string metrics = std::string(R"(# TYPE acme_kv_capacity_bytes gauge
acme_kv_capacity_bytes{pool="a"} 100
acme_kv_capacity_bytes{pool="b"} 20
acme_kv_encode_seconds_total 0.5
)") + kMetrics;
  LedgerSnapshot s = ExtractLedgers(ParsePrometheusText(metrics), "acme_kv_");
  EXPECT_DOUBLE_EQ(s.Total("acme_kv_capacity_bytes"), 120.0);
  EXPECT_DOUBLE_EQ(s.Total("acme_kv_encode_seconds_total"), 0.5);
  EXPECT_EQ(s.values.count("readkv_capacity_bytes{backend=\"readkv\"}"), 0u);
  EXPECT_EQ(s.missing, (std::vector<std::string>{"acme_kv_logical_read_bytes_total",
                                                  "acme_kv_physical_traffic_bytes_total",
                                                  "acme_kv_workspace_peak_bytes"}));
  EXPECT_EQ(s.values.size(), 3u + 3u);  // its three samples and the three vllm:* ones
}

TEST(ExtractLedgersTest, AnEmptyPrefixIsRefusedNamingIt) {
  try {
    ExtractLedgers(ParsePrometheusText(kMetrics), "");
    FAIL() << "expected InvalidSetting";
  } catch (const InvalidSetting& e) {
    EXPECT_EQ(e.field(), "ledger prefix");
  }
}

TEST(ScrapeLedgersTest, ReadsTheServersMetricsOverHttp) {
  ScriptedServer server([](const ScriptedRequest& request) {
    if (request.method == "GET" && request.target == "/metrics") {
      return ScriptedReply{200, kMetrics, "text/plain; version=0.0.4"};
    }
    return ScriptedReply{404, "{}"};
  });
  LedgerSnapshot s = ScrapeLedgers(server.url() + "/v1", kPrefix);
  EXPECT_EQ(s.url, server.url() + "/metrics");
  EXPECT_DOUBLE_EQ(s.Total("readkv_physical_traffic_bytes_total"), 2.5e8);
  EXPECT_DOUBLE_EQ(s.Total("readkv_workspace_peak_bytes"), 65536);
}

TEST(ScrapeLedgersTest, ReportsHttpErrorsAndNonPrometheusBodiesNamingTheUrl) {
  ScriptedServer missing([](const ScriptedRequest&) {
    return ScriptedReply{404, R"({"error": {"message": "no such path"}})"};
  });
  try {
    ScrapeLedgers(missing.url(), kPrefix);
    FAIL() << "expected ServerError";
  } catch (const ServerError& e) {
    EXPECT_EQ(e.http_status(), 404);
    EXPECT_EQ(std::string(e.what()), missing.url() + "/metrics: HTTP 404: no such path");
  }
  ScriptedServer garbage([](const ScriptedRequest&) {
    return ScriptedReply{200, "<html>hello</html>", "text/html"};
  });
  try {
    ScrapeLedgers(garbage.url(), kPrefix);
    FAIL() << "expected ServerError";
  } catch (const ServerError& e) {
    EXPECT_NE(std::string(e.what()).find(garbage.url() + "/metrics: not Prometheus text"),
              std::string::npos);
  }
}

TEST(ScrapeLedgersTest, UnreachableServerThrowsNamingTheUrl) {
  const std::string url = "http://127.0.0.1:" + std::to_string(testing::UnusedPort());
  try {
    ScrapeLedgers(url, kPrefix);
    FAIL() << "expected ServerUnreachable";
  } catch (const ServerUnreachable& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot reach server at " + url, 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace kvgate::checks
