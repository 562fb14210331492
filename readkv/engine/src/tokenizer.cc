#include "readkv/engine/tokenizer.h"

#include <stdexcept>

namespace readkv::engine {

ByteTokenizer::ByteTokenizer(int32_t bos_token, int32_t eos_token)
    : bos_token_(bos_token), eos_token_(eos_token) {
  // Specials must not shadow a byte, or decoding would be ambiguous.
  if (bos_token_ < 256) throw std::invalid_argument("bos_token must be >= 256");
  if (eos_token_ < 256) throw std::invalid_argument("eos_token must be >= 256");
}

std::vector<int32_t> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  ids.push_back(bos_token_);
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::TokenBytes(int32_t token) const {
  if (token >= 0 && token < 256) return std::string(1, static_cast<char>(token));
  return {};
}

}  // namespace readkv::engine
