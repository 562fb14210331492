// RunLoad over https against a real TLS server (tls_test_server.h, a certificate made by the
// openssl CLI) that requires a bearer key and streams chat deltas on a planned schedule: TTFT and
// ITL come from the content deltas (not the role chunk), the key is sent and never recorded, and
// an unverifiable certificate fails every request with cause "tls" naming the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kvgate/filesystem/remove_tree.h"
#include "kvgate/loadgen/report.h"
#include "kvgate/loadgen/run_load.h"
#include "tls_test_server.h"

namespace kvgate::loadgen {
namespace {

namespace ht = http::testing;

constexpr const char kKey[] = "sk-load-9f3a7c1e";

class TlsChatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("kvgate-loadgen-tls-" + std::to_string(::getpid())));
    certs_ = new ht::TestCerts(ht::MakeTestCerts(*dir_));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    kvgate::RemoveTree(*dir_, ec);
    delete certs_;
    delete dir_;
  }
  // Role chunk at once, first content delta 80 ms later, then one every 20 ms.
  static ht::TestReply Reply(const ht::TestRequest& request) {
    if (request.target == "/v1/models") {
      return {200, "application/json", {R"({"data":[{"id":"chat-model"}]})"}, {}};
    }
    if (request.target != "/v1/chat/completions") return {404, "text/plain", {"no"}, {}};
    std::vector<std::string> parts = ht::ChatStreamParts(5, 7);
    std::vector<double> delays(parts.size(), 20.0);
    delays.front() = 0.0;
    delays[1] = 80.0;
    delays.back() = 0.0;
    return {200, "text/event-stream", parts, delays};
  }
  static LoadSettings Settings() {
    LoadSettings s;
    s.rate_rps = 10;
    s.arrival = Arrival::kConstant;
    s.requests = 4;
    s.request_timeout_s = 10;
    s.workload.input.mean = 8;
    s.workload.output.mean = 5;
    return s;
  }
  static std::string* dir_;
  static ht::TestCerts* certs_;
};
std::string* TlsChatTest::dir_ = nullptr;
ht::TestCerts* TlsChatTest::certs_ = nullptr;

TEST_F(TlsChatTest, ChatStreamOverVerifiedHttpsIsMeasuredFromTheContentDeltas) {
  ht::TestServer server(true, *certs_, kKey, Reply);
  Target target(server.url() + "/v1", "", {kKey, {}, certs_->ca_pem, false},
                http::Endpoint::kChat);
  LoadResult result = RunLoad(Settings(), target);
  ASSERT_EQ(result.records.size(), 4u);
  for (const RequestRecord& r : result.records) {
    ASSERT_TRUE(r.ok()) << r.error_cause << ": " << r.error_text;
    EXPECT_EQ(r.chunk_ns.size(), 5u);
    EXPECT_EQ(r.completion_tokens, 5);
    EXPECT_EQ(r.prompt_tokens, 7);
    // The role chunk came at once; the first token 80 ms later.
    EXPECT_GE((r.first_token_ns - r.sent_ns) / 1e6, 75.0);
  }
  EXPECT_EQ(result.model, "chat-model");
  EXPECT_EQ(result.endpoint, "chat");
  EXPECT_GE(result.summary.ttft.p50_ms, 75.0);
  EXPECT_LT(result.summary.ttft.p50_ms, 400.0);
  EXPECT_NEAR(result.summary.itl.p50_ms, 20.0, 15.0);
  EXPECT_FALSE(result.tls_verification_off);
  EXPECT_NE(result.connection.find("certificate verified (CA file"), std::string::npos);
  // What was sent: the chat body with usage asked for, the key in the header only.
  const std::vector<ht::TestRequest> seen = server.requests();
  ASSERT_EQ(seen.size(), 5u);  // GET /v1/models, then 4 chats
  nlohmann::json body = nlohmann::json::parse(seen.back().body);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(seen.back().authorization, std::string("Bearer ") + kKey);
  const std::string outputs = LoadResultToJson(result).dump() + FormatSummary(result);
  EXPECT_EQ(outputs.find(kKey), std::string::npos);
}

TEST_F(TlsChatTest, AnUnverifiableCertificateFailsEveryRequestAsTls) {
  ht::TestServer server(true, *certs_, kKey, Reply);
  Target target(server.url(), "chat-model", {kKey, {}, certs_->other_ca_pem, false},
                http::Endpoint::kChat);
  LoadResult result = RunLoad(Settings(), target);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.error_cause, "tls");
    EXPECT_NE(r.error_text.find("certificate verify failed ("), std::string::npos)
        << r.error_text;
  }
  EXPECT_TRUE(server.requests().empty());
  // Model discovery refuses the same way, before any load.
  target.model.clear();
  try {
    RunLoad(Settings(), target);
    ADD_FAILURE();
  } catch (const TargetError& e) {
    EXPECT_NE(std::string(e.what()).find("certificate verify failed"), std::string::npos)
        << e.what();
  }
}

TEST_F(TlsChatTest, InsecureRunsAndEveryReportSaysSo) {
  ht::TestServer server(true, *certs_, kKey, Reply);
  Target target(server.url(), "chat-model", {kKey, {}, "", true}, http::Endpoint::kChat);
  LoadResult result = RunLoad(Settings(), target);
  for (const RequestRecord& r : result.records) EXPECT_TRUE(r.ok()) << r.error_text;
  EXPECT_TRUE(result.tls_verification_off);
  EXPECT_NE(FormatSummary(result).find("WARNING: TLS certificate verification was OFF"),
            std::string::npos);
  EXPECT_EQ(LoadResultToJson(result)["tls_verification_off"], true);
}

TEST_F(TlsChatTest, AMissingKeyIsAnHttp401PerRequest) {
  ht::TestServer server(true, *certs_, kKey, Reply);
  Target target(server.url(), "chat-model", {"", {}, certs_->ca_pem, false},
                http::Endpoint::kChat);
  LoadResult result = RunLoad(Settings(), target);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.error_cause, "http_4xx");
    EXPECT_EQ(r.http_status, 401);
  }
}

}  // namespace
}  // namespace kvgate::loadgen
