#include "kvgate/loadgen/sse.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

namespace kvgate::loadgen {
namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

std::string Excerpt(std::string_view text) {
  constexpr size_t kMax = 120;
  if (text.size() <= kMax) return std::string(text);
  return std::string(text.substr(0, kMax)) + "...";
}

// First CR or LF in [p, end), or end. memchr twice beats a byte loop on long data lines.
const char* FindLineBreak(const char* p, const char* end) {
  const void* lf = std::memchr(p, '\n', static_cast<size_t>(end - p));
  const char* limit = lf ? static_cast<const char*>(lf) : end;
  const void* cr = std::memchr(p, '\r', static_cast<size_t>(limit - p));
  return cr ? static_cast<const char*>(cr) : limit;
}

// Reads the fields of an OpenAI completions chunk in one SAX pass (nlohmann's parser, no DOM):
// the stream's hot path runs once per token, and building a JSON tree per token cost most of
// the client's CPU. Everything else in the chunk is validated as JSON and skipped.
class ChunkScanner {
 public:
  struct Text {
    enum State { kAbsent, kNull, kString, kBad } state = kAbsent;
    size_t size = 0;
    std::string value;  // only when keeping text
  };

  explicit ChunkScanner(bool keep_text) : keep_text_(keep_text) {}

  bool root_is_object = false;
  bool has_error = false;
  std::string error_message;
  bool has_choices = false;
  bool choices_is_array = false;
  bool first_choice_seen = false;
  bool first_choice_is_object = false;
  Text text;               // choices[0].text
  Text content;            // choices[0].delta.content
  bool has_usage = false;  // present and not null
  bool usage_is_object = false;
  int prompt_tokens = -1;
  int completion_tokens = -1;

  // nlohmann SAX interface.
  bool null() { return Value(Kind::kNull); }
  bool boolean(bool) { return Value(Kind::kOther); }
  bool number_integer(int64_t v) { return Value(Kind::kInteger, v); }
  bool number_unsigned(uint64_t v) {
    return Value(Kind::kInteger, static_cast<int64_t>(std::min<uint64_t>(v, INT32_MAX)));
  }
  bool number_float(double, const std::string&) { return Value(Kind::kOther); }
  bool string(std::string& v) { return Value(Kind::kString, 0, &v); }
  bool binary(nlohmann::json::binary_t&) { return Value(Kind::kOther); }
  bool start_object(size_t) {
    Slot slot = NextSlot();
    Value(Kind::kObject, 0, nullptr, slot);
    frames_.push_back({slot, /*object=*/true, Slot::kNone, 0});
    return true;
  }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    f.key_slot = KeySlot(f.slot, k);
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    Slot slot = NextSlot();
    Value(Kind::kArray, 0, nullptr, slot);
    frames_.push_back({slot, /*object=*/false, Slot::kNone, 0});
    return true;
  }
  bool end_array() {
    frames_.pop_back();
    return true;
  }
  template <class Exception>
  bool parse_error(size_t, const std::string&, const Exception&) {
    return false;
  }

 private:
  enum class Kind { kObject, kArray, kString, kNull, kInteger, kOther };
  enum class Slot {
    kNone,
    kRoot,
    kError,
    kErrorMessage,
    kChoices,
    kChoice0,
    kText,
    kDelta,
    kContent,
    kUsage,
    kPromptTokens,
    kCompletionTokens,
  };
  struct Frame {
    Slot slot;  // what this container is
    bool object;
    Slot key_slot;  // objects: what the value after the current key is
    int64_t index;  // arrays: index of the next element
  };

  static Slot KeySlot(Slot parent, std::string_view k) {
    switch (parent) {
      case Slot::kRoot:
        if (k == "choices") return Slot::kChoices;
        if (k == "usage") return Slot::kUsage;
        if (k == "error") return Slot::kError;
        return Slot::kNone;
      case Slot::kError:
        return k == "message" ? Slot::kErrorMessage : Slot::kNone;
      case Slot::kChoice0:
        if (k == "text") return Slot::kText;
        if (k == "delta") return Slot::kDelta;
        return Slot::kNone;
      case Slot::kDelta:
        return k == "content" ? Slot::kContent : Slot::kNone;
      case Slot::kUsage:
        if (k == "prompt_tokens") return Slot::kPromptTokens;
        if (k == "completion_tokens") return Slot::kCompletionTokens;
        return Slot::kNone;
      default:
        return Slot::kNone;
    }
  }

