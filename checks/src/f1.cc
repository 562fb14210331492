#include "kvgate/checks/f1.h"

#include <algorithm>
#include <map>

namespace kvgate::checks {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Python's string.punctuation: the 32 ASCII punctuation characters.
bool IsAsciiPunctuation(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
         (c >= '{' && c <= '~');
}

std::vector<std::string> NormalTokens(std::string_view text) {
  std::vector<std::string> tokens;
  std::string current;
  auto flush = [&] {
    // After punctuation is gone, the script's \b(a|an|the)\b matches exactly whole tokens.
    if (!current.empty() && current != "a" && current != "an" && current != "the") {
      tokens.push_back(current);
    }
    current.clear();
  };
  for (char c : text) {
    if (IsAsciiSpace(c)) {
      flush();
    } else if (!IsAsciiPunctuation(c)) {
      current.push_back((c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c);
    }
  }
  flush();
  return tokens;
}

}  // namespace

std::string NormalizeAnswer(std::string_view text) {
  std::string out;
  for (const std::string& token : NormalTokens(text)) {
    if (!out.empty()) out.push_back(' ');
    out += token;
  }
  return out;
}

double TokenF1(std::string_view prediction, std::string_view gold) {
  std::vector<std::string> pred_tokens = NormalTokens(prediction);
  std::vector<std::string> gold_tokens = NormalTokens(gold);
  std::map<std::string, int> gold_counts;
  for (const std::string& token : gold_tokens) ++gold_counts[token];
  int same = 0;
  for (const std::string& token : pred_tokens) {
    auto it = gold_counts.find(token);
    if (it != gold_counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  double precision = static_cast<double>(same) / static_cast<double>(pred_tokens.size());
  double recall = static_cast<double>(same) / static_cast<double>(gold_tokens.size());
  return 2.0 * precision * recall / (precision + recall);
}

double MaxTokenF1(std::string_view prediction, const std::vector<std::string>& golds) {
  double best = 0.0;
  for (const std::string& gold : golds) best = std::max(best, TokenF1(prediction, gold));
  return best;
}

bool ExactMatch(std::string_view prediction, const std::vector<std::string>& golds) {
  std::string normal = NormalizeAnswer(prediction);
  return std::any_of(golds.begin(), golds.end(),
                     [&](const std::string& gold) { return NormalizeAnswer(gold) == normal; });
}

double DatasetScore(const std::vector<double>& item_f1) {
  if (item_f1.empty()) return 0.0;
  double sum = 0.0;
  for (double f1 : item_f1) sum += f1;
  return 100.0 * sum / static_cast<double>(item_f1.size());
}

}  // namespace kvgate::checks
