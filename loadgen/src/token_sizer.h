// Internal: token-true prompt lengths through the server's vLLM-style POST /tokenize.
//
// Count(text) asks the server how many tokens the request would carry: {"model", "prompt": text}
// for completions, {"model", "messages": [{"role": "user", "content": text}]} for chat (so a chat
// template's tokens count too); `count` includes BOS, i.e. it is what usage.prompt_tokens will
// say. Fit(text, target, seed) lengthens the text with more synthetic words until it holds at
// least `target` tokens, then cuts it at the character where the count reaches `target`
// (interpolation and bisection over the prefix length, ~log2(characters) calls at worst). A
// tokenizer whose count jumps past the target at every cut leaves that prompt one token over:
// Fit says whether the count is exact.
//
// Runs before the schedule starts (never inside the event loop). Thread-safety: one thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kvgate/http/blocking_client.h"
#include "kvgate/loadgen/run_load.h"

namespace kvgate::loadgen::internal {

class TokenSizer {
 public:
  TokenSizer(const http::Url& url, const Target& target, std::string model);

  // Whether the server answers POST /tokenize with a count (asked once, on the first call).
  bool Available();
  // The token count of `text` sent as a prompt; throws TargetError when /tokenize fails.
  int64_t Count(const std::string& text);
  // The token count of `text` alone: no chat template, no BOS ({"prompt": text,
  // "add_special_tokens": false}), e.g. the length of a reply; throws TargetError.
  int64_t CountText(const std::string& text);

  struct Fitted {
    std::string text;
    int64_t tokens = 0;
    bool exact = false;
  };
  Fitted Fit(std::string text, int64_t target, uint64_t seed);

  int64_t calls() const { return calls_; }

 private:
  std::optional<int64_t> TryCount(const std::string& text, bool bare, std::string* error);

  const http::Url& url_;
  const Target& target_;
  std::string model_;
  http::TlsContext tls_;
  http::BlockingConnection connection_;
  std::optional<bool> available_;
  int64_t calls_ = 0;
};

}  // namespace kvgate::loadgen::internal
