#include "http_target.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvgate::loadgen::internal {
namespace {

TEST(HttpTargetTest, ParsesBaseUrlsAndDropsATrailingV1) {
  ParsedUrl a = ParseUrl("http://127.0.0.1:8000");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, "8000");
  EXPECT_EQ(a.prefix, "");
  EXPECT_EQ(a.host_header, "127.0.0.1:8000");
  ParsedUrl b = ParseUrl("http://localhost/v1/");
  EXPECT_EQ(b.port, "80");
  EXPECT_EQ(b.prefix, "");
  ParsedUrl c = ParseUrl("http://gpu-box:9000/serving/llama/v1");
  EXPECT_EQ(c.prefix, "/serving/llama");
  ParsedUrl d = ParseUrl("http://[::1]:8080");
  EXPECT_EQ(d.host, "::1");
  EXPECT_EQ(d.port, "8080");
}

TEST(HttpTargetTest, RejectsWhatItCannotServe) {
  for (const char* bad : {"https://x", "ftp://x", "127.0.0.1:8000", "http://", "http://x:0",
                          "http://x:99999", "http://x:port", "http://x/?q=1", "http://u@x"}) {
    EXPECT_THROW(ParseUrl(bad), TargetError) << bad;
  }
}

TEST(HttpTargetTest, BodyCarriesTheOpenAiFieldsTheGeneratorPromises) {
  LoadSettings settings;
  RequestSpec spec{"hello", 7, -1};
  nlohmann::json body = nlohmann::json::parse(RenderBody("m", spec, settings));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], "hello");
  EXPECT_EQ(body["max_tokens"], 7);
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  settings.stream = false;
  EXPECT_FALSE(nlohmann::json::parse(RenderBody("m", spec, settings)).contains("stream_options"));
  // A candidate's extra request fields are merged in at the top level.
  settings.extra_body = {{"readkv", {{"read_bits", 2}}}};
  EXPECT_EQ(nlohmann::json::parse(RenderBody("m", spec, settings))["readkv"]["read_bits"], 2);
}

TEST(HttpTargetTest, HeaderHasLengthAndRequestId) {
  Target target{"http://h:1", "m", "secret"};
  std::string header = RenderHeader(RenderHeaderPrefix(ParseUrl(target.url), target, true), 42, 99);
  EXPECT_EQ(header.rfind("POST /v1/completions HTTP/1.1\r\nHost: h:1\r\n", 0), 0u);
  EXPECT_NE(header.find("Authorization: Bearer secret\r\n"), std::string::npos);
  EXPECT_NE(header.find("X-Request-Id: 42\r\n"), std::string::npos);
  EXPECT_TRUE(header.ends_with("Content-Length: 99\r\n\r\n"));
}

}  // namespace
}  // namespace kvgate::loadgen::internal
