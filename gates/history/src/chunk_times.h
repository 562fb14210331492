// The compact BLOB that stores a request's chunk arrival times (private to gates/history).
//
// Format 1: one byte 0x01, then for each time t[i] the zigzag-encoded difference
// t[i] − t[i−1] (t[−1] = 0) as an unsigned LEB128 varint. Token chunks arrive milliseconds apart,
// so a chunk costs about 3 bytes instead of 8, and any int64 sequence (even a decreasing one)
// round-trips exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kvgate::history::chunk_times {

std::vector<uint8_t> Encode(std::span<const int64_t> times_ns);

// nullopt when the bytes are not a valid encoding (unknown format, truncated varint, overflow).
std::optional<std::vector<int64_t>> Decode(std::span<const uint8_t> bytes);

}  // namespace kvgate::history::chunk_times
