// Held-out quality of a DecodeModel on the seeded recall sets of recall_data.h: passkey retrieval
// (exact first integer) and QA token F1 (SQuAD normalisation), with greedy decoding through the
// engine seam, so every KV backend is measured the same way. Not thread-safe (drives the model).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "readkv/engine/decode_model.h"
#include "readkv/model/tokenizer.h"

namespace readkv::model {

// Greedy continuation of `prompt` (BOS added) for at most `max_new_tokens`, stopping at EOS or at
// the first `stop` string (which is cut off). Uses sequence ids from `first_sequence_id` on.
struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  int prompt_tokens = 0;
};
std::vector<Completion> GreedyCompleteBatch(engine::DecodeModel& model, const Tokenizer& tokenizer,
                                            const std::vector<std::string>& prompts,
                                            int max_new_tokens,
                                            const std::vector<std::string>& stop,
                                            const engine::ReadPolicy& policy,
                                            uint64_t first_sequence_id = 1);

struct EvalOptions {
  uint64_t seed = 0xe7a15eedULL;  // held out: training uses other seeds
  std::vector<int> passkey_lengths = {512, 1024, 2048, 4096, 8192};
  std::vector<double> passkey_depths = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  int passkey_per_cell = 2;
  std::vector<int> qa_lengths = {512, 2048, 8192};
  std::vector<double> qa_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int qa_per_cell = 4;
  int batch = 4;  // sequences decoded together
  engine::ReadPolicy policy;
  std::function<void(const std::string& line)> progress;  // one line per finished item
};

struct ItemResult {
  std::string kind;  // "passkey" | "qa"
  int length_bytes = 0;
  double depth = 0.0;
  std::string prediction;
  std::string answer;  // first gold answer
  bool correct = false;  // passkey: first integer == key; qa: F1 == 1
  double f1 = 0.0;
};

struct EvalReport {
  int passkey_items = 0, passkey_correct = 0;
  int qa_items = 0;
  double qa_f1 = 0.0;  // 100 x mean
  double seconds = 0.0;
  std::vector<ItemResult> items;
  std::string ToJson() const;  // summary + per-length breakdown + failures
};

EvalReport EvaluateRecall(engine::DecodeModel& model, const Tokenizer& tokenizer,
                          const EvalOptions& options);

}  // namespace readkv::model
