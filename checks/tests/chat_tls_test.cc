// The checks through the chat endpoint over verified https with a bearer key, against a real TLS
// server (http/tests/tls_test_server.h): a system and a user message go out, a chatty answer is
// still read right, and the key appears in no output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kvgate/filesystem/remove_tree.h"
#include "kvgate/checks/check_runner.h"
#include "kvgate/checks/errors.h"
#include "tls_test_server.h"

namespace kvgate::checks {
namespace {

namespace ht = http::testing;
constexpr const char kKey[] = "sk-checks-41d2";

ht::TestReply ChatAnswer(const ht::TestRequest& request) {
  if (request.target == "/v1/models") {
    return {200, "application/json", {R"({"data":[{"id":"chat-model"}]})"}, {}};
  }
  nlohmann::json body = nlohmann::json::parse(request.body);
  const std::string prompt = body["messages"].back()["content"];
  const size_t at = prompt.find("The pass key is ");
  const std::string key = prompt.substr(at + 16, prompt.find('.', at) - at - 16);
  nlohmann::json answer = {
      {"object", "chat.completion"},
      {"choices",
       {{{"index", 0},
         {"message",
          {{"role", "assistant"},
           {"content", "Sure! I read 1 document. The pass key is " + key + "."}}},
         {"finish_reason", "stop"}}}},
      {"usage", {{"prompt_tokens", 100}, {"completion_tokens", 9}}}};
  return {200, "application/json", {answer.dump()}, {}};
}

TEST(ChatTlsTest, PasskeyThroughChatOverHttpsScoresChattyAnswersAndHidesTheKey) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("kvgate-checks-tls-" + std::to_string(::getpid()));
  const ht::TestCerts certs = ht::MakeTestCerts(dir);
  {
    ht::TestServer server(true, certs, kKey, ChatAnswer);
    ClientOptions options;
    options.client = {kKey, {}, certs.ca_pem, false};
    options.endpoint = http::Endpoint::kChat;
    PasskeySettings settings;
    settings.items = 6;
    settings.lengths = {512};
    settings.depths = {0.0, 0.5, 1.0};
    CheckRun run = RunPasskeyCheck(server.url(), settings, options);
    EXPECT_EQ(run.all().count, 6);
    EXPECT_EQ(run.all().correct, 6);
    EXPECT_EQ(run.all().errors, 0);
    EXPECT_EQ(run.endpoint, "chat");
    EXPECT_EQ(run.model, "chat-model");
    EXPECT_NE(run.connection.find("certificate verified"), std::string::npos);
    const std::vector<ht::TestRequest> seen = server.requests();
    ASSERT_EQ(seen.size(), 7u);
    nlohmann::json body = nlohmann::json::parse(seen.back().body);
    EXPECT_EQ(body["messages"][0]["role"], "system");
    EXPECT_EQ(body["messages"][0]["content"], kPasskeySystemPrompt);
    EXPECT_EQ(body["messages"][1]["role"], "user");
    EXPECT_EQ(seen.back().target, "/v1/chat/completions");
    EXPECT_EQ(nlohmann::json(run).dump().find(kKey), std::string::npos);

    // The wrong CA: the probe cannot reach the server, and says why.
    options.client.ca_file = certs.other_ca_pem;
    try {
      RunPasskeyCheck(server.url(), settings, options);
      ADD_FAILURE();
    } catch (const ServerUnreachable& e) {
      EXPECT_NE(std::string(e.what()).find("certificate verify failed"), std::string::npos)
          << e.what();
    }
  }
  std::error_code ec;
  kvgate::RemoveTree(dir, ec);
}

TEST(ChatTlsTest, PasskeyAnswersAreReadFromChatProse) {
  EXPECT_EQ(PasskeyAnswer("The pass key is 12345."), "12345");
  EXPECT_EQ(PasskeyAnswer("I found 1 key. The passkey is 678."), "678");
  EXPECT_EQ(PasskeyAnswer(" 4242. Remember it."), "4242");
  EXPECT_FALSE(PasskeyAnswer("I do not know").has_value());
  EXPECT_TRUE(PasskeyCorrect("Step 1: the Pass Key is 007", "7"));
  EXPECT_EQ(QaPrediction("Answer: Paris\nmore"), "Paris");
}

}  // namespace
}  // namespace kvgate::checks
