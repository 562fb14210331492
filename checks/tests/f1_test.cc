#include "kvgate/checks/f1.h"

#include <gtest/gtest.h>

namespace kvgate::checks {
namespace {

TEST(NormalizeAnswerTest, LowercasesDropsPunctuationArticlesAndExtraSpace) {
  EXPECT_EQ(NormalizeAnswer("The Cat!"), "cat");
  EXPECT_EQ(NormalizeAnswer("  A  quick,\tbrown fox. "), "quick brown fox");
  EXPECT_EQ(NormalizeAnswer("an apple"), "apple");
  EXPECT_EQ(NormalizeAnswer("THE"), "");
}

TEST(NormalizeAnswerTest, RemovesPunctuationInsideWordsWithoutSplittingThem) {
  // As the SQuAD script does: punctuation goes first, so "don't" becomes one token "dont".
  EXPECT_EQ(NormalizeAnswer("don't stop"), "dont stop");
  EXPECT_EQ(NormalizeAnswer("U.S.A."), "usa");
}

TEST(NormalizeAnswerTest, KeepsWordsThatOnlyStartWithAnArticle) {
  EXPECT_EQ(NormalizeAnswer("Theater and another anchor"), "theater and another anchor");
  // "the-end" loses its hyphen first and is then one word, not an article.
  EXPECT_EQ(NormalizeAnswer("the-end"), "theend");
}

TEST(NormalizeAnswerTest, LeavesNonAsciiBytesAlone) {
  EXPECT_EQ(NormalizeAnswer("Zürich"), "zürich");
}

TEST(TokenF1Test, NormalisedEqualTextsScoreOne) {
  EXPECT_DOUBLE_EQ(TokenF1("The Cat!", "cat"), 1.0);
  EXPECT_DOUBLE_EQ(MaxTokenF1("The Cat!", {"cat"}) * 100.0, 100.0);
}

TEST(TokenF1Test, PartialOverlapMatchesHandComputedValue) {
  // prediction {cat, sat, on, mat}, gold {cat, on, mat}: 3 shared, P = 3/4, R = 1, F1 = 6/7.
  EXPECT_NEAR(TokenF1("the cat sat on the mat", "a cat on a mat"), 6.0 / 7.0, 1e-12);
  // prediction {paris}, gold {paris, france}: P = 1, R = 1/2, F1 = 2/3.
  EXPECT_NEAR(TokenF1("Paris", "Paris, France"), 2.0 / 3.0, 1e-12);
}

TEST(TokenF1Test, CountsTokensAsAMultiset) {
  // {cat, cat, cat} vs {cat}: 1 shared, P = 1/3, R = 1, F1 = 1/2.
  EXPECT_NEAR(TokenF1("cat cat cat", "cat"), 0.5, 1e-12);
  // {cat, cat} vs {cat, cat, dog}: 2 shared, P = 1, R = 2/3, F1 = 0.8.
  EXPECT_NEAR(TokenF1("cat cat", "cat cat dog"), 0.8, 1e-12);
}

TEST(TokenF1Test, EmptyPredictionScoresZero) {
  EXPECT_DOUBLE_EQ(TokenF1("", "cat"), 0.0);
  EXPECT_DOUBLE_EQ(TokenF1("   ", "cat"), 0.0);
  EXPECT_DOUBLE_EQ(TokenF1("the", "cat"), 0.0);
}

TEST(TokenF1Test, NoSharedTokenScoresZeroEvenWhenBothNormaliseToNothing) {
  // SQuAD v1.1: num_same == 0 → 0.
  EXPECT_DOUBLE_EQ(TokenF1("dog", "cat"), 0.0);
  EXPECT_DOUBLE_EQ(TokenF1("the", "a"), 0.0);
}

TEST(MaxTokenF1Test, TakesTheBestGoldAnswer) {
  EXPECT_NEAR(MaxTokenF1("Paris", {"London", "Paris, France"}), 2.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(MaxTokenF1("Paris", {"London", "Paris, France", "paris"}), 1.0);
  EXPECT_DOUBLE_EQ(MaxTokenF1("Paris", {}), 0.0);
}

TEST(ExactMatchTest, ComparesNormalForms) {
  EXPECT_TRUE(ExactMatch("  the Eiffel tower.", {"Eiffel Tower"}));
  EXPECT_FALSE(ExactMatch("Eiffel", {"Eiffel Tower"}));
  EXPECT_TRUE(ExactMatch("1990", {"1989", "1990"}));
}

TEST(DatasetScoreTest, IsOneHundredTimesTheMean) {
  EXPECT_DOUBLE_EQ(DatasetScore({1.0, 0.5, 0.0}), 50.0);
  EXPECT_DOUBLE_EQ(DatasetScore({}), 0.0);
}

}  // namespace
}  // namespace kvgate::checks
