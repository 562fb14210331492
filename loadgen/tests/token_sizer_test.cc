// Token-true prompt lengths (InputUnit::kTokens) against a real HTTP server whose POST /tokenize
// counts with a known rule: every prompt the generator sends then has exactly the asked-for count
// by that rule, and a server without /tokenize makes the result say the lengths are words.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvgate/loadgen/report.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/schedule.h"
#include "tls_test_server.h"

namespace kvgate::loadgen {
namespace {

namespace ht = http::testing;

// The test's tokenizer: BOS plus one token per started group of 3 bytes.
int64_t Tokens(const std::string& text) { return 1 + (static_cast<int64_t>(text.size()) + 2) / 3; }

std::string PromptOf(const nlohmann::json& body) {
  return body.contains("messages") ? body["messages"].back()["content"].get<std::string>()
                                   : body["prompt"].get<std::string>();
}

ht::TestReply Serve(const ht::TestRequest& request, bool tokenize) {
  if (request.target == "/tokenize" && tokenize) {
    const int64_t count = Tokens(PromptOf(nlohmann::json::parse(request.body)));
    return {200, "application/json", {nlohmann::json{{"count", count}}.dump()}, {}};
  }
  if (request.target == "/v1/chat/completions") {
    return {200, "text/event-stream", ht::ChatStreamParts(2, 1), {}};
  }
  return {404, "application/json", {R"({"error":{"message":"no such endpoint"}})"}, {}};
}

LoadSettings TokenSettings() {
  LoadSettings s;
  s.rate_rps = 50;
  s.arrival = Arrival::kConstant;
  s.requests = 6;
  s.request_timeout_s = 10;
  s.workload.input = {LengthDistributionKind::kUniform, 60, 0.5, 1 << 20};
  s.workload.output.mean = 2;
  s.workload.input_unit = InputUnit::kTokens;
  return s;
}

TEST(TokenSizerTest, EveryPromptHasExactlyItsTokenTargetByTheServersCount) {
  ht::TestServer server(false, {}, "", [](const ht::TestRequest& r) { return Serve(r, true); });
  const LoadSettings settings = TokenSettings();
  LoadResult result =
      RunLoad(settings, Target(server.url(), "m", {}, http::Endpoint::kChat));
  EXPECT_TRUE(result.input_tokens_exact) << result.input_lengths;
  EXPECT_NE(result.input_lengths.find("exact for 6/6 prompts"), std::string::npos)
      << result.input_lengths;
  Workload workload = Workload::Create(settings.workload, settings.seed);
  int checked = 0;
  for (const ht::TestRequest& r : server.requests()) {
    if (r.target != "/v1/chat/completions") continue;
    const nlohmann::json body = nlohmann::json::parse(r.body);
    const int64_t index = std::stoll([&] {
      for (const auto& [name, value] : r.headers) {
        if (name == "X-Request-Id") return value;
      }
      return std::string("-1");
    }());
    ASSERT_GE(index, 0);
    EXPECT_EQ(Tokens(PromptOf(body)), workload.At(index).input_length) << index;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
  EXPECT_NE(FormatSummary(result).find("Input lengths:"), std::string::npos);
}

TEST(TokenSizerTest, AServerWithoutTokenizeFallsBackToWordsAndSaysSo) {
  ht::TestServer server(false, {}, "", [](const ht::TestRequest& r) { return Serve(r, false); });
  LoadResult result =
      RunLoad(TokenSettings(), Target(server.url(), "m", {}, http::Endpoint::kChat));
  EXPECT_FALSE(result.input_tokens_exact);
  EXPECT_NE(result.input_lengths.find("no POST /tokenize"), std::string::npos)
      << result.input_lengths;
  for (const RequestRecord& r : result.records) EXPECT_TRUE(r.ok()) << r.error_text;
}

TEST(TokenSizerTest, TokensAreForTheSyntheticWorkloadOnly) {
  LoadSettings settings = TokenSettings();
  settings.workload.kind = WorkloadKind::kPasskey;
  EXPECT_THROW(ValidateSettings(settings), SettingsError);
}

}  // namespace
}  // namespace kvgate::loadgen
