#include "kvgate/checks/passkey.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "kvgate/checks/errors.h"

namespace kvgate::checks {
namespace {

TEST(PasskeyPromptTest, FollowsTheLandmarkTemplateExactly) {
  const int64_t minimum = MinimumPasskeyLength(5);
  PasskeyItem item = BuildPasskeyItem(minimum + 30, 0.5, "12345");
  const std::string expected =
      "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
      "them. I will quiz you about the important information there.\n"
      "The grass is gr\n"
      "The pass key is 12345. Remember it. 12345 is the pass key.\n"
      "The grass is gr\n"
      "What is the pass key? The pass key is";
  EXPECT_EQ(item.prompt, expected);
  EXPECT_EQ(item.filler_before, 15);
  EXPECT_EQ(item.filler_after, 15);
}

TEST(PasskeyPromptTest, FillerRepeatsTheGarbageStringWithSpacesBetweenCopies) {
  // Two copies, the space between them, then " The g" of the third.
  const int64_t filler = 2 * static_cast<int64_t>(kPasskeyFiller.size()) + 1 + 6;
  PasskeyItem item = BuildPasskeyItem(MinimumPasskeyLength(5) + filler, 1.0, "54321");
  const std::string expected_filler =
      std::string(kPasskeyFiller) + " " + std::string(kPasskeyFiller) + " The g";
  EXPECT_EQ(item.prompt.substr(kPasskeyTaskDescription.size() + 1, expected_filler.size()),
            expected_filler);
  EXPECT_EQ(item.filler_after, 0);
  // With no filler after the needle, the original's empty line remains.
  EXPECT_NE(item.prompt.find("pass key.\n\nWhat is the pass key?"), std::string::npos);
}

TEST(PasskeyPromptTest, HasExactlyTheRequestedLengthAndNeedleDepth) {
  for (int64_t length : {300, 1024, 2048, 4096, 8192}) {
    for (double depth : {0.0, 0.1, 0.25, 0.5, 0.77, 1.0}) {
      PasskeyItem item = BuildPasskeyItem(length, depth, "98765");
      ASSERT_EQ(static_cast<int64_t>(item.prompt.size()), length) << length << " " << depth;
      const int64_t filler = item.filler_before + item.filler_after;
      EXPECT_EQ(filler, length - MinimumPasskeyLength(5));
      // The needle sits after the task line and depth × filler bytes (within rounding).
      EXPECT_LE(std::abs(static_cast<double>(item.filler_before) - depth * filler), 0.5);
      EXPECT_EQ(item.needle_offset,
                static_cast<int64_t>(kPasskeyTaskDescription.size()) + 1 + item.filler_before + 1);
      EXPECT_EQ(item.prompt.compare(static_cast<size_t>(item.needle_offset),
                                    PasskeyNeedle("98765").size(), PasskeyNeedle("98765")),
                0);
      // One needle, one question, at the very end.
      EXPECT_EQ(item.prompt.find("98765"), static_cast<size_t>(item.needle_offset) + 16);
      EXPECT_EQ(item.prompt.rfind(kPasskeyQuestion), item.prompt.size() - kPasskeyQuestion.size());
    }
  }
}

TEST(PasskeyPromptTest, RejectsLengthsBelowTheFixedTextAndBadDepths) {
  EXPECT_THROW(BuildPasskeyItem(MinimumPasskeyLength(5) - 1, 0.5, "12345"), InvalidSetting);
  EXPECT_NO_THROW(BuildPasskeyItem(MinimumPasskeyLength(5), 0.5, "12345"));
  EXPECT_THROW(BuildPasskeyItem(1024, 1.5, "12345"), InvalidSetting);
  EXPECT_THROW(BuildPasskeyItem(1024, -0.1, "12345"), InvalidSetting);
  EXPECT_THROW(BuildPasskeyItem(1024, 0.5, "12a45"), InvalidSetting);
}

TEST(PasskeySetTest, IsDeterministicPerSeed) {
  PasskeySettings settings;
  settings.items = 30;
  settings.lengths = {512, 1024};
  std::vector<PasskeyItem> a = GeneratePasskeyItems(settings);
  std::vector<PasskeyItem> b = GeneratePasskeyItems(settings);
  ASSERT_EQ(a.size(), 30u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
  }
  settings.seed = 1;
  std::vector<PasskeyItem> c = GeneratePasskeyItems(settings);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].key == c[i].key;
  EXPECT_LT(same, 3);
}

TEST(PasskeySetTest, KeysHaveTheConfiguredNumberOfDigits) {
  PasskeySettings settings;
  settings.items = 200;
  std::set<std::string> keys;
  for (const PasskeyItem& item : GeneratePasskeyItems(settings)) {
    EXPECT_EQ(item.key.size(), 5u);
    EXPECT_NE(item.key.front(), '0');
    keys.insert(item.key);
  }
  EXPECT_GT(keys.size(), 190u);  // 200 draws from 90,000 values rarely collide
  settings.key_digits = 3;
  settings.items = 20;
  for (const PasskeyItem& item : GeneratePasskeyItems(settings)) EXPECT_EQ(item.key.size(), 3u);
}

TEST(PasskeySetTest, DefaultSetCoversTheLengthDepthGridEvenly) {
  PasskeySettings settings;  // 200 items over 4 lengths × 11 depths
  std::vector<PasskeyItem> items = GeneratePasskeyItems(settings);
  ASSERT_EQ(items.size(), 200u);
  std::map<std::pair<int64_t, double>, int> cells;
  std::map<std::string, int> subsets;
  for (const PasskeyItem& item : items) {
    ++cells[{item.target_length, item.depth}];
    EXPECT_EQ(static_cast<int64_t>(item.prompt.size()), item.target_length);
    for (const std::string& subset : item.subsets) ++subsets[subset];
  }
  EXPECT_EQ(cells.size(), 44u);
  for (const auto& [cell, count] : cells) {
    EXPECT_GE(count, 4);
    EXPECT_LE(count, 5);
  }
  EXPECT_EQ(subsets["length=1024"], 55);
  EXPECT_EQ(subsets["length=8192"], 44);
  EXPECT_EQ(subsets["depth=0%"] + subsets["depth=100%"], 37);
  EXPECT_EQ(subsets.count("depth=50%"), 1u);
  EXPECT_EQ(items[0].id, "passkey-0");
  EXPECT_EQ(items[199].id, "passkey-199");
}

TEST(PasskeySetTest, RejectsBadSettingsNamingTheField) {
  PasskeySettings settings;
  settings.lengths = {100};
  try {
    GeneratePasskeyItems(settings);
    FAIL() << "expected InvalidSetting";
  } catch (const InvalidSetting& e) {
    EXPECT_EQ(e.field(), "lengths");
  }
  settings = PasskeySettings{};
  settings.depths = {0.5, 1.2};
  try {
    GeneratePasskeyItems(settings);
    FAIL() << "expected InvalidSetting";
  } catch (const InvalidSetting& e) {
    EXPECT_EQ(e.field(), "depths");
  }
  settings = PasskeySettings{};
  settings.items = 0;
  EXPECT_THROW(GeneratePasskeyItems(settings), InvalidSetting);
  settings = PasskeySettings{};
  settings.key_digits = 19;
  EXPECT_THROW(GeneratePasskeyItems(settings), InvalidSetting);
}

TEST(FirstIntegerTest, FindsTheFirstRunOfDigits) {
  EXPECT_EQ(FirstInteger("The pass key is 12345."), "12345");
  EXPECT_EQ(FirstInteger(" 12345. Remember it."), "12345");
  EXPECT_EQ(FirstInteger("123 45"), "123");
  EXPECT_EQ(FirstInteger("abc-42x7"), "42");
  EXPECT_EQ(FirstInteger("no digits here"), std::nullopt);
  EXPECT_EQ(FirstInteger(""), std::nullopt);
}

TEST(PasskeyCorrectTest, ComparesTheFirstIntegerWithTheKey) {
  EXPECT_TRUE(PasskeyCorrect("The pass key is 12345.", "12345"));
  EXPECT_TRUE(PasskeyCorrect(" 12345", "12345"));
  EXPECT_TRUE(PasskeyCorrect("012345", "12345"));  // the same integer
  EXPECT_FALSE(PasskeyCorrect("123 45", "12345"));
  EXPECT_FALSE(PasskeyCorrect("1234", "12345"));
  EXPECT_FALSE(PasskeyCorrect("123456", "12345"));
  EXPECT_FALSE(PasskeyCorrect("no digits", "12345"));
  EXPECT_FALSE(PasskeyCorrect("7 then 12345", "12345"));
}

}  // namespace
}  // namespace kvgate::checks
