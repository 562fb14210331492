// Tokenizers: text <-> token ids. An interface, so a real model's tokenizer can be added later;
// the built-in model uses the byte-level one. Implementations are immutable and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace readkv::model {

struct ModelConfig;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int vocab_size() const = 0;
  virtual int32_t bos_token() const = 0;
  virtual int32_t eos_token() const = 0;
  // Text to ids; with `add_bos` the BOS id comes first.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos) const = 0;
  // Ids to text; special ids (BOS, EOS) produce no text. Throws std::invalid_argument("tokens")
  // for an id outside [0, vocab_size).
  virtual std::string Decode(std::span<const int32_t> tokens) const = 0;
  virtual bool IsSpecial(int32_t token) const = 0;
};

// Bytes 0..255 are themselves; 256 = BOS, 257 = EOS; vocabulary 258. Any byte string (UTF-8 or
// not) round-trips exactly.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int kVocabSize = 258;

  int vocab_size() const override { return kVocabSize; }
  int32_t bos_token() const override { return kBos; }
  int32_t eos_token() const override { return kEos; }
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  std::string Decode(std::span<const int32_t> tokens) const override;
  bool IsSpecial(int32_t token) const override { return token == kBos || token == kEos; }
};

// The tokenizer a config names ("kvgate_tokenizer"); throws ModelFormatError("kvgate_tokenizer")
// for an unknown one, or when the config's vocabulary/BOS/EOS disagree with it.
std::unique_ptr<Tokenizer> MakeTokenizer(const ModelConfig& config);

}  // namespace readkv::model
