#include "kvgate/checks/qa_set.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "kvgate/checks/errors.h"
#include "kvgate/filesystem/remove_tree.h"

namespace kvgate::checks {
namespace {

constexpr std::string_view kTask =
    "Read the text and remember the facts in it. Answer the question at the end.";

TEST(QaSetTest, IsDeterministicPerSeedAndDiffersAcrossSeeds) {
  QaSetSettings settings;
  settings.items = 12;
  std::vector<QaItem> a = GenerateQaSet(settings);
  std::vector<QaItem> b = GenerateQaSet(settings);
  ASSERT_EQ(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(QaPrompt(a[i]), QaPrompt(b[i]));
    EXPECT_EQ(a[i].answers, b[i].answers);
  }
  settings.seed = 99;
  std::vector<QaItem> c = GenerateQaSet(settings);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += QaPrompt(a[i]) == QaPrompt(c[i]);
  EXPECT_EQ(same, 0);
}

TEST(QaSetTest, PromptUsesTheSharedTrainingFormat) {
  QaSetSettings settings;
  settings.items = 30;
  const std::regex question(
      "Where does [A-Za-z]+ live\\?|What is [A-Za-z]+'s favorite color\\?|"
      "What is the job of [A-Za-z]+\\?|In which year was [A-Za-z]+ born\\?|"
      "What is the pass key of [A-Za-z]+\\?");
  for (const QaItem& item : GenerateQaSet(settings)) {
    std::string prompt = QaPrompt(item);
    EXPECT_EQ(prompt.rfind(std::string(kTask) + "\n", 0), 0u) << prompt;
    const std::string tail = "\n\nQuestion: " + item.question + "\nAnswer:";
    ASSERT_GE(prompt.size(), tail.size());
    EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail);
    EXPECT_TRUE(std::regex_match(item.question, question)) << item.question;
    ASSERT_EQ(item.answers.size(), 1u);
    EXPECT_NE(item.context.find(" " + item.answers[0] + "."), std::string::npos);
  }
}

TEST(QaSetTest, TheAskedFactIsStatedInTheContextWithItsAnswer) {
  QaSetSettings settings;
  settings.items = 40;
  std::smatch match;
  for (const QaItem& item : GenerateQaSet(settings)) {
    const std::string& a = item.answers[0];
    std::string statement;
    if (std::regex_match(item.question, match, std::regex("Where does (\\w+) live\\?"))) {
      statement = match[1].str() + " lives in " + a + ".";
    } else if (std::regex_match(item.question, match,
                                std::regex("What is (\\w+)'s favorite color\\?"))) {
      statement = match[1].str() + "'s favorite color is " + a + ".";
    } else if (std::regex_match(item.question, match, std::regex("What is the job of (\\w+)\\?"))) {
      statement = "The job of " + match[1].str() + " is " + a + ".";
    } else if (std::regex_match(item.question, match,
                                std::regex("In which year was (\\w+) born\\?"))) {
      statement = match[1].str() + " was born in " + a + ".";
    } else {
      ASSERT_TRUE(
          std::regex_match(item.question, match, std::regex("What is the pass key of (\\w+)\\?")));
      statement = "The pass key of " + match[1].str() + " is " + a + ".";
    }
    EXPECT_NE(item.context.find(statement), std::string::npos) << statement;
  }
}

TEST(QaSetTest, PromptLengthIsWithinOneFillerSentenceOfTheTarget) {
  QaSetSettings settings;
  settings.items = 36;
  settings.lengths = {1024, 2048, 4096};
  for (const QaItem& item : GenerateQaSet(settings)) {
    const int64_t target = std::stoll(item.subsets[0].substr(std::string("length=").size()));
    const int64_t size = static_cast<int64_t>(QaPrompt(item).size());
    // Filler is whole sentences; the longest is the 89-byte landmark filler plus its space.
    EXPECT_LE(size, target) << item.id;
    EXPECT_GE(size, target - 90) << item.id;
  }
}

TEST(QaSetTest, KeySubsetsSplitItemsByLengthAndDepthBucket) {
  QaSetSettings settings;  // 120 items over 3 lengths × 3 depth buckets, length-major
  std::vector<QaItem> items = GenerateQaSet(settings);
  ASSERT_EQ(items.size(), 120u);
  std::map<std::string, int> counts;
  for (const QaItem& item : items) {
    ASSERT_EQ(item.subsets.size(), 2u);
    EXPECT_EQ(item.subsets[0].rfind("length=", 0), 0u);
    EXPECT_EQ(item.subsets[1].rfind("depth=", 0), 0u);
    for (const std::string& subset : item.subsets) ++counts[subset];
  }
  // 120 = 13 × 9 + 3: the three extra items fill the first length's three depth cells.
  EXPECT_EQ(counts["length=1024"], 42);
  EXPECT_EQ(counts["length=2048"], 39);
  EXPECT_EQ(counts["length=4096"], 39);
  EXPECT_EQ(counts["depth=0-33%"], 40);
  EXPECT_EQ(counts["depth=33-67%"], 40);
  EXPECT_EQ(counts["depth=67-100%"], 40);
  EXPECT_EQ(counts.size(), 6u);
}

TEST(QaSetTest, AnswerSitsInItsDepthBucket) {
  QaSetSettings settings;
  settings.items = 60;
  settings.lengths = {4096};
  settings.depth_buckets = 4;
  settings.min_facts = settings.max_facts = 1;  // no other fact shifts the asked one
  for (const QaItem& item : GenerateQaSet(settings)) {
    const std::string& label = item.subsets[1];  // depth=LO-HI%
    const double lo = std::stod(label.substr(6)) / 100.0;
    const double hi = std::stod(label.substr(label.find('-') + 1)) / 100.0;
    const size_t filler_start = kTask.size() + 1;
    // The name is the question's capitalised word after the first; filler never holds names.
    std::smatch name;
    std::string rest = item.question.substr(1);
    ASSERT_TRUE(std::regex_search(rest, name, std::regex("[A-Z][a-z]+")));
    const size_t at = item.context.find(name.str());
    ASSERT_NE(at, std::string::npos);
    const double depth = static_cast<double>(at - filler_start) /
                         static_cast<double>(item.context.size() - filler_start);
    // Slots are whole sentences (≤ 90 of ~4000 bytes) and the fact itself takes some room.
    EXPECT_GE(depth, lo - 0.04) << item.id << " " << label;
    EXPECT_LE(depth, hi + 0.04) << item.id << " " << label;
  }
}

TEST(QaSetTest, RejectsBadSettingsNamingTheField) {
  QaSetSettings settings;
  settings.lengths = {100};
  try {
    GenerateQaSet(settings);
    FAIL() << "expected InvalidSetting";
  } catch (const InvalidSetting& e) {
    EXPECT_EQ(e.field(), "lengths");
  }
  settings = QaSetSettings{};
  settings.max_facts = 9;
  EXPECT_THROW(GenerateQaSet(settings), InvalidSetting);
  settings = QaSetSettings{};
  settings.depth_buckets = 0;
  EXPECT_THROW(GenerateQaSet(settings), InvalidSetting);
}

TEST(QaPredictionTest, TakesTheFirstLineTrimmed) {
  EXPECT_EQ(QaPrediction(" Paris\nQuestion: Where does Bob live?"), "Paris");
  EXPECT_EQ(QaPrediction("  Paris, France  "), "Paris, France");
  EXPECT_EQ(QaPrediction("\nParis"), "");
  EXPECT_EQ(QaPrediction(""), "");
}

TEST(QaJsonlTest, LoadsItemsWithOptionalSubsets) {
  std::istringstream input(
      "{\"id\": \"a\", \"context\": \"Bob lives in Oslo.\", \"question\": \"Where does Bob "
      "live?\", \"answers\": [\"Oslo\", \"Oslo, Norway\"], \"subset\": \"short\"}\n"
      "\n"
      "{\"id\": 7, \"context\": \"\", \"question\": \"Q?\", \"answers\": [\"x\"], "
      "\"subset\": [\"s1\", \"s2\"]}\r\n"
      "{\"id\": \"c\", \"context\": \"ctx\", \"question\": \"Q?\", \"answers\": [\"y\"]}\n");
  std::vector<QaItem> items = ParseQaJsonl(input, "data.jsonl");
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].id, "a");
  EXPECT_EQ(items[0].answers, (std::vector<std::string>{"Oslo", "Oslo, Norway"}));
  EXPECT_EQ(items[0].subsets, std::vector<std::string>{"short"});
  EXPECT_EQ(items[1].id, "7");
  EXPECT_EQ(items[1].subsets, (std::vector<std::string>{"s1", "s2"}));
  EXPECT_TRUE(items[2].subsets.empty());
  EXPECT_EQ(QaPrompt(items[0]), "Bob lives in Oslo.\n\nQuestion: Where does Bob live?\nAnswer:");
}

