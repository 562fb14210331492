// Text <-> token ids for the completions API, kept apart from the model runtime so that the
// engine and the server never need the runtime's headers (which carry torch).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace readkv::engine {

// Immutable after construction; every method is safe to call from any thread.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids the model is fed for `text` used as a prompt, including the BOS the model expects.
  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;
  // The bytes one generated token stands for; empty for special tokens (BOS, EOS). A token may
  // carry only part of a UTF-8 character; callers assemble bytes before treating them as text.
  virtual std::string TokenBytes(int32_t token) const = 0;
};

// Presents a tokenizer with the model runtime's shape -- Encode(text, add_bos), Decode(ids),
// IsSpecial(id), e.g. readkv::model::Tokenizer -- through this seam, without this header
// depending on the runtime. Owns the wrapped tokenizer.
template <typename RuntimeTokenizer>
class TokenizerAdapter final : public Tokenizer {
 public:
  explicit TokenizerAdapter(std::unique_ptr<RuntimeTokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)) {}

  std::vector<int32_t> Encode(std::string_view text) const override {
    return tokenizer_->Encode(text, /*add_bos=*/true);
  }
  std::string TokenBytes(int32_t token) const override {
    if (tokenizer_->IsSpecial(token)) return {};
    return tokenizer_->Decode(std::span<const int32_t>(&token, 1));
  }

 private:
  std::unique_ptr<RuntimeTokenizer> tokenizer_;
};

// The built-in model's tokenizer: ids 0..255 are the bytes themselves, then BOS and EOS
// (vocabulary 258 by default). Encode prepends BOS. The same ids as readkv::model::ByteTokenizer;
// kept here so that engine and server tests need no runtime.
class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer(int32_t bos_token = 256, int32_t eos_token = 257);

  std::vector<int32_t> Encode(std::string_view text) const override;
  std::string TokenBytes(int32_t token) const override;

 private:
  int32_t bos_token_;
  int32_t eos_token_;
};

}  // namespace readkv::engine
