#include "kvgate/checks/completion_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "kvgate/checks/errors.h"
#include "scripted_server.h"

namespace kvgate::checks {
namespace {

using testing::ScriptedReply;
using testing::ScriptedRequest;
using testing::ScriptedServer;

std::string CompletionBody(const std::string& text, int prompt_tokens = 10) {
  return nlohmann::json{{"object", "text_completion"},
                        {"choices", {{{"index", 0}, {"text", text}, {"finish_reason", "stop"}}}},
                        {"usage",
                         {{"prompt_tokens", prompt_tokens},
                          {"completion_tokens", 2},
                          {"total_tokens", prompt_tokens + 2}}}}
      .dump();
}

// Echoes the prompt back upper-cased as the completion; counts what it saw.
ScriptedReply Echo(const ScriptedRequest& request) {
  if (request.target == "/v1/models") {
    return ScriptedReply{200, R"({"object": "list", "data": [{"id": "tiny-model"}]})"};
  }
  nlohmann::json body = nlohmann::json::parse(request.body);
  std::string text = body.at("prompt").get<std::string>();
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return ScriptedReply{200, CompletionBody(text, static_cast<int>(text.size()))};
}

TEST(ServerUrlTest, ParsesHostPortAndDropsATrailingV1) {
  ServerUrl a = ServerUrl::Parse("http://127.0.0.1:8000/v1/");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, "8000");
  EXPECT_EQ(a.prefix, "");
  EXPECT_EQ(a.text, "http://127.0.0.1:8000");
  ServerUrl b = ServerUrl::Parse("HTTP://example.org/proxy/v1");
  EXPECT_EQ(b.port, "80");
  EXPECT_EQ(b.prefix, "/proxy");
  EXPECT_EQ(b.Join("/metrics"), "http://example.org:80/proxy/metrics");
  ServerUrl c = ServerUrl::Parse("http://[::1]:9000");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.text, "http://[::1]:9000");
}