  // The slot of the value that starts now (advances an enclosing array's index).
  Slot NextSlot() {
    if (frames_.empty()) return Slot::kRoot;
    Frame& f = frames_.back();
    if (f.object) return f.key_slot;
    int64_t index = f.index++;
    return f.slot == Slot::kChoices && index == 0 ? Slot::kChoice0 : Slot::kNone;
  }

  bool Value(Kind kind, int64_t integer = 0, std::string* str = nullptr) {
    return Value(kind, integer, str, NextSlot());
  }

  bool Value(Kind kind, int64_t integer, std::string* str, Slot slot) {
    switch (slot) {
      case Slot::kRoot:
        root_is_object = kind == Kind::kObject;
        break;
      case Slot::kError:
        if (kind != Kind::kNull) has_error = true;
        if (kind == Kind::kString) error_message = *str;
        break;
      case Slot::kErrorMessage:
        if (kind == Kind::kString) error_message = *str;
        break;
      case Slot::kChoices:
        has_choices = true;
        choices_is_array = kind == Kind::kArray;
        break;
      case Slot::kChoice0:
        first_choice_seen = true;
        first_choice_is_object = kind == Kind::kObject;
        break;
      case Slot::kText:
        SetText(text, kind, str);
        break;
      case Slot::kContent:
        SetText(content, kind, str);
        break;
      case Slot::kUsage:
        if (kind != Kind::kNull) {
          has_usage = true;
          usage_is_object = kind == Kind::kObject;
        }
        break;
      case Slot::kPromptTokens:
        if (kind == Kind::kInteger) prompt_tokens = static_cast<int>(integer);
        break;
      case Slot::kCompletionTokens:
        if (kind == Kind::kInteger) completion_tokens = static_cast<int>(integer);
        break;
      default:
        break;
    }
    return true;
  }

  void SetText(Text& t, Kind kind, const std::string* str) {
    if (kind == Kind::kNull) {
      t.state = Text::kNull;
    } else if (kind == Kind::kString) {
      t.state = Text::kString;
      t.size = str->size();
      if (keep_text_) t.value = *str;
    } else {
      t.state = Text::kBad;
    }
  }

  bool keep_text_;
  std::vector<Frame> frames_;
};

}  // namespace

SseParser::SseParser(Handler handler, size_t max_event_bytes)
    : handler_(std::move(handler)), max_event_bytes_(max_event_bytes) {}

bool SseParser::Feed(std::string_view bytes) {
  if (overflowed_) return false;
  const char* p = bytes.data();
  const char* end = p + bytes.size();
  if (after_cr_ && p != end) {
    // CRLF split across two reads: the LF ends the line the CR already ended.
    if (*p == '\n') ++p;
    after_cr_ = false;
  }
  while (p != end) {
    const char* brk = FindLineBreak(p, end);
    if (brk == end) {
      line_.append(p, end);
      if (at_start_ && line_.size() >= kBom.size()) {
        if (std::string_view(line_).substr(0, kBom.size()) == kBom) line_.erase(0, kBom.size());
        at_start_ = false;
      }
      if (line_.size() > max_event_bytes_) {
        overflowed_ = true;
        return false;
      }
      break;
    }
    std::string_view line;
    if (line_.empty()) {
      line = std::string_view(p, static_cast<size_t>(brk - p));
    } else {
      line_.append(p, brk);
      line = line_;
    }
    if (at_start_) {
      if (line.substr(0, kBom.size()) == kBom) line.remove_prefix(kBom.size());
      at_start_ = false;
    }
    ProcessLine(line);
    line_.clear();
    if (overflowed_) return false;
    p = brk + 1;
    if (*brk == '\r') {
      if (p == end) {
        after_cr_ = true;
      } else if (*p == '\n') {
        ++p;
      }
    }
  }
  return true;
}

