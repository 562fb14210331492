#include "http_target.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvgate::loadgen::internal {
namespace {

TEST(HttpTargetTest, BodyCarriesTheOpenAiFieldsTheGeneratorPromises) {
  LoadSettings settings;
  RequestSpec spec{"hello", 7, -1, 0};
  nlohmann::json body = nlohmann::json::parse(RenderBody("m", spec, settings, http::Endpoint::kCompletions));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], "hello");
  EXPECT_EQ(body["max_tokens"], 7);
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  settings.stream = false;
  EXPECT_FALSE(nlohmann::json::parse(RenderBody("m", spec, settings, http::Endpoint::kCompletions)).contains("stream_options"));
  // A candidate's extra request fields are merged in at the top level.
  settings.extra_body = {{"readkv", {{"read_bits", 2}}}};
  EXPECT_EQ(nlohmann::json::parse(RenderBody("m", spec, settings, http::Endpoint::kCompletions))["readkv"]["read_bits"], 2);
}

TEST(HttpTargetTest, ChatBodySendsTheSamePromptAsOneUserMessage) {
  LoadSettings settings;
  RequestSpec spec{"hello", 7, -1, 0};
  nlohmann::json body =
      nlohmann::json::parse(RenderBody("m", spec, settings, http::Endpoint::kChat));
  EXPECT_FALSE(body.contains("prompt"));
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"], "hello");
  EXPECT_EQ(body["max_tokens"], 7);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
}

TEST(HttpTargetTest, HeaderHasLengthAndRequestId) {
  Target target{"http://h:1", "m", {"secret", {http::ParseHeader("X-Tenant: t")}, "", false},
                http::Endpoint::kCompletions};
  std::string header =
      RenderHeader(RenderHeaderPrefix(ParseTargetUrl(target), target, true), 42, 99);
  EXPECT_EQ(header.rfind("POST /v1/completions HTTP/1.1\r\nHost: h:1\r\n", 0), 0u);
  EXPECT_NE(header.find("Authorization: Bearer secret\r\n"), std::string::npos);
  EXPECT_NE(header.find("X-Tenant: t\r\n"), std::string::npos);
  target.endpoint = http::Endpoint::kChat;
  EXPECT_EQ(RenderHeaderPrefix(ParseTargetUrl(target), target, true)
                .rfind("POST /v1/chat/completions HTTP/1.1\r\n", 0),
            0u);
  EXPECT_NE(header.find("X-Request-Id: 42\r\n"), std::string::npos);
  EXPECT_TRUE(header.ends_with("Content-Length: 99\r\n\r\n"));
}

}  // namespace
}  // namespace kvgate::loadgen::internal
