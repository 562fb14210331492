#include "readkv/engine/completion_text.h"

#include <algorithm>
#include <utility>

namespace readkv::engine {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of the UTF-8 character a lead byte starts, or 0 if it cannot start one.
size_t SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `c` may follow `lead` at position `index` (1-based) of its sequence (RFC 3629 table:
// no overlong forms, no surrogates, nothing above U+10FFFF).
bool ValidContinuation(unsigned char lead, size_t index, unsigned char c) {
  if (index == 1) {
    if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
    if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
    if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
    if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
  }
  return c >= 0x80 && c <= 0xBF;
}

}  // namespace

void TakeCompleteUtf8(std::string& bytes, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    const size_t length = SequenceLength(lead);
    if (length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t j = 1;
    while (j < length && i + j < bytes.size() &&
           ValidContinuation(lead, j, static_cast<unsigned char>(bytes[i + j]))) {
      ++j;
    }
    if (j == length) {
      out.append(bytes, i, length);
      i += length;
    } else if (i + j == bytes.size()) {
      break;  // a valid start that the next token may complete
    } else {
      out += kReplacement;  // broken sequence: replace its lead, resync on the next byte
      i += j;
    }
  }
  bytes.erase(0, i);
}

CompletionText::CompletionText(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
}

std::string CompletionText::Release(size_t end) {
  std::string out = text_.substr(released_, end - released_);
  released_ = end;
  released_text_ += out;
  return out;
}

std::string CompletionText::Append(std::string_view token_bytes) {
  if (stopped_) return {};
  pending_bytes_.append(token_bytes);
  TakeCompleteUtf8(pending_bytes_, text_);

  // Earliest stop occurrence at or after the released point. Nothing before it can start one:
  // any unfinished match is a suffix and was held back below.
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stop_strings_) {
    const size_t pos = text_.find(stop, released_);
    if (pos < stop_at) stop_at = pos;
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    return Release(stop_at);
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t max_len = std::min(stop.size() - 1, text_.size() - released_);
    for (size_t len = max_len; len > hold; --len) {
      if (text_.compare(text_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return Release(text_.size() - hold);
}

std::string CompletionText::Finish() {
  if (stopped_) return {};
  if (!pending_bytes_.empty()) {
    // What is left is a valid but unfinished character: it will never be completed.
    pending_bytes_.clear();
    text_ += kReplacement;
  }
  return Release(text_.size());
}

}  // namespace readkv::engine
