#include "kvgate/checks/quality_record.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvgate::checks {
namespace {

QualityRecord Record(std::string id, std::vector<std::string> subsets, double score, bool correct,
                     std::string error = "") {
  QualityRecord r;
  r.check = "qa";
  r.item_id = std::move(id);
  r.subsets = std::move(subsets);
  r.score = score;
  r.correct = correct;
  r.error = std::move(error);
  return r;
}

TEST(SummarizeBySubsetTest, AllComesFirstThenSubsetsByName) {
  std::vector<QualityRecord> records = {
      Record("1", {"length=2048", "depth=0-33%"}, 100, true),
      Record("2", {"length=1024", "depth=0-33%"}, 50, false),
      Record("3", {"length=1024"}, 0, false, "HTTP 500"),
  };
  std::vector<SubsetSummary> s = SummarizeBySubset(records);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].subset, "all");
  EXPECT_EQ(s[0].count, 3);
  EXPECT_EQ(s[0].correct, 1);
  EXPECT_EQ(s[0].errors, 1);
  EXPECT_DOUBLE_EQ(s[0].mean_score, 50.0);
  EXPECT_EQ(s[1].subset, "depth=0-33%");
  EXPECT_DOUBLE_EQ(s[1].mean_score, 75.0);
  EXPECT_EQ(s[2].subset, "length=1024");
  EXPECT_EQ(s[2].count, 2);
  EXPECT_DOUBLE_EQ(s[2].mean_score, 25.0);
  EXPECT_EQ(s[3].subset, "length=2048");
}

TEST(SummarizeBySubsetTest, ErroredItemsScoreZeroWhateverTheirScoreField) {
  std::vector<QualityRecord> records = {Record("1", {}, 100, false, "timeout")};
  EXPECT_DOUBLE_EQ(SummarizeBySubset(records)[0].mean_score, 0.0);
  EXPECT_EQ(SummarizeBySubset({})[0].count, 0);
}

TEST(QualityRecordTest, JsonRoundTripKeepsEveryField) {
  QualityRecord r = Record("item-9", {"a", "b"}, 66.5, false);
  r.check = "passkey";
  r.prompt_bytes = 4096;
  r.prompt_tokens = 4097;
  r.prediction = " 12345.\n\"quoted\"";
  r.gold = {"12345"};
  r.latency_s = 0.25;
  r.error = "x";
  nlohmann::json j = r;
  EXPECT_EQ(j.size(), 11u);
  QualityRecord back = j.get<QualityRecord>();
  EXPECT_EQ(back.check, r.check);
  EXPECT_EQ(back.item_id, r.item_id);
  EXPECT_EQ(back.subsets, r.subsets);
  EXPECT_EQ(back.prompt_bytes, r.prompt_bytes);
  EXPECT_EQ(back.prompt_tokens, r.prompt_tokens);
  EXPECT_EQ(back.prediction, r.prediction);
  EXPECT_EQ(back.gold, r.gold);
  EXPECT_EQ(back.score, r.score);
  EXPECT_EQ(back.correct, r.correct);
  EXPECT_EQ(back.latency_s, r.latency_s);
  EXPECT_EQ(back.error, r.error);
  j.erase("gold");
  EXPECT_THROW(j.get<QualityRecord>(), nlohmann::json::exception);
}

}  // namespace
}  // namespace kvgate::checks
