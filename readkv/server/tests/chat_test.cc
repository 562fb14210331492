// The chat API, /v1/models/{id} and /tokenize of the real server on 127.0.0.1:0 in front of the
// tiny real model (tiny_llama.h): chat is the completions generation in chat shapes, with the
// chat template of chat_request.h.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "http_test_client.h"
#include "readkv/server/api_error.h"
#include "readkv/server/chat_request.h"
#include "readkv/server/server.h"
#include "tiny_llama.h"

namespace readkv::server {
namespace {

using nlohmann::json;
using testing::HttpConnection;
using testing::SseData;

class ChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    engine::EngineOptions options;
    options.model_name = "test-model";
    model_ = testing::LoadTinyLlama(codec::KvBackend::kDense);
    tokenizer_ = testing::TinyLlamaTokenizer();
    engine_ = std::make_unique<engine::Engine>(*model_, *tokenizer_, options);
    server_ = std::make_unique<Server>(*engine_, *tokenizer_, ServerOptions{});
    server_->Start();
  }
  void TearDown() override { server_->Shutdown(std::chrono::milliseconds(0)); }
  uint16_t port() const { return server_->port(); }

  std::unique_ptr<engine::DecodeModel> model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Server> server_;
};

TEST(ChatTemplateTest, DropsSystemMessagesAndConcatenatesTheRest) {
  json messages = {{{"role", "system"}, {"content", "Answer with the pass key only."}},
                   {{"role", "user"}, {"content", "Facts.\n\nQuestion: Who?\nAnswer:"}},
                   {{"role", "assistant"}, {"content", " Ann"}},
                   {{"role", "user"},
                    {"content", {{{"type", "text"}, {"text", "\n\nQuestion: Where?\nAnswer:"}}}}}};
  EXPECT_EQ(ApplyChatTemplate(messages),
            "Facts.\n\nQuestion: Who?\nAnswer: Ann\n\nQuestion: Where?\nAnswer:");
  for (const json& bad :
       {json::array(), json{{{"role", "system"}, {"content", "x"}}},
        json{{{"role", "tool"}, {"content", "x"}}}, json{{{"content", "x"}}},
        json{{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}) {
    EXPECT_THROW(ApplyChatTemplate(bad), ApiError) << bad.dump();
  }
}

TEST_F(ChatTest, ChatAnswersTheSameGreedyTextAsCompletionsInChatShape) {
  HttpConnection connection(port());
  const json completion = connection
                              .Post("/v1/completions", {{"prompt", "Hello"},
                                                        {"max_tokens", 8},
                                                        {"temperature", 0},
                                                        {"ignore_eos", true}})
                              .Json();
  auto result = connection.Post(
      "/v1/chat/completions",
      {{"model", "test-model"},
       {"messages", {{{"role", "system"}, {"content", "Be brief."}},
                     {{"role", "user"}, {"content", "Hello"}}}},
       {"max_completion_tokens", 8},
       {"temperature", 0},
       {"ignore_eos", true}});
  ASSERT_EQ(result.status, 200) << result.body;
  const json chat = result.Json();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_TRUE(chat["id"].get<std::string>().starts_with("chatcmpl-"));
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], completion["choices"][0]["text"]);
  EXPECT_EQ(chat["usage"], completion["usage"]);
  // A bad message is a 400 naming it; the connection serves on.
  auto bad = connection.Post("/v1/chat/completions",
                             {{"messages", {{{"role", "tool"}, {"content", "x"}}}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.Json()["error"]["param"], "messages[0].role");
}

TEST_F(ChatTest, StreamedChatSendsARoleChunkThenContentDeltasThenUsageAndDone) {
  HttpConnection connection(port());
  const json request = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                        {"max_tokens", 6},
                        {"temperature", 0},
                        {"ignore_eos", true}};
  const std::string expected =
      connection.Post("/v1/chat/completions", request).Json()["choices"][0]["message"]["content"];
  json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  auto result = connection.Post("/v1/chat/completions", streamed);
  ASSERT_EQ(result.status, 200);
  const auto data = SseData(result.body);
  ASSERT_GE(data.size(), 4u);
  EXPECT_EQ(data.back(), "[DONE]");
  const json role = json::parse(data[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 1; i + 2 < data.size(); ++i) {
    const json chunk = json::parse(data[i]);
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content")) text += delta["content"].get<std::string>();
  }
  EXPECT_EQ(text, expected);
  const json usage = json::parse(data[data.size() - 2]);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
}

TEST_F(ChatTest, ModelByIdAndTokenizeAnswerLikeVllm) {
  HttpConnection connection(port());
  auto model = connection.Get("/v1/models/test-model");
  ASSERT_EQ(model.status, 200);
  EXPECT_EQ(model.Json()["id"], "test-model");
  EXPECT_EQ(model.Json()["object"], "model");
  auto missing = connection.Get("/v1/models/other");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.Json()["error"]["code"], "model_not_found");
  auto tokens = connection.Post("/tokenize", {{"prompt", "Hi!"}});
  ASSERT_EQ(tokens.status, 200);
  EXPECT_EQ(tokens.Json()["count"], 4);  // BOS and three bytes
  EXPECT_EQ(tokens.Json()["tokens"].size(), 4u);
  EXPECT_EQ(tokens.Json()["max_model_len"], engine_->model_info().max_context);
  // The count is the usage the completions API reports for the same text.
  auto completion = connection.Post("/v1/completions", {{"prompt", "Hi!"}, {"max_tokens", 1}});
  EXPECT_EQ(completion.Json()["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(connection.Post("/tokenize", {{"text", "x"}}).status, 400);
}

}  // namespace
}  // namespace readkv::server
