// The per-item quality result: the one record type for a quality fact, produced by the checks
// (passkey, QA) and stored unchanged in the run history (gates/history), from which any quality
// gate can be recomputed. Fields are plain strings, numbers and string lists on purpose.
//
// Scores are on a 0–100 scale so that the mean over items is the dataset score directly
// (QA: 100 × token F1, SQuAD definition; passkey: 100 if the first integer equals the key, else 0).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kvgate::checks {

struct QualityRecord {
  std::string check;                 // "passkey" or "qa"
  std::string item_id;               // stable across servers, so baseline and candidate pair up
  std::vector<std::string> subsets;  // e.g. {"length=2048", "depth=0-33%"}; "all" is implicit
  int64_t prompt_bytes = 0;          // bytes of the prompt string sent
  int64_t prompt_tokens = -1;        // the server's usage.prompt_tokens; -1 when it sent none
  std::string prediction;            // the text scored (QA: first line of the output, trimmed)
  std::vector<std::string> gold;     // passkey: {key}; QA: every gold answer
  double score = 0.0;                // 0–100, see above; 0 for errored items
  bool correct = false;              // passkey: key found; QA: exact match after normalisation
  double latency_s = 0.0;            // request sent → full response read, seconds
  std::string error;                 // empty when the request succeeded; else what went wrong

  bool ok() const { return error.empty(); }
};

// Mean score and counts over the records of one subset ("all" = every record).
struct SubsetSummary {
  std::string subset;
  int64_t count = 0;
  int64_t correct = 0;
  int64_t errors = 0;
  double mean_score = 0.0;  // 0–100; errored items count as 0
};

// One summary for "all" first, then one per subset named in any record, sorted by name.
std::vector<SubsetSummary> SummarizeBySubset(const std::vector<QualityRecord>& records);

// JSON (nlohmann ADL hooks). Field names equal the member names. from_json throws
// nlohmann::json::exception on missing or mistyped fields.
void to_json(nlohmann::json& j, const QualityRecord& record);
void from_json(const nlohmann::json& j, QualityRecord& record);
void to_json(nlohmann::json& j, const SubsetSummary& summary);

}  // namespace kvgate::checks
