#include "kvgate/checks/check_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "kvgate/checks/errors.h"
#include "scripted_server.h"

namespace kvgate::checks {
namespace {

using testing::ScriptedReply;
using testing::ScriptedRequest;
using testing::ScriptedServer;

std::string CompletionBody(const std::string& text) {
  return nlohmann::json{{"choices", {{{"index", 0}, {"text", text}}}},
                        {"usage", {{"prompt_tokens", 77}, {"completion_tokens", 3}}}}
      .dump();
}

// An outside endpoint with known answers: it reads the key from the needle and answers with it,
// except that it answers one wrong key for every seventh item and fails one item with HTTP 500.
ScriptedReply PasskeyServer(const ScriptedRequest& request) {
  if (request.target != "/v1/completions") return ScriptedReply{404, "{}"};
  std::string prompt = nlohmann::json::parse(request.body).at("prompt");
  std::smatch m;
  if (!std::regex_search(prompt, m, std::regex("The pass key is (\\d+)\\."))) {
    return ScriptedReply{400, R"({"error": {"message": "no needle"}})"};
  }
  const std::string key = m[1].str();
  if (key.back() == '7') return ScriptedReply{500, R"({"error": {"message": "boom"}})"};
  if (key.back() == '3') return ScriptedReply{200, CompletionBody(" 1" + key + ".")};
  return ScriptedReply{200, CompletionBody(" " + key + ". Remember it.")};
}

TEST(PasskeyCheckTest, ScoresEveryItemFromTheServersAnswers) {
  ScriptedServer server(PasskeyServer);
  PasskeySettings settings;
  settings.items = 60;
  settings.lengths = {512, 1024};
  settings.depths = {0.0, 0.5, 1.0};
  ClientOptions options;
  options.concurrency = 3;
  CheckRun run = RunPasskeyCheck(server.url(), settings, options);

  std::vector<PasskeyItem> items = GeneratePasskeyItems(settings);
  ASSERT_EQ(run.records.size(), items.size());
  int expected_correct = 0, expected_errors = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const QualityRecord& r = run.records[i];
    const char last = items[i].key.back();
    EXPECT_EQ(r.check, "passkey");
    EXPECT_EQ(r.item_id, items[i].id);
    EXPECT_EQ(r.gold, std::vector<std::string>{items[i].key});
    EXPECT_EQ(r.subsets, items[i].subsets);
    EXPECT_EQ(r.prompt_bytes, items[i].target_length);
    if (last == '7') {
      ++expected_errors;
      EXPECT_EQ(r.error, "POST " + server.url() + "/v1/completions: HTTP 500: boom");
      EXPECT_FALSE(r.correct);
      EXPECT_EQ(r.score, 0.0);
      EXPECT_EQ(r.prompt_tokens, -1);
    } else if (last == '3') {
      EXPECT_TRUE(r.ok());
      EXPECT_FALSE(r.correct) << r.prediction;
      EXPECT_EQ(r.score, 0.0);
    } else {
      ++expected_correct;
      EXPECT_TRUE(r.correct) << r.prediction;
      EXPECT_EQ(r.score, 100.0);
      EXPECT_EQ(r.prediction, " " + items[i].key + ". Remember it.");
      EXPECT_EQ(r.prompt_tokens, 77);
    }
  }
  ASSERT_GT(expected_errors, 0);
  ASSERT_GT(expected_correct, 0);
  const SubsetSummary& all = run.all();
  EXPECT_EQ(all.subset, "all");
  EXPECT_EQ(all.count, 60);
  EXPECT_EQ(all.correct, expected_correct);
  EXPECT_EQ(all.errors, expected_errors);
  EXPECT_NEAR(all.mean_score, 100.0 * expected_correct / 60.0, 1e-9);
  EXPECT_EQ(run.summary.size(), 1u + 2u + 3u);  // all, two lengths, three depths
  EXPECT_EQ(run.url, server.url());
}

TEST(PasskeyCheckTest, UnreachableServerThrowsBeforeAnyItem) {
  const std::string url = "http://127.0.0.1:" + std::to_string(testing::UnusedPort());
  PasskeySettings settings;
  settings.items = 3;
  EXPECT_THROW(RunPasskeyCheck(url, settings, ClientOptions{}), ServerUnreachable);
}

// Answers the gold for even items, a half-right answer for items ≡ 1 mod 4, and a wrong one
// otherwise, from a table built from the same seeded set.
TEST(QaCheckTest, ScoresF1AndExactMatchPerItemAndSubset) {
  QaSetSettings settings;
  settings.items = 24;
  settings.lengths = {1024, 2048};
  std::vector<QaItem> items = GenerateQaSet(settings);
  std::map<std::string, std::string> answer_for;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string gold = items[i].answers[0];
    std::string text = i % 2 == 0 ? " " + gold + "\nQuestion: more"
                                  : (i % 4 == 1 ? " " + gold + " city" : " nobody knows");
    answer_for[QaPrompt(items[i])] = text;
  }
  std::atomic<bool> stop_sent{true};
  ScriptedServer server([&](const ScriptedRequest& request) {
    if (request.target != "/v1/completions") return ScriptedReply{404, "{}"};
    nlohmann::json body = nlohmann::json::parse(request.body);
    if (body.value("stop", nlohmann::json::array()) != nlohmann::json::array({"\n"})) {
      stop_sent = false;
    }
    return ScriptedReply{200, CompletionBody(answer_for.at(body.at("prompt")))};
  });
  CheckRun run = RunQaCheck(server.url(), items, settings.max_tokens, ClientOptions{});
  EXPECT_TRUE(stop_sent);
  ASSERT_EQ(run.records.size(), 24u);
  double sum = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const QualityRecord& r = run.records[i];
    EXPECT_EQ(r.check, "qa");
    EXPECT_EQ(r.gold, items[i].answers);
    EXPECT_EQ(r.prompt_bytes, static_cast<int64_t>(QaPrompt(items[i]).size()));
    if (i % 2 == 0) {
      EXPECT_EQ(r.prediction, items[i].answers[0]);
      EXPECT_DOUBLE_EQ(r.score, 100.0);
      EXPECT_TRUE(r.correct);
    } else if (i % 4 == 1) {
      // One gold token of two predicted: P = 1/2, R = 1 (or less if the gold has more tokens).
      EXPECT_NEAR(r.score, 100.0 * 2.0 / 3.0, 1e-9) << r.prediction;
      EXPECT_FALSE(r.correct);
    } else {
      EXPECT_DOUBLE_EQ(r.score, 0.0);
    }
    sum += r.score;
  }
  EXPECT_NEAR(run.all().mean_score, sum / 24.0, 1e-9);
  std::map<std::string, SubsetSummary> by_name;
  for (const SubsetSummary& s : run.summary) by_name[s.subset] = s;
  EXPECT_EQ(by_name.at("length=1024").count, 12);
  EXPECT_EQ(by_name.at("depth=0-33%").count, 8);
}

