#include "readkv/model/tokenizer.h"

#include <gtest/gtest.h>

#include "readkv/model/config.h"
#include "readkv/model/errors.h"

namespace readkv::model {
namespace {

TEST(ByteTokenizerTest, EveryByteStringRoundTrips) {
  ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "The pass key is 12345. \xE2\x9C\x93 \xff\xfe";
  const auto ids = tok.Encode(all, /*add_bos=*/false);
  ASSERT_EQ(ids.size(), all.size());
  for (int32_t id : ids) EXPECT_LT(id, 256);
  EXPECT_EQ(tok.Decode(ids), all);
}

TEST(ByteTokenizerTest, BosComesFirstAndSpecialIdsDecodeToNothing) {
  ByteTokenizer tok;
  const auto ids = tok.Encode("ab", /*add_bos=*/true);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'a', 'b'}));
  std::vector<int32_t> with_eos = ids;
  with_eos.push_back(tok.eos_token());
  EXPECT_EQ(tok.Decode(with_eos), "ab");
  EXPECT_TRUE(tok.IsSpecial(256));
  EXPECT_TRUE(tok.IsSpecial(257));
  EXPECT_FALSE(tok.IsSpecial(255));
  EXPECT_EQ(tok.vocab_size(), 258);
}

TEST(ByteTokenizerTest, IdsOutsideTheVocabularyAreRefused) {
  ByteTokenizer tok;
  const std::vector<int32_t> bad = {'a', 258};
  EXPECT_THROW(tok.Decode(bad), std::invalid_argument);
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(tok.Decode(negative), std::invalid_argument);
}

TEST(ByteTokenizerTest, ConfigChoosesTheTokenizerAndChecksItsIds) {
  ModelConfig c;
  EXPECT_EQ(MakeTokenizer(c)->vocab_size(), 258);
  c.tokenizer = "sentencepiece";
  try {
    MakeTokenizer(c);
    FAIL() << "no error";
  } catch (const ModelFormatError& e) {
    EXPECT_EQ(e.what_failed(), "kvgate_tokenizer");
  }
  c.tokenizer = "byte";
  c.eos_token_id = 2;
  EXPECT_THROW(MakeTokenizer(c), ModelFormatError);
}

}  // namespace
}  // namespace readkv::model
