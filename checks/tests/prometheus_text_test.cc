#include "kvgate/checks/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kvgate/checks/errors.h"

namespace kvgate::checks {
namespace {

// Hand-written exposition in the style of prometheus-cpp and vLLM, with every lexical corner the
// format allows.
constexpr char kExposition[] =
    R"(# HELP readkv_capacity_bytes Persistent KV bytes (payload + metadata).
# TYPE readkv_capacity_bytes gauge
readkv_capacity_bytes{backend="readkv",model="tiny"} 1.048576e6
readkv_capacity_bytes{backend="fp8",model="tiny"} 2097152
# a free comment that is neither HELP nor TYPE
#another one

# TYPE readkv_encode_seconds counter
readkv_encode_seconds_total{backend="readkv"} 0.125 1700000000000
  readkv_odd_label{path="C:\\kv\\",quote="say \"hi\"",nl="a\nb",} +Inf
# HELP vllm:e2e_request_latency_seconds Histogram of e2e latency\nin seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="m"} 3
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 7
vllm:e2e_request_latency_seconds_sum{model_name="m"} 12.5
vllm:e2e_request_latency_seconds_count{model_name="m"} 7
neg_values{kind="a"} -Inf
neg_values{kind="b"} NaN
neg_values{kind="c"}	-1.5E-3
no_labels 42
spaced_labels { a = "1" , b="2" } 3
)";

TEST(PrometheusTextTest, ParsesSamplesLabelsAndSpecialValues) {
  Exposition e = ParsePrometheusText(kExposition);
  ASSERT_EQ(e.samples.size(), 13u);
  const MetricSample& capacity = e.samples[0];
  EXPECT_EQ(capacity.name, "readkv_capacity_bytes");
  EXPECT_EQ(capacity.Label("backend"), "readkv");
  EXPECT_EQ(capacity.Label("model"), "tiny");
  EXPECT_EQ(capacity.Label("absent"), std::nullopt);
  EXPECT_DOUBLE_EQ(capacity.value, 1048576.0);
  EXPECT_DOUBLE_EQ(e.samples[1].value, 2097152.0);

  const MetricSample& encode = e.samples[2];
  EXPECT_EQ(encode.name, "readkv_encode_seconds_total");
  EXPECT_DOUBLE_EQ(encode.value, 0.125);
  EXPECT_EQ(encode.timestamp_ms, 1700000000000);
  EXPECT_EQ(e.samples[0].timestamp_ms, std::nullopt);

  const MetricSample& odd = e.samples[3];
  EXPECT_EQ(odd.Label("path"), "C:\\kv\\");
  EXPECT_EQ(odd.Label("quote"), "say \"hi\"");
  EXPECT_EQ(odd.Label("nl"), "a\nb");
  EXPECT_TRUE(std::isinf(odd.value) && odd.value > 0);

  EXPECT_EQ(e.samples[5].Label("le"), "+Inf");
  EXPECT_DOUBLE_EQ(e.samples[5].value, 7.0);
  EXPECT_TRUE(std::isinf(e.samples[8].value) && e.samples[8].value < 0);
  EXPECT_TRUE(std::isnan(e.samples[9].value));
  EXPECT_DOUBLE_EQ(e.samples[10].value, -1.5e-3);
  EXPECT_TRUE(e.samples[11].labels.empty());
  EXPECT_DOUBLE_EQ(e.samples[11].value, 42.0);
  EXPECT_EQ(e.samples[12].Label("a"), "1");
  EXPECT_EQ(e.samples[12].Label("b"), "2");
}

TEST(PrometheusTextTest, KeepsHelpAndTypeAndResolvesFamilies) {
  Exposition e = ParsePrometheusText(kExposition);
  EXPECT_EQ(e.help.at("readkv_capacity_bytes"), "Persistent KV bytes (payload + metadata).");
  EXPECT_EQ(e.help.at("vllm:e2e_request_latency_seconds"), "Histogram of e2e latency\nin seconds.");
  EXPECT_EQ(e.TypeOf("readkv_capacity_bytes"), "gauge");
  EXPECT_EQ(e.TypeOf("readkv_encode_seconds_total"), "counter");
  EXPECT_EQ(e.TypeOf("vllm:e2e_request_latency_seconds_bucket"), "histogram");
  EXPECT_EQ(e.TypeOf("vllm:e2e_request_latency_seconds_sum"), "histogram");
  EXPECT_EQ(e.TypeOf("vllm:e2e_request_latency_seconds_count"), "histogram");
  EXPECT_EQ(e.TypeOf("readkv_capacity_bytes_total"), "untyped");  // a gauge has no _total
  EXPECT_EQ(e.TypeOf("no_labels"), "untyped");
}

TEST(PrometheusTextTest, SeriesKeyIsCanonical) {
  Exposition e = ParsePrometheusText(
      "m{b=\"2\",a=\"x\\\"y\"} 1\n"
      "m{a=\"x\\\"y\",b=\"2\"} 1\n"
      "m 3\n");
  EXPECT_EQ(SeriesKey(e.samples[0]), "m{a=\"x\\\"y\",b=\"2\"}");
  EXPECT_EQ(SeriesKey(e.samples[0]), SeriesKey(e.samples[1]));
  EXPECT_EQ(SeriesKey(e.samples[2]), "m");
}

TEST(PrometheusTextTest, AcceptsEmptyTextAndCrlfLines) {
  EXPECT_TRUE(ParsePrometheusText("").samples.empty());
  Exposition e = ParsePrometheusText("# TYPE a counter\r\na_total 1\r\n");
  ASSERT_EQ(e.samples.size(), 1u);
  EXPECT_DOUBLE_EQ(e.samples[0].value, 1.0);
}

// The line number and message of the error `text` raises.
std::pair<int64_t, std::string> ErrorOf(const std::string& text) {
  try {
    ParsePrometheusText(text);
  } catch (const ExpositionError& e) {
    return {e.line(), e.what()};
  }
  return {0, ""};
}

TEST(PrometheusTextTest, RejectsMalformedLinesNamingTheLine) {
  EXPECT_EQ(ErrorOf("ok 1\nmissing_value\n").first, 2);
  EXPECT_EQ(ErrorOf("ok 1\nmissing_value\n").second,
            "metrics text line 2: sample missing_value has no value");
  EXPECT_EQ(ErrorOf("a 1\nb 2\nbad_number abc\n").first, 3);
  EXPECT_EQ(ErrorOf("x 1e\n").first, 1);
  EXPECT_EQ(ErrorOf("x infinity\n").first, 1);
  EXPECT_EQ(ErrorOf("x{a=\"open} 1\n").second,
            "metrics text line 1: label a: unterminated quoted value");
  EXPECT_EQ(ErrorOf("x{a=\"\\t\"} 1\n").second,
            "metrics text line 1: label a: invalid escape '\\t'");
  EXPECT_EQ(ErrorOf("x{a=1} 1\n").second,
            "metrics text line 1: label a: value must start with '\"'");
  EXPECT_EQ(ErrorOf("x{a=\"1\",a=\"2\"} 1\n").second, "metrics text line 1: label a appears twice");
  EXPECT_EQ(ErrorOf("x{a=\"1\" b=\"2\"} 1\n").second,
            "metrics text line 1: expected ',' or '}' after label a");
  EXPECT_EQ(ErrorOf("x 1 123 extra\n").second,
            "metrics text line 1: sample x: unexpected text after the timestamp");
  EXPECT_EQ(ErrorOf("x 1 12.5\n").first, 1);
  EXPECT_EQ(ErrorOf("# TYPE x widget\n").second,
            "metrics text line 1: unknown metric type 'widget' for x");
  EXPECT_EQ(ErrorOf("# TYPE x gauge\n# TYPE x gauge\n").first, 2);
  EXPECT_EQ(ErrorOf("9lives 1\n").first, 1);
  EXPECT_EQ(ErrorOf("x{9=\"1\"} 1\n").first, 1);
}

}  // namespace
}  // namespace kvgate::checks
