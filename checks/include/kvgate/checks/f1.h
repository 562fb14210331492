// QA scoring as SQuAD v1.1 defines it (the official evaluate-v1.1.py; docs/definitions.md,
// "QA F1"): normalise = lower-case, remove ASCII punctuation, remove the articles a/an/the,
// collapse white space; token-multiset F1 between prediction and one gold answer; the item
// score is the maximum over its gold answers; a dataset score is 100 × the mean.
//
// Text is treated as bytes: lower-casing and white space are ASCII-only (bytes ≥ 0x80 pass
// through unchanged), where the Python script is Unicode-aware. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvgate::checks {

// The SQuAD normal form: "The  Cat!" → "cat".
std::string NormalizeAnswer(std::string_view text);

// Token F1 in [0, 1] between the normal forms. 0 when no token is shared, including when either
// side normalises to nothing (as the v1.1 script does).
double TokenF1(std::string_view prediction, std::string_view gold);

// Max TokenF1 over `golds`, in [0, 1]; 0 when `golds` is empty.
double MaxTokenF1(std::string_view prediction, const std::vector<std::string>& golds);

// True when the prediction's normal form equals some gold's normal form (SQuAD exact match).
bool ExactMatch(std::string_view prediction, const std::vector<std::string>& golds);

// 100 × mean of per-item F1 values given in [0, 1]; 0 for an empty list.
double DatasetScore(const std::vector<double>& item_f1);

}  // namespace kvgate::checks