TEST(ServerUrlTest, RejectsWhatItCannotServe) {
  for (const char* bad :
       {"ftp://x", "127.0.0.1:8000", "http://", "http://:80", "http://h:0",
        "http://h:70000", "http://h:8x", "http://h:", "http://h/v1?x=1", "http://[::1"}) {
    try {
      ServerUrl::Parse(bad);
      ADD_FAILURE() << bad;
    } catch (const InvalidSetting& e) {
      EXPECT_EQ(e.field(), "url");
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(CompletionClientTest, RejectsOptionsOutOfRange) {
  ClientOptions options;
  options.concurrency = 0;
  EXPECT_THROW(CompletionClient("http://127.0.0.1:1", options), InvalidSetting);
  options = ClientOptions{};
  options.request_timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(CompletionClient("http://127.0.0.1:1", options), InvalidSetting);
}

TEST(CompletionClientTest, ProbeAdoptsTheServersModelAndRequestsCarryIt) {
  std::mutex mutex;
  nlohmann::json seen;
  ScriptedServer server([&](const ScriptedRequest& request) {
    if (request.target == "/v1/completions") {
      std::lock_guard<std::mutex> lock(mutex);
      seen = nlohmann::json::parse(request.body);
    }
    return Echo(request);
  });
  CompletionClient client(server.url(), ClientOptions{});
  client.Probe();
  EXPECT_EQ(client.model(), "tiny-model");
  std::vector<CompletionOutcome> out = client.CompleteAll({CompletionRequest{"abc", 5, {"\n"}}});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error;
  EXPECT_EQ(out[0].text, "ABC");
  EXPECT_EQ(out[0].prompt_tokens, 3);
  EXPECT_EQ(out[0].completion_tokens, 2);
  EXPECT_EQ(out[0].http_status, 200);
  EXPECT_EQ(seen.at("model"), "tiny-model");
  EXPECT_EQ(seen.at("max_tokens"), 5);
  EXPECT_EQ(seen.at("temperature"), 0);
  EXPECT_EQ(seen.at("stream"), false);
  EXPECT_EQ(seen.at("stop"), nlohmann::json::array({"\n"}));
}

TEST(CompletionClientTest, ExtraBodyFieldsReachEveryRequest) {
  std::mutex mutex;
  nlohmann::json seen;
  ScriptedServer server([&](const ScriptedRequest& request) {
    if (request.target == "/v1/completions") {
      std::lock_guard<std::mutex> lock(mutex);
      seen = nlohmann::json::parse(request.body);
    }
    return Echo(request);
  });
  ClientOptions options;
  options.extra_body = {{"readkv", {{"read_bits", 2}, {"reader", "flexible"}}}};
  CompletionClient client(server.url(), options);
  client.Probe();
  ASSERT_TRUE(client.CompleteAll({CompletionRequest{"abc", 5, {}}})[0].ok());
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(seen.at("readkv").at("read_bits"), 2);
  EXPECT_EQ(seen.at("readkv").at("reader"), "flexible");
  EXPECT_EQ(seen.at("max_tokens"), 5);  // the client's own fields stay
}

TEST(CompletionClientTest, ExplicitModelWinsAndNoModelListLeavesTheFieldOut) {
  std::atomic<bool> had_model{true};
  ScriptedServer server([&](const ScriptedRequest& request) {
    if (request.target == "/v1/models") return ScriptedReply{404, "{}"};
    had_model = nlohmann::json::parse(request.body).contains("model");
    return Echo(request);
  });
  CompletionClient client(server.url(), ClientOptions{});
  client.Probe();
  EXPECT_EQ(client.model(), "");
  ASSERT_TRUE(client.CompleteAll({CompletionRequest{"x", 1, {}}})[0].ok());
  EXPECT_FALSE(had_model);

  ClientOptions options;
  options.model = "mine";
  CompletionClient named(server.url(), options);
  named.Probe();
  EXPECT_EQ(named.model(), "mine");
}

TEST(CompletionClientTest, KeepsConnectionsAliveAndAnswersInRequestOrder) {
  ScriptedServer server(Echo);
  ClientOptions options;
  options.concurrency = 3;
  CompletionClient client(server.url(), options);
  std::vector<CompletionRequest> requests;
  for (int i = 0; i < 40; ++i) requests.push_back({"p" + std::to_string(i), 4, {}});
  std::atomic<size_t> last_done{0};
  std::vector<CompletionOutcome> out = client.CompleteAll(requests, [&](size_t done, size_t total) {
    EXPECT_EQ(total, 40u);
    last_done = done;
  });
  ASSERT_EQ(out.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(out[static_cast<size_t>(i)].ok()) << out[static_cast<size_t>(i)].error;
    EXPECT_EQ(out[static_cast<size_t>(i)].text, "P" + std::to_string(i));
    EXPECT_GT(out[static_cast<size_t>(i)].latency_s, 0.0);
  }
  EXPECT_EQ(last_done, 40u);
  EXPECT_LE(server.connections(), 3);
  EXPECT_EQ(server.requests(), 40);
}

TEST(CompletionClientTest, ReconnectsWhenTheServerClosesAfterEachAnswer) {
  ScriptedServer server([](const ScriptedRequest& request) {
    ScriptedReply reply = Echo(request);
    reply.close = true;
    return reply;
  });
  ClientOptions options;
  options.concurrency = 1;
  CompletionClient client(server.url(), options);
  std::vector<CompletionOutcome> out =
      client.CompleteAll({{"a", 1, {}}, {"b", 1, {}}, {"c", 1, {}}});
  for (const CompletionOutcome& o : out) EXPECT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(server.connections(), 3);
}

TEST(CompletionClientTest, HttpErrorsBecomeItemErrorsNamingTheUrlAndMessage) {
  ScriptedServer server([](const ScriptedRequest& request) {
    nlohmann::json body = nlohmann::json::parse(request.body);
    std::string prompt = body.at("prompt");
    if (prompt == "bad") {
      return ScriptedReply{400, R"({"error": {"message": "max_tokens too large", "type": )"
                                R"("invalid_request_error", "code": 400}})"};
    }
    if (prompt == "broken") return ScriptedReply{200, "{\"choices\": []}"};
    if (prompt == "html") return ScriptedReply{502, "<html>bad gateway</html>", "text/html"};
    return Echo(request);
  });
  CompletionClient client(server.url(), ClientOptions{});
  std::vector<CompletionOutcome> out =
      client.CompleteAll({{"bad", 1, {}}, {"ok", 1, {}}, {"broken", 1, {}}, {"html", 1, {}}});
  const std::string where = "POST " + server.url() + "/v1/completions: ";
  EXPECT_EQ(out[0].error, where + "HTTP 400: max_tokens too large");
  EXPECT_EQ(out[0].http_status, 400);
  EXPECT_TRUE(out[1].ok());
  EXPECT_EQ(out[2].error.rfind(where + "malformed completion response", 0), 0u) << out[2].error;
  EXPECT_EQ(out[3].error, where + "HTTP 502: <html>bad gateway</html>");
}

TEST(CompletionClientTest, RetriesTooManyRequestsAfterRetryAfter) {
  std::atomic<int> calls{0};
  ScriptedServer server([&](const ScriptedRequest& request) {
    if (calls++ < 2) {
      ScriptedReply busy{429, R"({"error": {"message": "queue full"}})"};
      busy.headers["Retry-After"] = "0";
      return busy;
    }
    return Echo(request);
  });
  CompletionClient client(server.url(), ClientOptions{});
  std::vector<CompletionOutcome> out = client.CompleteAll({{"x", 1, {}}});
  EXPECT_TRUE(out[0].ok()) << out[0].error;
  EXPECT_EQ(calls, 3);

  ClientOptions no_retry;
  no_retry.max_retries = 0;
  calls = 0;
  CompletionClient strict(server.url(), no_retry);
  out = strict.CompleteAll({{"x", 1, {}}});
  EXPECT_EQ(out[0].error, "POST " + server.url() + "/v1/completions: HTTP 429: queue full");
}

TEST(CompletionClientTest, SlowAnswerTimesOutAsAnItemError) {
  ScriptedServer server([](const ScriptedRequest& request) {
    ScriptedReply reply = Echo(request);
    reply.delay = std::chrono::milliseconds(800);
    return reply;
  });
  ClientOptions options;
  options.request_timeout = std::chrono::milliseconds(150);
  CompletionClient client(server.url(), options);
  std::vector<CompletionOutcome> out = client.CompleteAll({{"x", 1, {}}});
  EXPECT_EQ(out[0].error,
            "POST " + server.url() + "/v1/completions: no complete answer within 150 ms");
  EXPECT_LT(out[0].latency_s, 0.7);
}

TEST(CompletionClientTest, ProbeOfAClosedPortThrowsServerUnreachable) {
  const std::string url = "http://127.0.0.1:" + std::to_string(testing::UnusedPort());
  CompletionClient client(url, ClientOptions{});
  try {
    client.Probe();
    FAIL() << "expected ServerUnreachable";
  } catch (const ServerUnreachable& e) {
    EXPECT_EQ(e.url(), url);
    EXPECT_EQ(std::string(e.what()).rfind("cannot reach server at " + url + ": ", 0), 0u);
  }
  // Without the probe, every item records the failure instead.
  std::vector<CompletionOutcome> out = client.CompleteAll({{"x", 1, {}}, {"y", 1, {}}});
  for (const CompletionOutcome& o : out) {
    EXPECT_EQ(o.http_status, 0);
    EXPECT_EQ(o.error.rfind("POST " + url + "/v1/completions: ", 0), 0u) << o.error;
  }
}

}  // namespace
}  // namespace kvgate::checks
