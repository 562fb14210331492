// Passkey retrieval: the Landmark-Attention / LongLoRA template (docs/definitions.md). A needle
// with a numeric key is hidden at a chosen depth inside repeated filler; the model is asked for
// the key; an item is correct iff the first integer in the output equals the key.
//
// Items form a seeded grid: item i takes cell i mod (|lengths| × |depths|) in length-major order
// and a key drawn from a generator seeded with `seed`, so the same settings give the same items on
// every machine. Lengths are prompt lengths in bytes (= tokens for a byte-level model; a user with
// a subword tokenizer picks byte lengths accordingly). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/checks/recall_format.h"

namespace kvgate::checks {

struct PasskeySettings {
  int items = 200;                                       // number of items, ≥ 1
  std::vector<int64_t> lengths{1024, 2048, 4096, 8192};  // target prompt bytes, each ≥ minimum
  // Needle depth: the share of the filler placed before the needle, each in [0, 1].
  std::vector<double> depths{0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  uint64_t seed = 0;
  int key_digits = 5;   // keys are uniform in [10^(d-1), 10^d - 1]; 1 ≤ d ≤ 18
  int max_tokens = 10;  // completion budget per item (the Landmark test asks for 10 new tokens)
};

// Throws InvalidSetting naming the field when a setting is out of range.
void ValidatePasskeySettings(const PasskeySettings& settings);

struct PasskeyItem {
  std::string id;             // "passkey-<i>"
  int64_t target_length = 0;  // requested prompt bytes
  double depth = 0.0;         // requested depth in [0, 1]
  std::string key;            // decimal digits, no leading zero
  std::string prompt;
  int64_t needle_offset = 0;         // byte offset of the needle line in `prompt`
  int64_t filler_before = 0;         // filler bytes before the needle
  int64_t filler_after = 0;          // filler bytes after the needle
  std::vector<std::string> subsets;  // {"length=<bytes>", "depth=<percent>%"}
};

// The prompt's fixed text (kPasskeyTaskDescription, kPasskeyFiller, kPasskeyQuestion) is in
// recall_format.h, shared with the built-in model's training data.

// The needle line for `key`: "The pass key is K. Remember it. K is the pass key."
std::string PasskeyNeedle(std::string_view key);

// The shortest prompt the template allows for a key of `key_digits` digits (no filler), bytes.
int64_t MinimumPasskeyLength(int key_digits);

// One prompt of exactly `target_length` bytes: the filler (kPasskeyFiller repeated with single
// spaces, cut at a byte count, as the original scripts do) is split so that round(depth × filler
// bytes) of it precede the needle. Throws InvalidSetting when the target is below
// MinimumPasskeyLength or depth is outside [0, 1] or the key is not decimal digits.
PasskeyItem BuildPasskeyItem(int64_t target_length, double depth, const std::string& key);

// The whole seeded set. Throws InvalidSetting on bad settings.
std::vector<PasskeyItem> GeneratePasskeyItems(const PasskeySettings& settings);

// The first maximal run of ASCII digits in `text` ("The pass key is 12345." → "12345";
// "123 45" → "123"); nullopt when there is none.
std::optional<std::string> FirstInteger(std::string_view text);

// The key an answer gives, robust to a chat model's prose: the first integer after the last
// "pass key is" / "passkey is" (any case) when the answer says so ("Sure! I found 1 key. The
// pass key is 12345." → "12345"), else FirstInteger(output); nullopt when there is no digit.
std::optional<std::string> PasskeyAnswer(std::string_view output);

// True iff PasskeyAnswer(output) equals `key` as an integer (leading zeros ignored).
bool PasskeyCorrect(std::string_view output, std::string_view key);

// A user's passkey set (`kvgate check passkey --dataset FILE`), JSONL, one item a line:
// {"id": string or integer, "prompt": string, "key": digits (string or integer), "subset"?:
// string}. The prompt is sent as given and scored like a generated item (PasskeyCorrect).
// Throws DatasetError "FILE:LINE: field: what is wrong" on the first bad line, on a repeated
// id and on an empty file.
std::vector<PasskeyItem> ParsePasskeyJsonl(std::istream& input, const std::string& source);
std::vector<PasskeyItem> LoadPasskeyJsonl(const std::filesystem::path& path);

}  // namespace kvgate::checks