TEST(QaCheckTest, JsonOutputCarriesSummaryAndItems) {
  QaItem item{"q1", "Bob lives in Oslo.", "Where does Bob live?", {"Oslo"}, {"tiny"}};
  ScriptedServer server([](const ScriptedRequest& request) {
    if (request.target != "/v1/completions") return ScriptedReply{404, "{}"};
    return ScriptedReply{200, CompletionBody(" Oslo")};
  });
  CheckRun run = RunQaCheck(server.url(), {item}, 8, ClientOptions{});
  nlohmann::json j = run;
  EXPECT_EQ(j.at("check"), "qa");
  EXPECT_EQ(j.at("summary").at(0).at("subset"), "all");
  EXPECT_EQ(j.at("summary").at(1).at("subset"), "tiny");
  EXPECT_EQ(j.at("items").at(0).at("prediction"), "Oslo");
  EXPECT_EQ(j.at("items").at(0).at("score"), 100.0);
  EXPECT_THROW(RunQaCheck(server.url(), {}, 8, ClientOptions{}), InvalidSetting);
}

// The sink sees each sent item's record as it is scored, the same record the run returns; after
// a stop it has seen only the items that were sent, while the run's records name the rest as
// not sent.
TEST(PasskeyCheckTest, TheSinkGetsEachSentItemsRecordAsItIsScored) {
  ScriptedServer server(PasskeyServer);
  PasskeySettings settings;
  settings.items = 30;
  settings.lengths = {512};
  ClientOptions options;
  options.concurrency = 2;
  std::map<std::string, nlohmann::json> sunk;
  const CheckRun run = RunPasskeyCheck(server.url(), settings, options, {},
                                       [&](const QualityRecord& r) { sunk[r.item_id] = r; });
  ASSERT_EQ(sunk.size(), 30u);
  for (const QualityRecord& r : run.records) {
    EXPECT_EQ(sunk.at(r.item_id), nlohmann::json(r)) << r.item_id;
  }

  std::atomic<int> answered{0};
  options.stop_requested = [&] { return answered.load() >= 7; };
  std::vector<std::string> kept;
  const CheckRun cut = RunPasskeyCheck(server.url(), settings, options, {},
                                       [&](const QualityRecord& r) {
                                         kept.push_back(r.item_id);
                                         ++answered;
                                       });
  EXPECT_GE(kept.size(), 7u);
  EXPECT_LE(kept.size(), 8u);  // one more may have been in flight on the other connection
  size_t unsent = 0;
  for (const QualityRecord& r : cut.records) {
    unsent += r.error.find("not sent: stop requested") != std::string::npos;
  }
  EXPECT_EQ(unsent, 30u - kept.size());
}

}  // namespace
}  // namespace kvgate::checks
