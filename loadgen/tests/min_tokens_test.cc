// --min-tokens against the real fixture server on 127.0.0.1: every request carries min_tokens
// (capped at its max_tokens) and ignore_eos, and the result says whether the outputs had exactly
// the asked-for length, from usage.completion_tokens.
#include <gtest/gtest.h>

#include "fixture_server.h"
#include "kvgate/loadgen/report.h"
#include "kvgate/loadgen/run_load.h"

namespace kvgate::loadgen {
namespace {

using testing::FixtureOptions;
using testing::FixtureReply;
using testing::FixtureServer;

LoadSettings Settings() {
  LoadSettings s;
  s.mode = LoadMode::kClosedLoop;
  s.concurrency = 2;
  s.requests = 6;
  s.request_timeout_s = 10;
  s.workload.input.mean = 8;
  s.workload.output.mean = 5;
  return s;
}

TEST(MinTokensTest, SendsMinTokensCappedAtMaxTokensAndIgnoreEos) {
  FixtureServer server;
  LoadSettings s = Settings();
  s.min_tokens = 3;
  s.ignore_eos = false;
  LoadResult result = RunLoad(s, {server.url(), ""});
  const nlohmann::json body = server.last_request_body();
  EXPECT_EQ(body["min_tokens"], 3);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_TRUE(result.output_tokens_exact) << result.output_lengths;
  EXPECT_EQ(result.output_lengths,
            "exact for 6/6 completed requests (usage.completion_tokens == max_tokens)");
  EXPECT_NE(FormatSummary(result).find("Output lengths:"), std::string::npos);
  EXPECT_EQ(LoadResultToJson(result, false)["settings"]["min_tokens"], 3);

  s.min_tokens = 50;  // above max_tokens: capped, as a server refuses min_tokens > max_tokens
  RunLoad(s, {server.url(), ""});
  EXPECT_EQ(server.last_request_body()["min_tokens"], 5);

  s.min_tokens = 0;
  RunLoad(s, {server.url(), ""});
  EXPECT_FALSE(server.last_request_body().contains("min_tokens"));
}

TEST(MinTokensTest, OutputsThatStopEarlyAreCountedAsNotExact) {
  FixtureOptions options;
  options.plan = [](int64_t id) {
    FixtureReply reply;
    if (id % 3 == 0) reply.tokens = 2;  // stops before max_tokens, as at an EOS
    return reply;
  };
  FixtureServer server(options);
  LoadSettings s = Settings();
  s.min_tokens = 5;
  LoadResult result = RunLoad(s, {server.url(), ""});
  EXPECT_FALSE(result.output_tokens_exact);
  EXPECT_EQ(result.output_lengths,
            "exact for 4/6 completed requests (usage.completion_tokens == max_tokens)");
  EXPECT_EQ(LoadResultToJson(result, false)["output_tokens_exact"], false);
}

TEST(MinTokensTest, NegativeIsRefused) {
  LoadSettings s = Settings();
  s.min_tokens = -1;
  EXPECT_THROW(ValidateSettings(s), SettingsError);
}

}  // namespace
}  // namespace kvgate::loadgen
