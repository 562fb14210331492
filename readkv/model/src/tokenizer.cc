#include "readkv/model/tokenizer.h"

#include <stdexcept>

#include "readkv/model/config.h"
#include "readkv/model/errors.h"

namespace readkv::model {

std::vector<int32_t> ByteTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + (add_bos ? 1 : 0));
  if (add_bos) ids.push_back(kBos);
  for (char c : text) ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
  return ids;
}

std::string ByteTokenizer::Decode(std::span<const int32_t> tokens) const {
  std::string text;
  text.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t < 0 || t >= kVocabSize) {
      throw std::invalid_argument("tokens: id " + std::to_string(t) + " outside [0, 258)");
    }
    if (t < 256) text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
  }
  return text;
}

std::unique_ptr<Tokenizer> MakeTokenizer(const ModelConfig& config) {
  if (config.tokenizer != "byte") {
    throw ModelFormatError("kvgate_tokenizer", "unknown tokenizer \"" + config.tokenizer + "\"");
  }
  if (config.vocab_size != ByteTokenizer::kVocabSize ||
      config.bos_token_id != ByteTokenizer::kBos || config.eos_token_id != ByteTokenizer::kEos) {
    throw ModelFormatError("kvgate_tokenizer",
                           "the byte tokenizer needs vocab_size 258, bos 256 and eos 257");
  }
  return std::make_unique<ByteTokenizer>();
}

}  // namespace readkv::model
