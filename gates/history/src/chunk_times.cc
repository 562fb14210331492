#include "chunk_times.h"

namespace kvgate::history::chunk_times {
namespace {

constexpr uint8_t kFormat = 0x01;

}  // namespace

std::vector<uint8_t> Encode(std::span<const int64_t> times_ns) {
  std::vector<uint8_t> out;
  out.reserve(1 + times_ns.size() * 3);
  out.push_back(kFormat);
  uint64_t previous = 0;
  for (int64_t t : times_ns) {
    // Differences wrap modulo 2^64, which the decoder undoes, so no overflow is possible.
    auto delta = static_cast<int64_t>(static_cast<uint64_t>(t) - previous);
    previous = static_cast<uint64_t>(t);
    uint64_t zigzag = (static_cast<uint64_t>(delta) << 1) ^ static_cast<uint64_t>(delta >> 63);
    while (zigzag >= 0x80) {
      out.push_back(static_cast<uint8_t>(zigzag | 0x80));
      zigzag >>= 7;
    }
    out.push_back(static_cast<uint8_t>(zigzag));
  }
  return out;
}

std::optional<std::vector<int64_t>> Decode(std::span<const uint8_t> bytes) {
  if (bytes.empty() || bytes[0] != kFormat) return std::nullopt;
  std::vector<int64_t> out;
  uint64_t previous = 0;
  size_t pos = 1;
  while (pos < bytes.size()) {
    uint64_t zigzag = 0;
    int shift = 0;
    while (true) {
      if (pos >= bytes.size() || shift > 63) return std::nullopt;
      uint8_t byte = bytes[pos++];
      if (shift == 63 && (byte & 0x7e) != 0) return std::nullopt;  // more than 64 bits
      zigzag |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
      shift += 7;
    }
    uint64_t delta = (zigzag >> 1) ^ (0 - (zigzag & 1));
    previous += delta;
    out.push_back(static_cast<int64_t>(previous));
  }
  return out;
}

}  // namespace kvgate::history::chunk_times