void SseParser::ProcessLine(std::string_view line) {
  if (line.empty()) {
    Dispatch();
    return;
  }
  if (line.front() == ':') return;  // comment (servers use it as a keep-alive ping)
  std::string_view field = line;
  std::string_view value;
  size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    data_.append(value);
    data_.push_back('\n');
    has_data_ = true;
    if (data_.size() > max_event_bytes_) overflowed_ = true;
  } else if (field == "event") {
    event_type_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) last_id_.assign(value);
  }
  // "retry" and unknown fields are ignored, as the spec says.
}

void SseParser::Dispatch() {
  if (!has_data_) {
    event_type_.clear();
    return;
  }
  std::string_view data(data_);
  if (!data.empty() && data.back() == '\n') data.remove_suffix(1);
  SseEvent event{event_type_.empty() ? std::string_view("message") : std::string_view(event_type_),
                 data, last_id_};
  ++events_;
  handler_(event);
  data_.clear();
  event_type_.clear();
  has_data_ = false;
}

CompletionStream::CompletionStream(size_t max_event_bytes)
    : parser_([this](const SseEvent& event) { OnEvent(event); }, max_event_bytes) {}

bool CompletionStream::Feed(std::string_view bytes, int64_t now_ns) {
  if (failed()) return false;
  now_ns_ = now_ns;
  if (!parser_.Feed(bytes)) {
    if (malformed_reason_.empty()) {
      malformed_reason_ = "an SSE line or event exceeds the size bound";
    }
    return false;
  }
  return !failed();
}

void CompletionStream::OnEvent(const SseEvent& event) {
  if (failed()) return;
  last_event_ns_ = now_ns_;
  if (done_) {
    malformed_reason_ = "event after [DONE]: " + Excerpt(event.data);
    return;
  }
  if (event.data == "[DONE]") {
    done_ = true;
    done_ns_ = now_ns_;
    return;
  }
  ChunkScanner chunk(keep_text_);
  const char* begin = event.data.data();
  bool parsed = nlohmann::json::sax_parse(begin, begin + event.data.size(), &chunk);
  if (!parsed || !chunk.root_is_object) {
    malformed_reason_ = "event data is not a JSON object: " + Excerpt(event.data);
    return;
  }
  if (chunk.has_error) {
    stream_error_ = "server error event: " +
                    Excerpt(chunk.error_message.empty() ? event.data : chunk.error_message);
    return;
  }
  if (!chunk.has_choices && !chunk.has_usage) {
    malformed_reason_ = "chunk has neither \"choices\" nor \"usage\": " + Excerpt(event.data);
    return;
  }
  if (chunk.has_choices && !chunk.choices_is_array) {
    malformed_reason_ = "\"choices\" is not an array: " + Excerpt(event.data);
    return;
  }
  if (chunk.first_choice_seen && !chunk.first_choice_is_object) {
    malformed_reason_ = "choices[0] is not an object: " + Excerpt(event.data);
    return;
  }
  // Completions carry choices[0].text; chat streams choices[0].delta.content.
  const ChunkScanner::Text& text =
      chunk.text.state != ChunkScanner::Text::kAbsent ? chunk.text : chunk.content;
  if (text.state == ChunkScanner::Text::kBad) {
    malformed_reason_ = "choices[0].text is not a string: " + Excerpt(event.data);
    return;
  }
  if (chunk.has_usage && !chunk.usage_is_object) {
    malformed_reason_ = "\"usage\" is not an object: " + Excerpt(event.data);
    return;
  }
  if (text.state == ChunkScanner::Text::kString && text.size > 0) {
    token_chunk_ns_.push_back(now_ns_);
    if (keep_text_) text_ += text.value;
  }
  if (chunk.prompt_tokens >= 0) prompt_tokens_ = chunk.prompt_tokens;
  if (chunk.completion_tokens >= 0) completion_tokens_ = chunk.completion_tokens;
}

}  // namespace kvgate::loadgen
