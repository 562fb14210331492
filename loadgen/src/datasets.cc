// Dataset and trace files (kvgate/loadgen/datasets.h).
#include "kvgate/loadgen/datasets.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <numeric>
#include <openssl/evp.h>
#include <memory>
#include <optional>
#include <sstream>

#include "kvgate/stats/random.h"

namespace kvgate::loadgen {
namespace {

constexpr uint64_t kShareGptShuffleStream = 0x5a6e;
constexpr uint64_t kTraceBlockStream = 0x7b10c;

// The 1-based line of byte offset `byte` in `text`.
int64_t LineOf(const std::string& text, size_t byte) {
  byte = std::min(byte, text.size());
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(byte), '\n');
}

}  // namespace

std::vector<ShareGptPair> ReadShareGpt(const std::string& path, int64_t* skipped,
                                       std::string* sha256) {
  FileBytes file = ReadFileBytes(path, "dataset");
  if (sha256) *sha256 = file.sha256;
  const std::string& text = file.bytes;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw SettingsError("dataset", path + ":" + std::to_string(LineOf(text, e.byte)) +
                                       ": not valid JSON (" + e.what() + ")");
  }
  if (!json.is_array()) {
    throw SettingsError("dataset", path + ":1: a ShareGPT file is a JSON array of conversations");
  }
  std::vector<ShareGptPair> pairs;
  int64_t unused = 0;
  for (size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& entry = json[i];
    auto where = [&](const std::string& field) {
      return path + ": entry " + std::to_string(i) + ": " + field + ": ";
    };
    if (!entry.is_object()) throw SettingsError("dataset", where("entry") + "not an object");
    auto conversations = entry.find("conversations");
    if (conversations == entry.end() || !conversations->is_array()) {
      throw SettingsError("dataset", where("conversations") + "missing or not an array");
    }
    std::optional<ShareGptPair> pair;
    for (size_t t = 0; t < conversations->size(); ++t) {
      const nlohmann::json& turn = (*conversations)[t];
      const std::string field = "conversations[" + std::to_string(t) + "]";
      if (!turn.is_object() || !turn.contains("from") || !turn["from"].is_string() ||
          !turn.contains("value") || !turn["value"].is_string()) {
        throw SettingsError("dataset", where(field) + "must be {\"from\": string, \"value\": string}");
      }
      if (pair) continue;
      if (turn["from"] == "human" && t + 1 < conversations->size()) {
        const nlohmann::json& next = (*conversations)[t + 1];
        if (next.is_object() && next.value("from", "") == "gpt" && next.contains("value") &&
            next["value"].is_string()) {
          pair = ShareGptPair{turn["value"].get<std::string>(), next["value"].get<std::string>(),
                              static_cast<int64_t>(i)};
        }
      }
    }
    if (pair) {
      pairs.push_back(std::move(*pair));
    } else {
      ++unused;
    }
  }
  if (skipped) *skipped = unused;
  if (pairs.empty()) {
    throw SettingsError("dataset",
                        path + ": no conversation has a human turn followed by a gpt turn");
  }
  return pairs;
}

bool ShareGptPairFits(int64_t prompt_tokens, int64_t reply_tokens) {
  return prompt_tokens >= kShareGptMinTokens && reply_tokens >= kShareGptMinTokens &&
         prompt_tokens <= kShareGptMaxPromptTokens &&
         prompt_tokens + reply_tokens <= kShareGptMaxTotalTokens;
}

ShareGptSelection SelectShareGpt(const std::vector<ShareGptPair>& pairs, int64_t count,
                                 uint64_t seed,
                                 const std::function<int64_t(const std::string&)>& prompt_tokens,
                                 const std::function<int64_t(const std::string&)>& reply_tokens) {
  // Fisher-Yates on integer draws of kvgate::stats: the same order on every machine.
  std::vector<size_t> order(pairs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  stats::SplitMixRng rng(stats::DeriveSeed(seed, kShareGptShuffleStream, 0));
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[rng.UniformIndex(i)]);
  }
  ShareGptSelection selection;
  for (size_t i = 0; i < order.size() && static_cast<int64_t>(selection.requests.size()) < count;
       ++i) {
    const ShareGptPair& pair = pairs[order[i]];
    ++selection.examined;
    const int64_t reply = reply_tokens(pair.reply);
    // The reply is measured first: most pruned pairs fail on it, and it is the cheaper count.
    const int64_t prompt = reply >= kShareGptMinTokens ? prompt_tokens(pair.prompt) : 0;
    if (!ShareGptPairFits(prompt, reply)) {
      ++selection.pruned;
      continue;
    }
    Workload::FileEntry entry;
    entry.prompt = pair.prompt;
    entry.max_tokens = static_cast<int>(reply);
    selection.requests.push_back(std::move(entry));
  }
  if (selection.requests.empty()) {
    throw SettingsError("dataset", "no ShareGPT pair fits vLLM's limits (prompt and reply >= " +
                                       std::to_string(kShareGptMinTokens) + " tokens, prompt <= " +
                                       std::to_string(kShareGptMaxPromptTokens) + ", both <= " +
                                       std::to_string(kShareGptMaxTotalTokens) + ") among " +
                                       std::to_string(selection.examined) + " pairs");
  }
  return selection;
}

