// Integration tests: the real server on 127.0.0.1:0, spoken to over real sockets, in front of
// the real model runtime (a tiny random Llama, see tiny_llama.h) -- every token below is a real
// forward pass through a real KV backend.
#include "readkv/server/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http_test_client.h"
#include "tiny_llama.h"

namespace readkv::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::Eventually;
using testing::HttpConnection;
using testing::kTinyLlamaContext;
using testing::SseData;
namespace http = boost::beast::http;

struct ServerSetup {
  codec::KvBackend kv = codec::KvBackend::kDense;
  engine::EngineOptions engine;
  ServerOptions server;
};

// A request long enough (hundreds of ms of decode steps) to be caught in flight.
json LongRequest(bool stream) {
  return {{"prompt", "go"},
          {"max_tokens", kTinyLlamaContext - 8},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream}};
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { spdlog::set_level(spdlog::level::warn); }

  void StartServer(ServerSetup setup = {}) {
    if (setup.engine.model_name.empty()) setup.engine.model_name = "test-model";
    model_ = testing::LoadTinyLlama(setup.kv);
    tokenizer_ = testing::TinyLlamaTokenizer();
    engine_ = std::make_unique<engine::Engine>(*model_, *tokenizer_, setup.engine);
    server_ = std::make_unique<Server>(*engine_, *tokenizer_, setup.server);
    server_->Start();
  }

  void TearDown() override {
    if (server_) server_->Shutdown(milliseconds(0));
  }

  uint16_t port() const { return server_->port(); }

  json Completion(const json& body) {
    HttpConnection connection(port());
    auto result = connection.Post("/v1/completions", body);
    EXPECT_EQ(result.status, 200) << result.body;
    return result.Json();
  }

  // The value of one series (first sample of the family), as the engine exports it.
  double Metric(const std::string& name) {
    for (const auto& family : engine_->metrics().Collect()) {
      if (family.name != name || family.metric.empty()) continue;
      const auto& m = family.metric.front();
      return family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
    ADD_FAILURE() << "no series " << name;
    return -1.0;
  }

  // Every sequence the model started was ended, and the backend holds no KV bytes.
  void ExpectKvFreed() {
    const engine::EngineCounters counters = engine_->counters();
    EXPECT_EQ(counters.sequences_started, counters.sequences_ended);
    EXPECT_TRUE(Eventually([&] { return Metric("readkv_capacity_bytes") == 0.0; }));
  }

  std::unique_ptr<engine::DecodeModel> model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, CompletionReturnsTextFinishReasonAndUsage) {
  StartServer();
  const json response = Completion({{"model", "test-model"},
                                    {"prompt", "Hello"},
                                    {"max_tokens", 6},
                                    {"temperature", 0},
                                    {"ignore_eos", true}});
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["model"], "test-model");
  EXPECT_TRUE(response["id"].get<std::string>().starts_with("cmpl-"));
  EXPECT_TRUE(response["choices"][0]["text"].is_string());
  EXPECT_FALSE(response["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["usage"]["prompt_tokens"], 6);  // BOS + 5 bytes
  EXPECT_EQ(response["usage"]["completion_tokens"], 6);
  EXPECT_EQ(response["usage"]["total_tokens"], 12);
  EXPECT_FALSE(response.contains("readkv"));
  ExpectKvFreed();
}

TEST_F(ServerTest, TokenIdPromptsAreUsedVerbatim) {
  StartServer();
  const json by_ids = Completion(
      {{"prompt", {256, 'H', 'i'}}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
  const json by_text =
      Completion({{"prompt", "Hi"}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(by_ids["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(by_ids["choices"][0]["text"], by_text["choices"][0]["text"]);
}

TEST_F(ServerTest, StopStringsEndTheTextBeforeTheirFirstOccurrence) {
  StartServer();
  const json request = {
      {"prompt", "stop here"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string full = Completion(request)["choices"][0]["text"];
  // Any piece of the (arbitrary) greedy text works as a stop string; take whole characters.
  std::vector<size_t> starts;
  for (size_t i = 0; i < full.size(); ++i) {
    if ((static_cast<unsigned char>(full[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  ASSERT_GE(starts.size(), 12u) << full;
  const std::string stop = full.substr(starts[8], starts[10] - starts[8]);
  json with_stop = request;
  with_stop["stop"] = {"never-generated-\x01", stop};
  const json response = Completion(with_stop);
  EXPECT_EQ(response["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(response["usage"]["completion_tokens"].get<int>(), 40);
}

TEST_F(ServerTest, StreamingSendsCompletionChunksThenDone) {
  StartServer();
  const json request = {
      {"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string expected = Completion(request)["choices"][0]["text"];
  HttpConnection connection(port());
  json streamed = request;
  streamed["stream"] = true;
  auto result = connection.Post("/v1/completions", streamed);
  ASSERT_EQ(result.status, 200);
  EXPECT_EQ(result.headers["content-type"], "text/event-stream");
  EXPECT_EQ(result.headers["transfer-encoding"], "chunked");
  const auto data = SseData(result.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json chunk = json::parse(data[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_EQ(chunk["model"], "test-model");
    EXPECT_TRUE(chunk["id"].get<std::string>().starts_with("cmpl-"));
    text += chunk["choices"][0]["text"].get<std::string>();
    const bool last = i + 2 == data.size();
    EXPECT_EQ(chunk["choices"][0]["finish_reason"].is_null(), !last);
    EXPECT_FALSE(chunk.contains("usage"));
  }
  EXPECT_EQ(text, expected);  // the stream spells the same greedy text
  EXPECT_EQ(json::parse(data[data.size() - 2])["choices"][0]["finish_reason"], "length");
  // Keep-alive: the same connection serves the next request.
  EXPECT_EQ(connection.Get("/health").status, 200);
}

// The response header and the first SSE chunk are two small writes in a row; with Nagle on, the
// chunk waited for the client's delayed ACK (up to 40 ms), so clients saw the first token that
// much after the engine produced it (and after the TTFT histogram had counted it). The server's
// end of the connection lives in this process: find it by its local port and ask the kernel.
TEST_F(ServerTest, AcceptedConnectionsHaveNagleOff) {
  StartServer();
  HttpConnection connection(port());
  ASSERT_EQ(connection.Get("/health").status, 200);  // accepted and served
  int accepted = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    sockaddr_in local{};
    sockaddr_in peer{};
    socklen_t local_len = sizeof(local);
    socklen_t peer_len = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        local.sin_family != AF_INET || ntohs(local.sin_port) != port()) {
      continue;
    }
    // The listening socket has no peer; the server's end of our connection has.
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    int nodelay = 0;
    socklen_t nodelay_len = sizeof(nodelay);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &nodelay_len), 0);
    EXPECT_NE(nodelay, 0) << "fd " << fd;
    ++accepted;
  }
  EXPECT_EQ(accepted, 1);
}

TEST_F(ServerTest, StreamingWithIncludeUsageEndsWithAUsageChunk) {
  ServerSetup setup;
  setup.kv = codec::KvBackend::kReadKv;  // the chunk echoes the request's read policy
  StartServer(setup);
  HttpConnection connection(port());
  auto result = connection.Post("/v1/completions", {{"prompt", "Hi"},
                                                    {"max_tokens", 4},
                                                    {"temperature", 0},
                                                    {"ignore_eos", true},
                                                    {"stream", true},
                                                    {"stream_options", {{"include_usage", true}}},
                                                    {"readkv", {{"read_bits", 2}}}});
  ASSERT_EQ(result.status, 200);
  const auto data = SseData(result.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  const json usage = json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  const json last = json::parse(data[data.size() - 3]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["usage"].is_null());
  EXPECT_EQ(last["readkv"], json({{"read_bits", 2.0}}));
}

TEST_F(ServerTest, GreedyTextIsTheSameAloneAndInABatch) {
  ServerSetup setup;
  setup.engine.max_batch = 8;
  StartServer(setup);
  const json request = {
      {"prompt", "determinism"}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string alone = Completion(request)["choices"][0]["text"];
  // The same request among others of different lengths, decoded in one batch.
  std::vector<std::string> texts(8);
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      json body = request;
      if (i % 2 == 1) body["prompt"] = std::string(static_cast<size_t>(3 * i), 'y');
      HttpConnection connection(port());
      texts[static_cast<size_t>(i)] =
          connection.Post("/v1/completions", body).Json()["choices"][0]["text"];
    });
  }
  for (auto& client : clients) client.join();
  for (int i = 0; i < 8; i += 2) EXPECT_EQ(texts[static_cast<size_t>(i)], alone) << i;
  EXPECT_GT(engine_->counters().max_batch_seen, 1);
}

TEST_F(ServerTest, ReadPolicyIsEchoedAndAnUnservablePolicyIsA400) {
  ServerSetup setup;
  setup.kv = codec::KvBackend::kReadKv;
  StartServer(setup);
  const json ok = Completion({{"prompt", "p"},
                              {"max_tokens", 2},
                              {"readkv", {{"read_bits", 2}, {"reader", "constrained"}}}});
  EXPECT_EQ(ok["readkv"], json({{"read_bits", 2.0}, {"reader", "constrained"}}));

  HttpConnection connection(port());
  auto refused = connection.Post(
      "/v1/completions", {{"prompt", "p"}, {"max_tokens", 2}, {"readkv", {{"read_bits", 9}}}});
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.Json()["error"]["code"], "invalid_read_policy");
  EXPECT_NE(refused.Json()["error"]["message"].get<std::string>().find("read_bits"),
            std::string::npos)
      << refused.body;
  EXPECT_EQ(connection.Post("/v1/completions", {{"prompt", "p"}, {"max_tokens", 2}}).status, 200);
  ExpectKvFreed();
}

struct BadRequest {
  const char* name;
  std::string body;
  int status;
  const char* code;
};

TEST_F(ServerTest, EveryBadCompletionGetsAJsonErrorAndTheNextRequestIsServed) {
  StartServer();
  const std::string long_prompt(kTinyLlamaContext + 10, 'a');
  const std::vector<BadRequest> cases = {
      {"malformed JSON", R"({"prompt": "x", )", 400, "invalid_json"},
      {"not an object", R"(["prompt"])", 400, "invalid_json"},
      {"prompt wrong type", R"({"prompt": 5})", 400, "invalid_type"},
      {"prompt missing", R"({"max_tokens": 5})", 400, "prompt_empty"},
      {"prompt empty string", R"({"prompt": ""})", 400, "prompt_empty"},
      {"prompt empty array", R"({"prompt": []})", 400, "prompt_empty"},
      {"token id out of range", R"({"prompt": [1, 999]})", 400, "invalid_value"},
      {"token id not integer", R"({"prompt": [1, 2.5]})", 400, "invalid_type"},
      {"batched prompts", R"({"prompt": ["a", "b"]})", 400, "unsupported_parameter"},
      {"over-long prompt", json({{"prompt", long_prompt}}).dump(), 400, "prompt_too_long"},
      {"max_tokens zero", R"({"prompt": "x", "max_tokens": 0})", 400, "invalid_max_tokens"},
      {"max_tokens negative", R"({"prompt": "x", "max_tokens": -3})", 400, "invalid_max_tokens"},
      {"max_tokens too large", R"({"prompt": "x", "max_tokens": 100000})", 400,
       "max_tokens_too_large"},
      {"max_tokens wrong type", R"({"prompt": "x", "max_tokens": "5"})", 400, "invalid_type"},
      {"temperature wrong type", R"({"prompt": "x", "temperature": "hot"})", 400, "invalid_type"},
      {"temperature out of range", R"({"prompt": "x", "temperature": 7})", 400, "invalid_value"},
      {"stream wrong type", R"({"prompt": "x", "stream": "yes"})", 400, "invalid_type"},
      {"stream_options without stream", R"({"prompt": "x", "stream_options": {}})", 400,
       "invalid_value"},
      {"stop wrong type", R"({"prompt": "x", "stop": 3})", 400, "invalid_type"},
      {"stop empty string", R"({"prompt": "x", "stop": [""]})", 400, "invalid_value"},
      {"readkv unknown field", R"({"prompt": "x", "readkv": {"read_bitz": 2}})", 400,
       "unknown_readkv_field"},
      {"readkv not an object", R"({"prompt": "x", "readkv": 2})", 400, "invalid_type"},
      {"readkv read_bits wrong type", R"({"prompt": "x", "readkv": {"read_bits": "2"}})", 400,
       "invalid_type"},
      {"readkv bad reader", R"({"prompt": "x", "readkv": {"reader": "fast"}})", 400,
       "invalid_value"},
      {"readkv half a split", R"({"prompt": "x", "readkv": {"key_bits": 3}})", 400,
       "invalid_value"},
      {"n > 1", R"({"prompt": "x", "n": 2})", 400, "unsupported_parameter"},
      {"unknown model", R"({"prompt": "x", "model": "gpt-5"})", 404, "model_not_found"},
      {"deeply nested", std::string(100000, '[') + std::string(100000, ']'), 400, "invalid_json"},
  };
  HttpConnection connection(port());
  for (const BadRequest& bad : cases) {
    auto result = connection.Request(http::verb::post, "/v1/completions", bad.body);
    EXPECT_EQ(result.status, bad.status) << bad.name << ": " << result.body;
    const json error = result.Json();
    ASSERT_TRUE(error.contains("error")) << bad.name << ": " << result.body;
    EXPECT_EQ(error["error"]["code"], bad.code) << bad.name << ": " << result.body;
    EXPECT_TRUE(error["error"]["message"].is_string()) << bad.name;
    EXPECT_FALSE(error["error"]["message"].get<std::string>().empty()) << bad.name;
    EXPECT_EQ(error["error"]["type"], "invalid_request_error") << bad.name;
    EXPECT_TRUE(result.keep_alive) << bad.name;
    // The very next request on the same connection is served normally.
    auto good = connection.Post("/v1/completions", {{"prompt", "ok"}, {"max_tokens", 2}});
    EXPECT_EQ(good.status, 200) << "after " << bad.name << ": " << good.body;
  }
  EXPECT_EQ(engine_->metrics().ErrorCount("invalid_json"), 3.0);
  EXPECT_EQ(engine_->metrics().ErrorCount("unknown_readkv_field"), 1.0);
  EXPECT_EQ(engine_->metrics().ErrorCount("model_not_found"), 1.0);
  EXPECT_EQ(engine_->counters().finished, static_cast<int64_t>(cases.size()));
}

TEST_F(ServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  StartServer();
  HttpConnection connection(port());
  auto missing = connection.Get("/v1/embeddings");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.Json()["error"]["code"], "not_found");
  auto wrong = connection.Get("/v1/completions");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.headers["allow"], "POST");
  EXPECT_EQ(wrong.Json()["error"]["code"], "method_not_allowed");
  auto wrong2 = connection.Request(http::verb::delete_, "/metrics");
  EXPECT_EQ(wrong2.status, 405);
  EXPECT_EQ(wrong2.headers["allow"], "GET, HEAD");
  EXPECT_EQ(connection.Get("/health").status, 200);
  EXPECT_EQ(engine_->metrics().ErrorCount("not_found"), 1.0);
  EXPECT_EQ(engine_->metrics().ErrorCount("method_not_allowed"), 2.0);
}

TEST_F(ServerTest, OversizeBodyIs413AndTheServerKeepsServing) {
  ServerSetup setup;
  setup.server.max_body_bytes = 4096;
  StartServer(setup);
  {
    HttpConnection connection(port());
    const std::string big = json({{"prompt", std::string(20000, 'a')}}).dump();
    auto result = connection.Request(http::verb::post, "/v1/completions", big);
    EXPECT_EQ(result.status, 413);
    EXPECT_EQ(result.Json()["error"]["code"], "body_too_large");
    EXPECT_FALSE(result.keep_alive);
  }
  {
    // The same with Expect: 100-continue: refused before the body is sent.
    HttpConnection connection(port());
    connection.SendRaw(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n"
        "Expect: 100-continue\r\n\r\n");
    auto result = connection.ReadResponse();
    EXPECT_EQ(result.status, 413);
  }
  EXPECT_EQ(Completion({{"prompt", "still fine"}, {"max_tokens", 1}})["usage"]["completion_tokens"],
            1);
  EXPECT_EQ(engine_->metrics().ErrorCount("body_too_large"), 2.0);
}

TEST_F(ServerTest, ExpectContinueIsHonoured) {
  StartServer();
  HttpConnection connection(port());
  const std::string body = R"({"prompt": "x", "max_tokens": 1})";
  connection.SendRaw(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Expect: 100-continue\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n");
  auto interim = connection.ReadResponse();
  EXPECT_EQ(interim.status, 100);
  connection.SendRaw(body);
  EXPECT_EQ(connection.ReadResponse().status, 200);
}

TEST_F(ServerTest, OversizeHeaderIs431AndMalformedHttpIs400) {
  ServerSetup setup;
  setup.server.max_header_bytes = 1024;
  StartServer(setup);
  {
    HttpConnection connection(port());
    auto result =
        connection.Request(http::verb::get, "/health", "", {{"X-Padding", std::string(4000, 'p')}});
    EXPECT_EQ(result.status, 431);
    EXPECT_EQ(result.Json()["error"]["code"], "header_too_large");
  }
  {
    HttpConnection connection(port());
    connection.SendRaw("THIS IS NOT HTTP\r\n\r\n");
    auto result = connection.ReadResponse();
    EXPECT_EQ(result.status, 400);
    EXPECT_EQ(result.Json()["error"]["code"], "bad_http");
  }
  HttpConnection connection(port());
  EXPECT_EQ(connection.Get("/health").status, 200);
  EXPECT_EQ(engine_->metrics().ErrorCount("header_too_large"), 1.0);
  EXPECT_EQ(engine_->metrics().ErrorCount("bad_http"), 1.0);
}

TEST_F(ServerTest, IdleAndTricklingConnectionsAreClosed) {
  ServerSetup setup;
  setup.server.idle_timeout = milliseconds(200);
  StartServer(setup);
  HttpConnection idle(port(), milliseconds(3000));
  EXPECT_TRUE(idle.ServerClosed());
  HttpConnection trickle(port(), milliseconds(3000));
  trickle.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\n");  // and never the rest
  EXPECT_TRUE(trickle.ServerClosed());
  EXPECT_TRUE(Eventually([&] { return engine_->metrics().ErrorCount("read_timeout") == 1.0; }));
  EXPECT_EQ(HttpConnection(port()).Get("/health").status, 200);
}

TEST_F(ServerTest, ClientDisconnectCancelsTheRequestAndFreesItsKv) {
  StartServer();
  HttpConnection connection(port());
  connection.SendRequest(http::verb::post, "/v1/completions", LongRequest(true).dump());
  connection.BeginStream();
  ASSERT_EQ(connection.stream_status(), 200);
  connection.ReadStreamUntil("data: {");
  ASSERT_EQ(engine_->counters().running, 1);
  connection.Close();
  ASSERT_TRUE(Eventually([&] { return engine_->counters().cancelled == 1; }));
  EXPECT_EQ(engine_->counters().running, 0);
  EXPECT_EQ(engine_->metrics().FinishedCount(engine::FinishReason::kCancelled), 1.0);
  EXPECT_EQ(engine_->metrics().ErrorCount("cancelled"), 1.0);
  // It ended long before its max_tokens.
  EXPECT_LT(Metric("vllm:generation_tokens_total"), kTinyLlamaContext / 2);
  ExpectKvFreed();
  EXPECT_EQ(HttpConnection(port()).Get("/health").status, 200);
}

TEST_F(ServerTest, NonStreamingClientThatResetsIsCancelled) {
  StartServer();
  HttpConnection connection(port());
  connection.SendRequest(http::verb::post, "/v1/completions", LongRequest(false).dump());
  ASSERT_TRUE(Eventually([&] { return engine_->counters().running == 1; }));
  connection.Abort();
  ASSERT_TRUE(Eventually([&] { return engine_->counters().cancelled == 1; }));
  EXPECT_LT(Metric("vllm:generation_tokens_total"), kTinyLlamaContext / 2);
  ExpectKvFreed();
}

// Hostile-test finding (2026-12-02): a client that shut down its sending side after its request
// (HTTP/1.1 allows it; `curl` piped input and some proxies do it) got no answer: the server took
// the FIN for a departure and cancelled. It is answered, then the connection closes.
TEST_F(ServerTest, AHalfClosedClientGetsItsAnswer) {
  StartServer();
  for (const bool stream : {false, true}) {
    HttpConnection connection(port());
    connection.SendRequest(http::verb::post, "/v1/completions",
                           json({{"prompt", "Hi"},
                                 {"max_tokens", 6},
                                 {"temperature", 0},
                                 {"ignore_eos", true},
                                 {"stream", stream}})
                               .dump());
    connection.ShutdownSend();
    const auto result = connection.ReadResponse();
    EXPECT_EQ(result.status, 200) << result.body;
    if (stream) {
      EXPECT_EQ(SseData(result.body).back(), "[DONE]") << result.body;
    } else {
      EXPECT_EQ(result.Json()["usage"]["completion_tokens"], 6) << result.body;
    }
    // Then the connection ends (with "Connection: close" when the server saw the half-close
    // before answering; after the answer's keep-alive otherwise, at its next read).
    EXPECT_TRUE(connection.ServerClosed());
  }
  EXPECT_EQ(engine_->counters().cancelled, 0);
}

// Hostile-test finding (2026-12-02): ~1,100 idle connections under a 1024 open-file limit left
// the server logging "accept failed: Too many open files" ~30 times a second and serving nobody.
// Connections past the limit are answered 503 at once; when one closes, service resumes.
TEST_F(ServerTest, ConnectionsPastTheLimitGet503AndServiceResumes) {
  ServerSetup setup;
  setup.server.max_connections = 3;
  StartServer(setup);
  EXPECT_EQ(server_->max_connections(), 3);
  std::vector<std::unique_ptr<HttpConnection>> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<HttpConnection>(port()));
  EXPECT_EQ(idle[0]->Get("/health").status, 200);  // all three accepted and served
  ASSERT_TRUE(Eventually([&] {
    HttpConnection extra(port(), milliseconds(2000));
    return extra.Get("/health").status == 503;
  }));
  HttpConnection extra(port(), milliseconds(2000));
  const auto refused = extra.Get("/health");
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.Json()["error"]["code"], "too_many_connections");
  EXPECT_EQ(refused.headers.count("retry-after"), 1u);
  EXPECT_TRUE(extra.ServerClosed());
  EXPECT_GE(engine_->metrics().ErrorCount("too_many_connections"), 1.0);
  idle.pop_back();
  EXPECT_TRUE(Eventually([&] { return HttpConnection(port()).Get("/health").status == 200; }));
}

TEST_F(ServerTest, ConnectionLimitDefaultsToTheOpenFileLimit) {
  const long limit = RaiseOpenFileLimit();
  ASSERT_GT(limit, 0);
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(static_cast<long>(now.rlim_cur), limit);
  EXPECT_TRUE(now.rlim_max == RLIM_INFINITY || now.rlim_cur == now.rlim_max ||
              now.rlim_cur == (rlim_t{1} << 20));
  StartServer();
  EXPECT_EQ(server_->max_connections(), std::max<long>(16, limit - kReservedDescriptors));
}

// HEAD is GET without a body: same status and headers, nothing after them on the connection.
TEST_F(ServerTest, HeadIsAnsweredLikeGetWithoutABody) {
  StartServer();
  HttpConnection connection(port());
  auto get = connection.Get("/health");
  connection.SendRequest(http::verb::head, "/health");
  auto head = connection.ReadHeadResponse();
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-length"], std::to_string(get.body.size()));
  EXPECT_EQ(head.headers["content-type"], get.headers["content-type"]);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(connection.Buffered(), 0u);
  // HEAD on a POST-only endpoint: 405, still with no body; the connection stays in step.
  connection.SendRequest(http::verb::head, "/v1/completions");
  auto wrong = connection.ReadHeadResponse();
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.headers["allow"], "POST");
  EXPECT_EQ(connection.Buffered(), 0u);
  EXPECT_EQ(connection.Get("/v1/models").status, 200);
}

TEST_F(ServerTest, AFullQueueAnswers429WithRetryAfter) {
  ServerSetup setup;
  setup.engine.max_batch = 1;
  setup.engine.max_waiting = 0;
  setup.server.retry_after_seconds = 2;
  StartServer(setup);
  HttpConnection busy(port());
  busy.SendRequest(http::verb::post, "/v1/completions", LongRequest(true).dump());
  busy.BeginStream();
  busy.ReadStreamUntil("data: {");
  HttpConnection second(port());
  auto refused = second.Post("/v1/completions", {{"prompt", "me too"}, {"max_tokens", 2}});
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(refused.headers["retry-after"], "2");
  EXPECT_EQ(refused.Json()["error"]["code"], "queue_full");
  EXPECT_EQ(refused.Json()["error"]["type"], "rate_limit_error");
  EXPECT_EQ(engine_->metrics().ErrorCount("queue_full"), 1.0);
  busy.Close();
  // Once the batch has room again the same client is served.
  ASSERT_TRUE(Eventually([&] { return engine_->counters().running == 0; }));
  EXPECT_EQ(second.Post("/v1/completions", {{"prompt", "me too"}, {"max_tokens", 2}}).status, 200);
}

TEST_F(ServerTest, ShutdownEndsAnInFlightStreamWithAnErrorEvent) {
  StartServer();
  HttpConnection connection(port());
  connection.SendRequest(http::verb::post, "/v1/completions", LongRequest(true).dump());
  connection.BeginStream();
  connection.ReadStreamUntil("data: {");
  std::thread stopper([&] { server_->Shutdown(milliseconds(20)); });
  const std::string body = connection.ReadStreamUntil("[DONE]");
  stopper.join();
  const auto data = SseData(body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  const json error = json::parse(data[data.size() - 2]);
  EXPECT_EQ(error["error"]["code"], "shutting_down");
  EXPECT_EQ(error["error"]["type"], "server_error");
  ExpectKvFreed();
}

TEST_F(ServerTest, ModelsHealthAndMetricsEndpoints) {
  StartServer();
  Completion({{"prompt", "m"}, {"max_tokens", 3}, {"ignore_eos", true}});
  HttpConnection connection(port());
  const json models = connection.Get("/v1/models").Json();
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "test-model");
  EXPECT_EQ(models["data"][0]["max_model_len"], kTinyLlamaContext);
  EXPECT_EQ(models["data"][0]["root"], testing::kTinyLlamaId);
  EXPECT_EQ(connection.Get("/health").Json()["status"], "ok");
  connection.Get("/nope");

  auto metrics = connection.Get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_TRUE(metrics.headers["content-type"].starts_with("text/plain"));
  // Every line is a comment or `name{labels} value` (Prometheus text format 0.0.4).
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [-+0-9.eEInfa]+$)");
  std::set<std::string> names;
  std::istringstream lines(metrics.body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    names.insert(line.substr(0, line.find_first_of("{ ")));
    if (line.find("kv_backend=\"dense\"") == std::string::npos) ADD_FAILURE() << line;
  }
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum", "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total", "vllm:request_success_total", "kvgate_request_errors_total",
        "readkv_capacity_bytes", "readkv_logical_read_bytes_total",
        "readkv_physical_traffic_bytes_total", "readkv_workspace_peak_bytes",
        "readkv_encode_seconds_total", "readkv_read_depth_bucket"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  // Every series carries kv_backend and model_name (constant labels first).
  EXPECT_NE(metrics.body.find("vllm:generation_tokens_total{kv_backend=\"dense\","
                              "model_name=\"test-model\"} 3\n"),
            std::string::npos);
  EXPECT_NE(metrics.body.find(
                "kvgate_request_errors_total{kv_backend=\"dense\",model_name=\"test-model\","
                "cause=\"not_found\"} 1\n"),
            std::string::npos)
      << metrics.body.substr(metrics.body.find("kvgate_request_errors_total{"), 200);
}

TEST_F(ServerTest, Http10ClientsAreServed) {
  StartServer();
  HttpConnection connection(port());
  connection.SendRaw("GET /health HTTP/1.0\r\n\r\n");
  auto result = connection.ReadResponse();
  EXPECT_EQ(result.status, 200);
  EXPECT_FALSE(result.keep_alive);
}

}  // namespace
}  // namespace readkv::server
