// Workloads read from files that other benchmarks use: ShareGPT conversations (vLLM `bench
// serve --dataset-name sharegpt`) and Mooncake request traces (timestamped JSONL with the hash
// ids of each prompt's 512-token blocks), and the identity of such a file (its SHA-256).
//
// Reading checks every field and throws SettingsError naming the file, the line (or entry) and
// the field: `trace.jsonl:7: hash_ids: must be an array of integers >= 0`.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/loadgen/schedule.h"

namespace kvgate::loadgen {

// One ShareGPT prompt/reply pair: the first "human" turn of a conversation and the "gpt" turn
// that follows it. `entry` is the conversation's index in the file's top-level array.
struct ShareGptPair {
  std::string prompt;
  std::string reply;
  int64_t entry = 0;
};

// Reads a ShareGPT JSON file: a top-level array of {"conversations": [{"from", "value"}, ...]}.
// A conversation without a human turn followed by a gpt turn is skipped (counted in `skipped`);
// a field of the wrong type is an error. `sha256` (optional) receives the digest of the bytes
// that were parsed (the file is read once).
std::vector<ShareGptPair> ReadShareGpt(const std::string& path, int64_t* skipped = nullptr,
                                       std::string* sha256 = nullptr);

// vLLM's pruning of ShareGPT pairs (benchmarks' is_valid_sequence defaults): a pair is used only
// when the prompt and the reply both hold at least 4 tokens, the prompt at most 1024 and both
// together at most 2048.
inline constexpr int64_t kShareGptMinTokens = 4;
inline constexpr int64_t kShareGptMaxPromptTokens = 1024;
inline constexpr int64_t kShareGptMaxTotalTokens = 2048;
bool ShareGptPairFits(int64_t prompt_tokens, int64_t reply_tokens);

// Picks `count` requests from `pairs` as vLLM does: the pairs in a seeded shuffled order, each
// measured with `prompt_tokens` (the prompt as it will be sent) and `reply_tokens` (the reply's
// text alone), pruned by ShareGptPairFits, until `count` fit; the reply's token count is the
// request's max_tokens. Fewer fitting pairs than `count` are reused in the same order. Throws
// SettingsError("dataset", ...) when no pair fits. `examined` (optional) counts pairs measured.
struct ShareGptSelection {
  std::vector<Workload::FileEntry> requests;
  int64_t examined = 0;
  int64_t pruned = 0;
};
ShareGptSelection SelectShareGpt(const std::vector<ShareGptPair>& pairs, int64_t count,
                                 uint64_t seed,
                                 const std::function<int64_t(const std::string&)>& prompt_tokens,
                                 const std::function<int64_t(const std::string&)>& reply_tokens);

// A token count without a tokenizer: one token per started 4 bytes of text (OpenAI's rule of
// thumb for English), stated as approximate wherever it is used.
int64_t ApproximateTokens(const std::string& text);

// One Mooncake trace line: {"timestamp": ms, "input_length": tokens, "output_length": tokens,
// "hash_ids": [block ids]}; block k of the prompt is the k-th `block_tokens` tokens, and equal
// ids mean equal blocks (and, as the ids are chained hashes, equal prefixes).
struct TraceEntry {
  int64_t timestamp_ms = 0;
  int input_length = 0;
  int output_length = 0;
  std::vector<int64_t> hash_ids;
};

// Reads a Mooncake JSONL trace; timestamps must not decrease and `input_length` must fit in the
// line's blocks (<= hash_ids.size() * block_tokens). `sha256` (optional) receives the digest of
// the bytes that were parsed (the file is read once).
std::vector<TraceEntry> ReadTrace(const std::string& path, int block_tokens,
                                  std::string* sha256 = nullptr);

// The prompt of a trace line: block k is `block_tokens` seeded vocabulary words (about one
// token each) that depend only on (hash_ids[k], seed), joined by spaces, and the prompt is cut to
// `input_length` words. Equal hash-id prefixes give byte-identical prompt prefixes.
std::string TracePrompt(const TraceEntry& entry, int block_tokens, uint64_t seed);

// The trace's send times: (timestamp - first timestamp) / time_scale, in nanoseconds.
std::vector<int64_t> TraceArrivals(const std::vector<TraceEntry>& trace, double time_scale);

// A workload file read once: its bytes and their lower-case hex SHA-256 (OpenSSL EVP), so a
// digest recorded with what was parsed names exactly those bytes. Throws SettingsError(field,
// ...) when the file cannot be read.
struct FileBytes {
  std::string bytes;
  std::string sha256;
};
FileBytes ReadFileBytes(const std::string& path, const std::string& field);

// Lower-case hex SHA-256 of `bytes`.
std::string Sha256Hex(std::string_view bytes);

}  // namespace kvgate::loadgen
