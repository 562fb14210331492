// Long-context QA items: the generated set with key subsets (context-length bucket × answer-depth
// bucket) and a loader for user datasets in JSONL. Both are asked in one prompt format, the one
// the built-in model is trained on (readkv/model recall_data.h; checks/README.md "Formats"):
//
//   <context>\n\nQuestion: <question>\nAnswer:
//
// and the prediction is the first line of the completion, trimmed. Generation is seeded from a
// stream disjoint from the model's training and its own held-out evaluation, so the items are held
// out. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::checks {

struct QaItem {
  std::string id;
  std::string context;
  std::string question;
  std::vector<std::string> answers;  // gold answers, ≥ 1
  std::vector<std::string> subsets;  // key subsets this item belongs to; may be empty
};

struct QaSetSettings {
  int items = 120;                                 // ≥ 1
  std::vector<int64_t> lengths{1024, 2048, 4096};  // target prompt bytes, one subset each
  int depth_buckets = 3;  // answer depth split into this many equal ranges, one subset each
  int min_facts = 1;      // facts per item, uniform in [min_facts, max_facts] (1..8)
  int max_facts = 8;
  uint64_t seed = 0;
  int max_tokens = 24;  // completion budget per item (bytes for the byte-level model)
};

// Throws InvalidSetting naming the field when a setting is out of range.
void ValidateQaSettings(const QaSetSettings& settings);

// The generated set. Item i takes cell i mod (|lengths| × depth_buckets), length-major; its
// subsets are {"length=<bytes>", "depth=<lo>-<hi>%"}. Throws InvalidSetting.
std::vector<QaItem> GenerateQaSet(const QaSetSettings& settings);

// The prompt sent for an item, in the shared format above.
std::string QaPrompt(const QaItem& item);

// What is scored: the completion up to its first line break, without surrounding white space
// and without a leading "Answer:" (a chat model's echo of the prompt).
std::string QaPrediction(std::string_view completion);

// User datasets: one JSON object per line, {"id": string|integer, "context": string,
// "question": string, "answers": [string, ...], "subset": string|[string, ...] (optional)}.
// Blank lines are skipped; unknown keys are an error (they are usually typos). Throws
// DatasetError "SOURCE:LINE: field: what is wrong" for the first bad line, including duplicate
// ids and answers that normalise to nothing (they could never be matched).
std::vector<QaItem> ParseQaJsonl(std::istream& input, const std::string& source);
std::vector<QaItem> LoadQaJsonl(const std::filesystem::path& path);

}  // namespace kvgate::checks
