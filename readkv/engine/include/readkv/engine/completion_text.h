// Turns generated token bytes into the text a client may see, one token at a time.
//
// Two things are held back until they resolve: the bytes of an incomplete UTF-8 character (a
// byte-level token carries one byte of it), and a tail that could be the start of a stop string.
// Released text is always valid UTF-8 (invalid bytes become U+FFFD) and never contains a stop
// string: the completion ends just before the first one, as in the OpenAI API.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace readkv::engine {

// Not thread-safe; one per sequence.
class CompletionText {
 public:
  explicit CompletionText(std::vector<std::string> stop_strings = {});

  // Appends one token's bytes; returns the text released by it (possibly empty). After a stop
  // string is found, returns the text before it once and then only empty strings.
  std::string Append(std::string_view token_bytes);
  // True once a stop string has been found.
  bool stopped() const { return stopped_; }
  // Ends the text (EOS, length, ...): releases everything held back; an incomplete trailing
  // character becomes U+FFFD. Returns "" after a stop.
  std::string Finish();
  // Everything released so far.
  const std::string& released() const { return released_text_; }

 private:
  std::string Release(size_t end);

  std::vector<std::string> stop_strings_;
  std::string pending_bytes_;  // raw bytes not yet forming complete UTF-8 characters
  std::string text_;           // valid UTF-8 assembled so far (released + held back)
  size_t released_ = 0;        // bytes of text_ released
  std::string released_text_;
  bool stopped_ = false;
};

// Moves the longest prefix of `bytes` that is complete UTF-8 (invalid bytes replaced by U+FFFD)
// into `out`; leaves in `bytes` only a trailing incomplete (but so far valid) character.
void TakeCompleteUtf8(std::string& bytes, std::string& out);

}  // namespace readkv::engine
