// A server's response body as the load generator reads it: SseParser framing and the
// CompletionStream decoder on top. Differential: the same bytes fed in one piece and split at
// points chosen by the input itself must give the same events and the same stream verdict
// (the header promises "accepting input split at any byte"). A small max_event_bytes exercises
// the overflow bound. No exception may escape; nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/loadgen/sse.h"

namespace {

using kvgate::loadgen::CompletionStream;
using kvgate::loadgen::SseEvent;
using kvgate::loadgen::SseParser;

// Splits `bytes` into pieces whose lengths come from the bytes themselves (1..16), so the fuzzer
// controls where reads end.
std::vector<std::string_view> Pieces(std::string_view bytes) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = 1 + (static_cast<uint8_t>(bytes[at]) % 16);
    out.push_back(bytes.substr(at, n));
    at += n;
  }
  return out;
}

std::string Events(const std::vector<std::string_view>& pieces, size_t max_event_bytes,
                   bool* overflowed) {
  std::string log;
  SseParser parser(
      [&](const SseEvent& e) {
        log.append(e.type).push_back('\0');
        log.append(e.data).push_back('\0');
        log.append(e.id).push_back('\n');
      },
      max_event_bytes);
  for (std::string_view piece : pieces) {
    if (!parser.Feed(piece)) break;
  }
  *overflowed = parser.overflowed();
  return log;
}

struct Verdict {
  size_t tokens;
  bool done;
  int prompt_tokens;
  int completion_tokens;
  bool malformed;
  bool stream_error;
  std::string text;
  bool operator==(const Verdict&) const = default;
};

Verdict Decode(const std::vector<std::string_view>& pieces) {
  CompletionStream stream;
  stream.set_keep_text(true);
  int64_t now = 0;
  for (std::string_view piece : pieces) {
    if (!stream.Feed(piece, ++now)) break;
  }
  return {stream.token_chunk_ns().size(),
          stream.done(),
          stream.prompt_tokens(),
          stream.completion_tokens(),
          stream.malformed(),
          stream.stream_error(),
          stream.text()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> whole = {bytes};
  const std::vector<std::string_view> split = Pieces(bytes);

  bool overflow_whole = false;
  bool overflow_split = false;
  if (Events(whole, size_t{64} << 20, &overflow_whole) !=
      Events(split, size_t{64} << 20, &overflow_split)) {
    __builtin_trap();
  }
  // With a tight bound only the no-crash contract is checked: where a split stream overflows
  // depends on how much of a line was pending, which the bound is allowed to see.
  (void)Events(split, 64, &overflow_split);

  if (!(Decode(whole) == Decode(split))) __builtin_trap();
  return 0;
}
