// Server-Sent Events, incrementally: SseParser frames a byte stream into events exactly as the
// WHATWG HTML "event stream interpretation" says (lines end in CRLF, LF or CR; `:` starts a
// comment; `data:` lines of one event are joined with "\n"; a blank line dispatches; a leading
// BOM is dropped), accepting input split at any byte. CompletionStream interprets those events as
// an OpenAI completions stream and records what the load generator needs: arrival times of
// token chunks, `usage`, `[DONE]`, or why the stream is malformed.
//
// Thread-safety: none; one instance per response, used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::loadgen {

struct SseEvent {
  std::string_view type;  // "message" unless an `event:` field set it
  std::string_view data;  // the `data:` lines joined with "\n", without the final newline
  std::string_view id;    // last `id:` seen in the stream (may be empty)
};

class SseParser {
 public:
  using Handler = std::function<void(const SseEvent&)>;

  // `max_event_bytes` bounds one line and one event's data; beyond it Feed() returns false and
  // the parser stops (a server cannot make the client grow without limit).
  explicit SseParser(Handler handler, size_t max_event_bytes = size_t{64} << 20);

  // Consumes the next bytes of the stream; calls the handler for every event completed by them.
  // Returns false once the stream exceeded the bound (sticky).
  bool Feed(std::string_view bytes);

  int64_t events() const { return events_; }
  bool overflowed() const { return overflowed_; }
  // True when bytes of an unfinished line or event are pending (at end of stream the spec
  // discards them).
  bool has_partial_event() const { return !line_.empty() || has_data_; }

 private:
  void ProcessLine(std::string_view line);
  void Dispatch();

  Handler handler_;
  size_t max_event_bytes_;
  std::string line_;  // an unfinished line carried over from the previous Feed()
  std::string data_;
  std::string event_type_;
  std::string last_id_;
  bool has_data_ = false;
  bool after_cr_ = false;  // previous byte was CR: a following LF belongs to the same break
  bool at_start_ = true;   // BOM check
  bool overflowed_ = false;
  int64_t events_ = 0;
};

// What an OpenAI completions stream told us. Times are whatever clock the caller passes in.
class CompletionStream {
 public:
  explicit CompletionStream(size_t max_event_bytes = size_t{64} << 20);
  CompletionStream(const CompletionStream&) = delete;
  CompletionStream& operator=(const CompletionStream&) = delete;

  // Consumes bytes that arrived at `now_ns`. Returns false once the stream is malformed or
  // carried an error event (further input is ignored).
  bool Feed(std::string_view bytes, int64_t now_ns);

  // Arrival time of every token chunk: a chunk whose choices[0].text (or, for chat streams,
  // choices[0].delta.content) is a non-empty string. A chunk with empty text is not a token.
  const std::vector<int64_t>& token_chunk_ns() const { return token_chunk_ns_; }
  int64_t last_event_ns() const { return last_event_ns_; }
  bool done() const { return done_; }  // `data: [DONE]` seen
  int64_t done_ns() const { return done_ns_; }
  // From the last `usage` object seen (-1 when none): the only source of token counts.
  int prompt_tokens() const { return prompt_tokens_; }
  int completion_tokens() const { return completion_tokens_; }
  int64_t events() const { return parser_.events(); }

  bool malformed() const { return !malformed_reason_.empty(); }
  const std::string& malformed_reason() const { return malformed_reason_; }
  bool stream_error() const { return !stream_error_.empty(); }
  const std::string& stream_error_message() const { return stream_error_; }
  bool failed() const { return malformed() || stream_error(); }

  // Concatenated token text (only kept when enabled; off by default to save memory).
  void set_keep_text(bool keep) { keep_text_ = keep; }
  const std::string& text() const { return text_; }

 private:
  void OnEvent(const SseEvent& event);

  SseParser parser_;
  int64_t now_ns_ = 0;
  std::vector<int64_t> token_chunk_ns_;
  int64_t last_event_ns_ = -1;
  bool done_ = false;
  int64_t done_ns_ = -1;
  int prompt_tokens_ = -1;
  int completion_tokens_ = -1;
  std::string malformed_reason_;
  std::string stream_error_;
  bool keep_text_ = false;
  std::string text_;
};

}  // namespace kvgate::loadgen