// The message of the DatasetError that `text` raises ("" when none).
std::string ErrorOf(const std::string& text) {
  std::istringstream input(text);
  try {
    ParseQaJsonl(input, "d.jsonl");
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "";
}

TEST(QaJsonlTest, BadLinesAreReportedWithTheirLineNumberAndField) {
  const std::string good = R"({"id": "g", "context": "c", "question": "q", "answers": ["a1"]})";
  EXPECT_EQ(ErrorOf(good + "\n\n{not json}\n").rfind("d.jsonl:3: not valid JSON", 0), 0u);
  EXPECT_EQ(ErrorOf(good + "\n[1, 2]\n"), "d.jsonl:2: expected a JSON object, got array");
  EXPECT_EQ(ErrorOf(R"({"id": "x", "context": "c", "question": "q"})"),
            "d.jsonl:1: answers: missing");
  EXPECT_EQ(ErrorOf(R"({"id": "x", "context": "c", "question": "q", "answers": []})"),
            "d.jsonl:1: answers: expected a non-empty array of strings");
  EXPECT_EQ(ErrorOf(R"({"id": "x", "context": "c", "question": "q", "answers": ["x", 3]})"),
            "d.jsonl:1: answers[1]: expected a string, got number");
  EXPECT_EQ(ErrorOf(R"({"id": "x", "context": "c", "question": "q", "answers": ["The"]})"),
            "d.jsonl:1: answers[0]: 'The' is empty after SQuAD normalisation");
  EXPECT_EQ(ErrorOf(R"({"id": "x", "context": 5, "question": "q", "answers": ["a"]})"),
            "d.jsonl:1: context: expected a string, got number");
  EXPECT_EQ(ErrorOf(R"({"id": 1.5, "context": "c", "question": "q", "answers": ["a"]})"),
            "d.jsonl:1: id: expected a string or an integer, got number");
  EXPECT_EQ(ErrorOf(R"({"context": "c", "question": "q", "answers": ["a"]})"),
            "d.jsonl:1: id: missing");
  EXPECT_EQ(
      ErrorOf(R"({"id": "x", "context": "c", "question": "q", "answers": ["a"], "answer": 1})"),
      "d.jsonl:1: answer: unknown field (expected id, context, question, answers, subset)");
  EXPECT_EQ(
      ErrorOf(R"({"id": "x", "context": "c", "question": "q", "answers": ["x"], "subset": 3})"),
      "d.jsonl:1: subset: expected a string or an array of strings, got number");
  EXPECT_EQ(ErrorOf(good + "\n" + good + "\n"),
            "d.jsonl:2: id: 'g' appears on an earlier line too");
  EXPECT_EQ(ErrorOf("\n  \n"), "d.jsonl:0: no items (the file is empty)");
  EXPECT_EQ(ErrorOf(good + "\n"), "");
}

TEST(QaJsonlTest, LoadsFromAFileAndNamesAMissingOne) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvgate_qa_jsonl_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "set.jsonl";
  {
    std::ofstream out(file);
    out << R"({"id": "1", "context": "c", "question": "q", "answers": ["x"]})"
        << "\n";
    out << R"({"id": "2", "context": "c", "question": "q", "answers": "x"})"
        << "\n";
  }
  try {
    LoadQaJsonl(file);
    FAIL() << "expected DatasetError";
  } catch (const DatasetError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find(file.string() + ":2: answers"), std::string::npos);
  }
  EXPECT_THROW(LoadQaJsonl(dir / "missing.jsonl"), DatasetError);
  RemoveTree(dir);
}

}  // namespace
}  // namespace kvgate::checks
