// A user's passkey set (`kvgate check passkey --dataset FILE`): every bad line is refused as
// FILE:LINE: field: what, and a run against a real HTTP server on 127.0.0.1 sends each prompt as
// given and scores chat-style prose answers with the passkey answer extraction.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "kvgate/checks/check_runner.h"
#include "kvgate/checks/errors.h"
#include "kvgate/checks/passkey.h"
#include "scripted_server.h"

namespace kvgate::checks {
namespace {

using testing::ScriptedReply;
using testing::ScriptedRequest;
using testing::ScriptedServer;

std::string ErrorOf(const std::string& text) {
  std::istringstream in(text);
  try {
    ParsePasskeyJsonl(in, "set.jsonl");
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PasskeyDatasetTest, ABadLineIsRefusedWithFileLineAndField) {
  const std::string good = R"({"id": 1, "prompt": "p", "key": "123"})" "\n";
  EXPECT_EQ(ErrorOf(good + "{oops\n"), "set.jsonl:2: not valid JSON");
  EXPECT_EQ(ErrorOf(good + R"({"id": 2, "key": "1"})"), "set.jsonl:2: prompt: missing");
  EXPECT_EQ(ErrorOf(R"({"id": 2, "prompt": "p", "key": "12a"})"),
            "set.jsonl:1: key: '12a' is not decimal digits");
  EXPECT_EQ(ErrorOf(R"({"id": 2, "prompt": "p", "key": 5, "extra": 1})"),
            "set.jsonl:1: extra: unknown field (expected id, prompt, key, subset)");
  EXPECT_EQ(ErrorOf(good + "\n" + good), "set.jsonl:3: id: '1' appears on an earlier line too");
  EXPECT_EQ(ErrorOf(""), "set.jsonl:0: no items (the file is empty)");
  EXPECT_THROW(LoadPasskeyJsonl("/nonexistent/set.jsonl"), DatasetError);
}

TEST(PasskeyDatasetTest, PromptsAreSentAsGivenAndProseAnswersAreScored) {
  std::ostringstream file;
  for (int i = 0; i < 6; ++i) {
    file << nlohmann::json{{"id", "item-" + std::to_string(i)},
                           {"prompt", "Custom prompt " + std::to_string(i) + ": find 4242" +
                                          std::to_string(i)},
                           {"key", 42420 + i},
                           {"subset", i < 3 ? "short" : "long"}}
                .dump()
         << "\n";
  }
  std::istringstream in(file.str());
  const std::vector<PasskeyItem> items = ParsePasskeyJsonl(in, "set.jsonl");
  ScriptedServer server([](const ScriptedRequest& request) {
    if (request.target != "/v1/completions") return ScriptedReply{404, "{}"};
    const std::string prompt = nlohmann::json::parse(request.body).at("prompt");
    const std::string key = prompt.substr(prompt.size() - 5);
    // Items 0-4 answer in chat prose with a distracting number first; item 5 answers wrong.
    const std::string answer = key.back() == '5' ? "The pass key is 11111."
                                                 : "Sure! I found 1 key. The pass key is " + key;
    return ScriptedReply{200, nlohmann::json{{"choices", {{{"index", 0}, {"text", answer}}}}}
                                  .dump()};
  });
  CheckRun run = RunPasskeyItems(server.url(), items, 10, ClientOptions{});
  ASSERT_EQ(run.records.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(run.records[i].item_id, items[i].id);
    EXPECT_EQ(run.records[i].correct, i != 5) << run.records[i].prediction;
    EXPECT_EQ(run.records[i].subsets, std::vector<std::string>{i < 3 ? "short" : "long"});
  }
  const nlohmann::json json = run;
  ASSERT_EQ(json["items"].size(), 6u);
  EXPECT_EQ(json["items"][5]["score"], 0.0);
  EXPECT_EQ(json["items"][0]["score"], 100.0);
}

}  // namespace
}  // namespace kvgate::checks
