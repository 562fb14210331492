// The built-in model answers only prompts in the forms it was trained on (recall_data.h), and
// the suite's checks (checks/) generate their own held-out prompts independently. Both read their
// fixed text from one header (kvgate/checks/recall_format.h); these tests pin the two builders to
// the same formats, so that a change on one side cannot silently turn the quality
// gates into a test of prompts the model has never seen.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "kvgate/checks/passkey.h"
#include "kvgate/checks/qa_set.h"
#include "readkv/model/recall_data.h"

namespace readkv::model {
namespace {

TEST(SuiteFormatTest, PasskeyPromptsAreByteIdenticalToTheChecks) {
  for (const int length : {256, 1024, 3001, 8192}) {
    for (const double depth : {0.0, 0.1, 0.25, 0.5, 0.77, 1.0}) {
      for (const char* key : {"7", "48213", "99999"}) {
        EXPECT_EQ(PasskeyPrompt(key, length, depth),
                  kvgate::checks::BuildPasskeyItem(length, depth, key).prompt)
            << "length " << length << " depth " << depth << " key " << key;
      }
    }
  }
}

TEST(SuiteFormatTest, ChecksQaPromptsUseTheTrainedQuestionAndFactForms) {
  // Every question must be one of the five relations of recall_data.h, and the context must hold
  // the fact sentence of that relation with the gold answer.
  kvgate::checks::QaSetSettings settings;
  settings.items = 60;
  settings.lengths = {512, 1024};
  settings.seed = 11;
  int matched = 0;
  for (const auto& item : kvgate::checks::GenerateQaSet(settings)) {
    const std::string prompt = kvgate::checks::QaPrompt(item);
    std::smatch m;
    std::string fact;
    static const std::regex kLives("Where does (\\w+) live\\?");
    static const std::regex kColor("What is (\\w+)'s favorite color\\?");
    static const std::regex kJob("What is the job of (\\w+)\\?");
    static const std::regex kYear("In which year was (\\w+) born\\?");
    static const std::regex kKey("What is the pass key of (\\w+)\\?");
    const std::string& answer = item.answers.at(0);
    if (std::regex_match(item.question, m, kLives)) {
      fact = m[1].str() + " lives in " + answer + ".";
    } else if (std::regex_match(item.question, m, kColor)) {
      fact = m[1].str() + "'s favorite color is " + answer + ".";
    } else if (std::regex_match(item.question, m, kJob)) {
      fact = "The job of " + m[1].str() + " is " + answer + ".";
    } else if (std::regex_match(item.question, m, kYear)) {
      fact = m[1].str() + " was born in " + answer + ".";
    } else if (std::regex_match(item.question, m, kKey)) {
      fact = "The pass key of " + m[1].str() + " is " + answer + ".";
    } else {
      ADD_FAILURE() << item.id << ": a question the model was not trained on: " << item.question;
      continue;
    }
    EXPECT_NE(item.context.find(fact), std::string::npos) << item.id << ": no fact '" << fact
                                                          << "'";
    EXPECT_TRUE(prompt.ends_with("\n\nQuestion: " + item.question + "\nAnswer:")) << item.id;
    ++matched;
  }
  EXPECT_EQ(matched, 60);
}

}  // namespace
}  // namespace readkv::model