int64_t ApproximateTokens(const std::string& text) {
  return (static_cast<int64_t>(text.size()) + 3) / 4;
}

std::vector<TraceEntry> ReadTrace(const std::string& path, int block_tokens, std::string* sha256) {
  FileBytes file = ReadFileBytes(path, "trace");
  if (sha256) *sha256 = file.sha256;
  std::istringstream in(std::move(file.bytes));
  std::vector<TraceEntry> trace;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto fail = [&](const std::string& field, const std::string& what) {
      throw SettingsError("trace", path + ":" + std::to_string(line_no) + ": " + field + ": " + what);
    };
    const nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || !json.is_object()) fail("line", "not a JSON object");
    auto integer = [&](const char* field, int64_t min, int64_t max) {
      auto it = json.find(field);
      if (it == json.end()) fail(field, "missing");
      if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max) {
        fail(field, "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                        "]");
      }
      return it->get<int64_t>();
    };
    TraceEntry entry;
    entry.timestamp_ms = integer("timestamp", 0, int64_t{1} << 50);
    entry.input_length = static_cast<int>(integer("input_length", 1, 1 << 24));
    entry.output_length = static_cast<int>(integer("output_length", 1, 1 << 24));
    auto ids = json.find("hash_ids");
    if (ids == json.end() || !ids->is_array() || ids->empty()) {
      fail("hash_ids", "must be a non-empty array of integers >= 0");
    }
    for (const auto& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        fail("hash_ids", "must be a non-empty array of integers >= 0");
      }
      entry.hash_ids.push_back(id.get<int64_t>());
    }
    if (static_cast<int64_t>(entry.input_length) >
        static_cast<int64_t>(entry.hash_ids.size()) * block_tokens) {
      fail("input_length", std::to_string(entry.input_length) + " tokens do not fit in " +
                               std::to_string(entry.hash_ids.size()) + " blocks of " +
                               std::to_string(block_tokens));
    }
    if (!trace.empty() && entry.timestamp_ms < trace.back().timestamp_ms) {
      fail("timestamp", std::to_string(entry.timestamp_ms) + " is earlier than the line before (" +
                            std::to_string(trace.back().timestamp_ms) + ")");
    }
    trace.push_back(std::move(entry));
  }
  if (trace.empty()) throw SettingsError("trace", "trace '" + path + "' has no requests");
  return trace;
}

std::string TracePrompt(const TraceEntry& entry, int block_tokens, uint64_t seed) {
  std::string prompt;
  int left = entry.input_length;
  for (size_t k = 0; k < entry.hash_ids.size() && left > 0; ++k) {
    const int words = std::min(left, block_tokens);
    if (!prompt.empty()) prompt += ' ';
    // SyntheticText draws its words in order, so a cut block is a prefix of the whole one.
    prompt += SyntheticText(words, stats::DeriveSeed(seed, kTraceBlockStream,
                                                     static_cast<uint64_t>(entry.hash_ids[k])));
    left -= words;
  }
  return prompt;
}

std::vector<int64_t> TraceArrivals(const std::vector<TraceEntry>& trace, double time_scale) {
  std::vector<int64_t> arrivals;
  arrivals.reserve(trace.size());
  for (const TraceEntry& entry : trace) {
    const double ms = static_cast<double>(entry.timestamp_ms - trace.front().timestamp_ms);
    arrivals.push_back(static_cast<int64_t>(std::llround(ms * 1e6 / time_scale)));
  }
  return arrivals;
}

FileBytes ReadFileBytes(const std::string& path, const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SettingsError(field, "cannot open '" + path + "'");
  FileBytes file;
  file.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw SettingsError(field, "cannot read '" + path + "'");
  file.sha256 = Sha256Hex(file.bytes);
  return file;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: SHA-256 digest failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  return hex;
}

}  // namespace kvgate::loadgen
