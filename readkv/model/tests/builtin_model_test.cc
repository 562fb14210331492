// The committed built-in model (models/) does the tasks it was trained for, through the runtime.
#include <gtest/gtest.h>

#include <filesystem>

#include "readkv/model/evaluation.h"
#include "readkv/model/recall_data.h"
#include "readkv/model/runtime.h"

namespace readkv::model {
namespace {

bool HaveBuiltinModel() {
  return std::filesystem::exists(DefaultModelDirectory() + "/model.safetensors");
}

TEST(BuiltinModelTest, GreedilyCompletesShortPasskeyPrompts) {
  if (!HaveBuiltinModel()) GTEST_SKIP() << "no weights in " << DefaultModelDirectory();
  LlamaDecodeModel model(DefaultModelDirectory(), {});
  ByteTokenizer tok;
  const std::vector<std::string> keys = {"68351", "4172", "90210"};
  const std::vector<std::string> prompts = {PasskeyPrompt(keys[0], 700, 0.3),
                                            PasskeyPrompt(keys[1], 1100, 0.9),
                                            PasskeyPrompt(keys[2], 500, 0.0)};
  const auto out = GreedyCompleteBatch(model, tok, prompts, 8, {}, {});
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(FirstInteger(out[i].text).value_or("none"), keys[i]) << out[i].text;
  }
}

TEST(BuiltinModelTest, AnswersAShortQuestionFromItsContext) {
  if (!HaveBuiltinModel()) GTEST_SKIP() << "no weights in " << DefaultModelDirectory();
  LlamaDecodeModel model(DefaultModelDirectory(), {});
  ByteTokenizer tok;
  const std::vector<int> lengths = {600};
  const std::vector<double> depths = {0.2, 0.7};
  const auto items = MakeQaSet(77, lengths, depths, 1);
  std::vector<std::string> prompts;
  for (const auto& item : items) prompts.push_back(item.prompt);
  const auto out = GreedyCompleteBatch(model, tok, prompts, 16, {"\n"}, {});
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_DOUBLE_EQ(MaxTokenF1(out[i].text, items[i].answers), 1.0)
        << "answer " << items[i].answers[0] << " got " << out[i].text;
  }
}

TEST(BuiltinModelTest, ReadKvCacheStillFindsAPasskeyBeyondOneBlock) {
  if (!HaveBuiltinModel() ||
      !std::filesystem::exists(DefaultModelDirectory() + "/calibration.json")) {
    GTEST_SKIP() << "no weights or calibration in " << DefaultModelDirectory();
  }
  RuntimeOptions o;
  o.kv.kind = codec::KvBackend::kReadKv;
  o.kv.read_bits = 4;
  o.kv.reader = codec::ReaderKind::kConstrained;
  LlamaDecodeModel model(DefaultModelDirectory(), o);
  ByteTokenizer tok;
  const auto out =
      GreedyCompleteBatch(model, tok, {PasskeyPrompt("31337", 1200, 0.25)}, 8, {}, {});
  EXPECT_EQ(FirstInteger(out[0].text).value_or("none"), "31337") << out[0].text;
  EXPECT_GT(model.ledgers().logical_read_bytes, 0);
  EXPECT_GT(model.ledgers().attention_seconds, 0.0);  // the decode steps' attention, wall time
}

}  // namespace
}  // namespace readkv::model
