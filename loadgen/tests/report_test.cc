#include "kvgate/loadgen/report.h"

#include <gtest/gtest.h>

namespace kvgate::loadgen {
namespace {

RequestRecord Sample() {
  RequestRecord r;
  r.index = 3;
  r.scheduled_ns = 1000;
  r.issued_ns = 1100;
  r.sent_ns = 1200;
  r.first_token_ns = 5000;
  r.end_ns = 9000;
  r.chunk_ns = {5000, 7000, 9000};
  r.prompt_tokens = 12;
  r.completion_tokens = 3;
  r.max_tokens = 3;
  r.http_status = 200;
  return r;
}

TEST(ReportTest, RecordSurvivesAJsonRoundTrip) {
  RequestRecord r = Sample();
  r.warmup = true;
  r.error_cause = "reset";
  r.error_text = "read: connection reset";
  RequestRecord back = RecordFromJson(RecordToJson(r));
  EXPECT_EQ(RecordToJson(back), RecordToJson(r));
  EXPECT_EQ(back.chunk_ns, r.chunk_ns);
  EXPECT_EQ(back.error_cause, "reset");
  EXPECT_THROW(RecordFromJson(nlohmann::json::object()), nlohmann::json::exception);
}

TEST(ReportTest, SummaryTableEndsWithTheResultLine) {
  LoadResult result;
  result.url = "http://127.0.0.1:1";
  result.model = "m";
  result.records = {Sample()};
  result.summary = Summarize(result.records, {}, 1.0);
  result.validity = CheckValidity(result.records, LoadMode::kOpenLoop, {});
  std::string text = FormatSummary(result);
  EXPECT_NE(text.find("Mean TTFT (ms):"), std::string::npos);
  EXPECT_TRUE(text.ends_with(result.validity.ResultLine() + "\n")) << text;
  result.validity.valid = false;
  result.validity.reasons = {"P99 send lag 3.000 ms > 1.000 ms"};
  EXPECT_TRUE(
      FormatSummary(result).ends_with("Result is : INVALID (P99 send lag 3.000 ms > 1.000 ms)\n"));
}

TEST(ReportTest, ResultJsonHasSummaryValidityAndEveryRecord) {
  LoadResult result;
  result.records = {Sample(), Sample()};
  result.summary = Summarize(result.records, {}, 1.0);
  result.validity = CheckValidity(result.records, LoadMode::kOpenLoop, {});
  nlohmann::json j = LoadResultToJson(result);
  EXPECT_EQ(j["records"].size(), 2u);
  EXPECT_EQ(j["summary"]["completed"], 2);
  EXPECT_NEAR(j["summary"]["ttft"]["p50_ms"].get<double>(), 0.004, 1e-12);
  EXPECT_TRUE(j["validity"].contains("send_lag"));
  EXPECT_EQ(j["settings"]["arrival"], "poisson");
  EXPECT_FALSE(LoadResultToJson(result, false).contains("records"));
}

}  // namespace
}  // namespace kvgate::loadgen
