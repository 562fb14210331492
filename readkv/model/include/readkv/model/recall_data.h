// Seeded long-context recall text: the training corpus of the built-in model and its held-out
// evaluation sets. Every generator draws from kvgate::stats::SplitMixRng (stats/random.h), so a
// seed gives the same bytes on every machine. Lengths are in bytes (= tokens of the byte-level
// tokenizer, BOS excluded).
//
// Formats (the built-in model is trained on exactly these; a client that wants it to succeed
// must ask in the same way):
// - Passkey (docs/definitions.md; the Landmark-Attention/LongLoRA template, joined with "\n",
//   the filler repeated with single spaces and cut at a byte boundary, as their generator does):
//     <task>\n<filler prefix>\n<needle>\n<filler suffix>\n<question>
//   answered by " K." where K is the key; correct iff the first integer of the output is K.
// - QA: <task>\n<filler sentences with facts>\n\nQuestion: <question>\nAnswer:
//   answered by " <answer>" and EOS. Facts: "NAME lives in CITY." ("Where does NAME live?"),
//   "NAME's favorite color is COLOR." ("What is NAME's favorite color?"), "The job of NAME is
//   JOB." ("What is the job of NAME?"), "NAME was born in YEAR." ("In which year was NAME
//   born?"), "The pass key of NAME is K." ("What is the pass key of NAME?").
// Generators are not thread-safe; make one per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/stats/random.h"
#include "kvgate/checks/recall_format.h"

namespace readkv::model {

// The passkey template's fixed text: the checks' own (kvgate/checks/recall_format.h).
inline constexpr std::string_view kPasskeyTask = kvgate::checks::kPasskeyTaskDescription;
inline constexpr std::string_view kPasskeyFiller = kvgate::checks::kPasskeyFiller;
inline constexpr std::string_view kPasskeyQuestion = kvgate::checks::kPasskeyQuestion;

// "The pass key is K. Remember it. K is the pass key."
std::string PasskeyNeedle(std::string_view key);
// The passkey prompt (no BOS, no answer) whose byte length is `length_bytes` when the template's
// fixed parts fit (otherwise the filler is empty), with `depth` in [0, 1] of the filler before
// the needle. Throws std::invalid_argument("depth") outside [0, 1].
std::string PasskeyPrompt(std::string_view key, int length_bytes, double depth);

// One held-out item: a prompt, its gold answers, and where the evidence sits.
struct RecallItem {
  std::string kind;  // "passkey" | "qa"
  std::string prompt;
  std::vector<std::string> answers;
  int length_bytes = 0;  // requested prompt length
  double depth = 0.0;    // requested relative position of the evidence
};

// lengths x depths x per_cell passkey prompts; keys uniform in [1, 99999].
std::vector<RecallItem> MakePasskeySet(uint64_t seed, std::span<const int> lengths,
                                       std::span<const double> depths, int per_cell);
// lengths x depths x per_cell QA prompts with 1..8 facts each (one of them asked about, at the
// given depth).
std::vector<RecallItem> MakeQaSet(uint64_t seed, std::span<const int> lengths,
                                  std::span<const double> depths, int per_cell);

// Shares of the training corpus. The defaults are stage 1 of the built-in model (models/README.md).
struct CorpusMix {
  double passkey = 0.35;           // passkey prompts with their answer
  double multikey = 0.40;          // 2-8 "The pass key of NAME is K." facts, every key queried
                                   // (the rest: QA documents with 1-8 facts)
  double qa_all_questions = 0.40;  // QA documents asking about every fact (else one question)
  double pseudo_words = 0.0;       // share of city/color/job answers replaced by made-up words,
                                   // so only copying from the context can answer them
  double edge_depths = 0.0;        // share of passkey prompts whose key sits within 2% of either
                                   // end of the filler (the depths a uniform draw rarely trains:
                                   // a key right after the task line of a 16K prompt)
};

// The training corpus: an endless stream of documents (answers included), each to be framed as
// BOS + text + EOS.
class RecallCorpus {
 public:
  explicit RecallCorpus(uint64_t seed, CorpusMix mix = {}) : rng_(seed), mix_(mix) {}
  // A document of at most `max_bytes` bytes, at least ~60% of it (`max_bytes` >= 256).
  std::string Next(int max_bytes);

 private:
  kvgate::stats::SplitMixRng rng_;
  CorpusMix mix_;
};

// Scoring (docs/definitions.md, "Passkey"). The first maximal run of ASCII digits, if any.
std::optional<std::string> FirstInteger(std::string_view text);
// SQuAD normalisation: lower-case, drop ASCII punctuation, drop a/an/the, collapse spaces.
std::string NormalizeAnswer(std::string_view text);
// Token-multiset F1 in [0, 1] of normalised texts; max over gold answers.
double TokenF1(std::string_view prediction, std::string_view gold);
double MaxTokenF1(std::string_view prediction, std::span<const std::string> golds);

}  // namespace readkv::model
