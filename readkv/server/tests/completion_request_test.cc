#include "readkv/server/completion_request.h"

#include <gtest/gtest.h>

#include <string>

#include "readkv/server/api_error.h"

namespace readkv::server {
namespace {

using nlohmann::json;

class CompletionRequestTest : public ::testing::Test {
 protected:
  CompletionRequestTest() {
    model_.model_id = "m";
    model_.kv_backend = "readkv";
    model_.vocab_size = 258;
    model_.max_context = 64;
    model_.bos_token = 256;
    model_.eos_token = 257;
  }

  CompletionCall Parse(const json& body) {
    return ParseCompletionRequest(body.dump(), model_, "served", tokenizer_);
  }

  // The ApiError a body raises (fails the test if none).
  ApiError ErrorOf(const std::string& body) {
    try {
      ParseCompletionRequest(body, model_, "served", tokenizer_);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "accepted: " << body;
    return ApiError(0, "", "");
  }

  engine::ModelInfo model_;
  engine::ByteTokenizer tokenizer_;
};

TEST_F(CompletionRequestTest, DefaultsFollowOpenAi) {
  const CompletionCall call = Parse({{"prompt", "abc"}});
  EXPECT_EQ(call.request.prompt, (std::vector<int32_t>{256, 'a', 'b', 'c'}));
  EXPECT_EQ(call.request.params.max_tokens, 16);
  EXPECT_EQ(call.request.params.temperature, 1.0);
  EXPECT_FALSE(call.request.params.seed.has_value());
  EXPECT_FALSE(call.stream);
  EXPECT_FALSE(call.has_read_policy);
}

// Hostile-test finding (2026-12-02): fp8 and dense servers accepted and echoed a `readkv`
// object they do not apply. A valid one is refused by name on any other KV cache.
TEST_F(CompletionRequestTest, AReadPolicyOnAnotherKvCacheIsRefused) {
  for (const char* backend : {"fp8", "dense"}) {
    model_.kv_backend = backend;
    const ApiError error = ErrorOf(R"({"prompt": "x", "readkv": {"read_bits": 2}})");
    EXPECT_EQ(error.status(), 400) << backend;
    EXPECT_EQ(error.code(), "readkv_not_supported") << backend;
    EXPECT_NE(std::string(error.what()).find(backend), std::string::npos) << error.what();
    EXPECT_FALSE(Parse({{"prompt", "x"}}).has_read_policy) << backend;  // and no object is fine
  }
}

TEST_F(CompletionRequestTest, DefaultMaxTokensIsCappedByTheContextLeft) {
  const CompletionCall call = Parse({{"prompt", std::string(60, 'a')}});  // 61 tokens of 64
  EXPECT_EQ(call.request.params.max_tokens, 3);
}

TEST_F(CompletionRequestTest, ParsesEveryField) {
  const CompletionCall call = Parse(
      {{"model", "served"},
       {"prompt", {256, 1, 2}},
       {"max_tokens", 5.0},
       {"temperature", 0},
       {"seed", 7},
       {"stop", "\n"},
       {"ignore_eos", true},
       {"stream", true},
       {"stream_options", {{"include_usage", true}}},
       {"readkv", {{"read_bits", 2}, {"reader", "flexible"}, {"key_bits", 3}, {"value_bits", 1}}},
       {"user", "ignored"},
       {"n", 1},
       {"top_p", 1},
       {"logprobs", nullptr}});
  EXPECT_EQ(call.request.prompt, (std::vector<int32_t>{256, 1, 2}));
  EXPECT_EQ(call.request.params.max_tokens, 5);
  EXPECT_EQ(call.request.params.temperature, 0.0);
  EXPECT_EQ(call.request.params.seed, 7u);
  EXPECT_EQ(call.request.params.stop, (std::vector<std::string>{"\n"}));
  EXPECT_TRUE(call.request.params.ignore_eos);
  EXPECT_TRUE(call.stream);
  EXPECT_TRUE(call.include_usage);
  ASSERT_TRUE(call.has_read_policy);
  EXPECT_EQ(call.request.read_policy.read_bits, 2.0);
  EXPECT_EQ(call.request.read_policy.reader, "flexible");
  EXPECT_EQ(call.request.read_policy.key_bits, 3.0);
  EXPECT_EQ(call.request.read_policy.value_bits, 1.0);
  EXPECT_EQ(
      ReadPolicyToJson(call.request.read_policy),
      json({{"read_bits", 2.0}, {"reader", "flexible"}, {"key_bits", 3.0}, {"value_bits", 1.0}}));
}

TEST_F(CompletionRequestTest, ErrorsNameTheField) {
  struct Case {
    std::string body;
    int status;
    std::string code;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"{", 400, "invalid_json", ""},
      {R"({"prompt": 1})", 400, "invalid_type", "prompt"},
      {R"({"prompt": [1, -1]})", 400, "invalid_value", "prompt[1]"},
      {R"({"prompt": [1, 258]})", 400, "invalid_value", "prompt[1]"},
      {R"({"prompt": "x", "max_tokens": 1.5})", 400, "invalid_type", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 63})", 400, "max_tokens_too_large", "max_tokens"},
      {R"({"prompt": "x", "temperature": -0.1})", 400, "invalid_value", "temperature"},
      {R"({"prompt": "x", "seed": "s"})", 400, "invalid_type", "seed"},
      {R"({"prompt": "x", "stop": ["a", 1]})", 400, "invalid_type", "stop[1]"},
      {R"({"prompt": "x", "readkv": {"read_bits": 0}})", 400, "invalid_value", "readkv.read_bits"},
      {R"({"prompt": "x", "readkv": {"value_bits": 2}})", 400, "invalid_value", "readkv.key_bits"},
      {R"({"prompt": "x", "readkv": {"depth": 2}})", 400, "unknown_readkv_field", "readkv.depth"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", 400,
       "invalid_type", "stream_options.include_usage"},
      {R"({"prompt": "x", "echo": true})", 400, "unsupported_parameter", "echo"},
      {R"({"prompt": "x", "top_p": 0.5})", 400, "unsupported_parameter", "top_p"},
      {R"({"prompt": "x", "logit_bias": {"1": 2}})", 400, "unsupported_parameter", "logit_bias"},
      {R"({"prompt": "x", "model": 3})", 400, "invalid_type", "model"},
      {R"({"prompt": "x", "model": "other"})", 404, "model_not_found", "model"},
  };
  for (const Case& c : cases) {
    const ApiError error = ErrorOf(c.body);
    EXPECT_EQ(error.status(), c.status) << c.body;
    EXPECT_EQ(error.code(), c.code) << c.body << " -> " << error.what();
    EXPECT_EQ(error.param(), c.param) << c.body;
    if (!c.param.empty()) {
      EXPECT_NE(std::string(error.what()).find(c.param), std::string::npos) << error.what();
    }
  }
}

TEST_F(CompletionRequestTest, ErrorBodyHasTheOpenAiShape) {
  const ApiError error(400, "invalid_value", "temperature: must be in [0, 2]", "temperature");
  const json body = json::parse(error.Body());
  EXPECT_EQ(body["error"]["message"], "temperature: must be in [0, 2]");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "temperature");
  EXPECT_EQ(body["error"]["code"], "invalid_value");
  EXPECT_EQ(ApiError(429, "queue_full", "x").type(), "rate_limit_error");
  EXPECT_EQ(ApiError(503, "shutting_down", "x").type(), "server_error");
}

}  // namespace
}  // namespace readkv::server
