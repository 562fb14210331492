#include "readkv/model/recall_data.h"

#include <gtest/gtest.h>

namespace readkv::model {
namespace {

TEST(RecallDataTest, PasskeyPromptIsTheProductTemplateAtTheRequestedLength) {
  const std::string p = PasskeyPrompt("48213", 2000, 0.5);
  EXPECT_EQ(p.size(), 2000u);
  EXPECT_EQ(p.rfind(std::string(kPasskeyTask) + "\nThe grass is green. The sky is blue.", 0), 0u);
  EXPECT_NE(p.find("\nThe pass key is 48213. Remember it. 48213 is the pass key.\n"),
            std::string::npos);
  EXPECT_EQ(p.substr(p.size() - kPasskeyQuestion.size() - 1),
            "\n" + std::string(kPasskeyQuestion));
  // Depth 0: the needle right after the task; depth 1: right before the question.
  const std::string top = PasskeyPrompt("7", 1000, 0.0);
  EXPECT_EQ(top.find(std::string(kPasskeyTask) + "\n\nThe pass key is 7."), 0u);
  const std::string bottom = PasskeyPrompt("7", 1000, 1.0);
  EXPECT_NE(bottom.find("7 is the pass key.\n\nWhat is the pass key?"), std::string::npos);
  EXPECT_THROW(PasskeyPrompt("7", 1000, 1.5), std::invalid_argument);
}

TEST(RecallDataTest, SetsAreDeterministicPerSeedAndDifferAcrossSeeds) {
  const std::vector<int> lengths = {600, 1200};
  const std::vector<double> depths = {0.0, 0.5, 1.0};
  const auto a = MakePasskeySet(1, lengths, depths, 2);
  const auto b = MakePasskeySet(1, lengths, depths, 2);
  const auto c = MakePasskeySet(2, lengths, depths, 2);
  ASSERT_EQ(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(static_cast<int>(a[i].prompt.size()), a[i].length_bytes);
  }
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].answers == c[i].answers ? 1 : 0;
  EXPECT_LT(same, 3);
  const auto qa = MakeQaSet(5, lengths, depths, 2);
  ASSERT_EQ(qa.size(), 12u);
  for (const auto& item : qa) {
    EXPECT_NE(item.prompt.find("\n\nQuestion: "), std::string::npos);
    EXPECT_EQ(item.prompt.substr(item.prompt.size() - 8), "\nAnswer:");
    EXPECT_LE(item.prompt.size(), static_cast<size_t>(item.length_bytes) + 80);
    EXPECT_GE(item.prompt.size() + 80, static_cast<size_t>(item.length_bytes));
  }
}

TEST(RecallDataTest, CorpusDocumentsFitTheirBudget) {
  RecallCorpus corpus(9);
  int passkeys = 0, qa = 0, multi = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string doc = corpus.Next(1500);
    EXPECT_LE(doc.size(), 1500u);
    EXPECT_GE(doc.size(), 700u);
    if (doc.find(kPasskeyQuestion) != std::string::npos) ++passkeys;
    if (doc.find("\nQuestion: ") != std::string::npos) ++qa;
    if (doc.find("? The pass key of ") != std::string::npos) ++multi;
  }
  EXPECT_GT(passkeys, 60);
  EXPECT_GT(qa, 40);
  EXPECT_GT(multi, 70);
}

// Where the needle of each passkey document sits: the share of the filler before it.
std::vector<double> NeedleDepths(RecallCorpus& corpus, int docs) {
  std::vector<double> out;
  for (int i = 0; i < docs; ++i) {
    const std::string doc = corpus.Next(4000);
    const size_t question = doc.rfind(kPasskeyQuestion);
    if (doc.rfind(kPasskeyTask, 0) != 0 || question == std::string::npos) continue;
    const size_t needle = doc.find("The pass key is ", kPasskeyTask.size());
    const std::string_view tail = " is the pass key.";
    const size_t needle_end = doc.find(tail, needle) + tail.size();
    const double before = static_cast<double>(needle - kPasskeyTask.size());
    const double after = static_cast<double>(question - needle_end);
    out.push_back(before / (before + after));
  }
  return out;
}

TEST(RecallDataTest, EdgeDepthsPutKeysNearTheEnds) {
  CorpusMix edges;
  edges.passkey = 1.0;
  edges.multikey = 0.0;
  edges.edge_depths = 1.0;
  RecallCorpus corpus(21, edges);
  const std::vector<double> depths = NeedleDepths(corpus, 200);
  ASSERT_EQ(depths.size(), 200u);
  int first = 0, last = 0;
  for (double d : depths) {
    EXPECT_TRUE(d < 0.03 || d > 0.96) << d;
    first += d < 0.03 ? 1 : 0;
    last += d > 0.96 ? 1 : 0;
  }
  EXPECT_GT(first, 60);  // both ends, about half each
  EXPECT_GT(last, 60);
  // Off, the depths spread over the filler as before.
  CorpusMix spread = edges;
  spread.edge_depths = 0.0;
  RecallCorpus plain(21, spread);
  int middle = 0;
  for (double d : NeedleDepths(plain, 200)) middle += d > 0.2 && d < 0.8 ? 1 : 0;
  EXPECT_GT(middle, 80);
}

TEST(RecallDataTest, ScoringFollowsSquadNormalisation) {
  EXPECT_EQ(NormalizeAnswer("  The  Eiffel-Tower, in an old PARIS! "), "eiffeltower in old paris");
  EXPECT_DOUBLE_EQ(TokenF1("Paris", "paris."), 1.0);
  EXPECT_DOUBLE_EQ(TokenF1("the red car", "a blue car"), 0.5);
  EXPECT_DOUBLE_EQ(TokenF1("", "x"), 0.0);
  const std::vector<std::string> golds = {"New York", "NYC"};
  EXPECT_DOUBLE_EQ(MaxTokenF1("nyc", golds), 1.0);
  EXPECT_EQ(FirstInteger(" 12345. Remember"), "12345");
  EXPECT_EQ(FirstInteger("no digits"), std::nullopt);
  EXPECT_EQ(FirstInteger("key 0042 and 7"), "0042");
}

}  // namespace
}  // namespace readkv::model
