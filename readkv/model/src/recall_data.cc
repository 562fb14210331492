#include "readkv/model/recall_data.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>
#include <stdexcept>

namespace readkv::model {
namespace {

using kvgate::stats::DeriveSeed;
using kvgate::stats::SplitMixRng;
// The text of both prompt kinds is the checks' own (recall_format.h): one copy, two readers.
using kvgate::checks::kCities;
using kvgate::checks::kColors;
using kvgate::checks::kJobs;
using kvgate::checks::kNames;
using kvgate::checks::kProse;
using kvgate::checks::kQaTask;

// Mixed filler prose for the multi-key and QA documents (the passkey template has its own).
size_t Pick(SplitMixRng& rng, size_t n) {
  return static_cast<size_t>(rng.Uniform01() * static_cast<double>(n)) % n;
}
int UniformInt(SplitMixRng& rng, int lo, int hi) {  // inclusive
  return lo + static_cast<int>(Pick(rng, static_cast<size_t>(hi - lo + 1)));
}

// Training keys: mostly five digits (as LongLoRA's 1..50000 mostly are), some 1-7 digits, so the
// model copies any short digit string.
std::string TrainingKey(SplitMixRng& rng) {
  const double u = rng.Uniform01();
  int digits = 5;
  if (u < 0.3) digits = UniformInt(rng, 1, 7);
  std::string key;
  key.push_back(static_cast<char>('1' + Pick(rng, 9)));
  for (int i = 1; i < digits; ++i) key.push_back(static_cast<char>('0' + Pick(rng, 10)));
  return key;
}

// The landmark filler stream (the sentence repeated, joined by single spaces), cut to n bytes.
std::string FillerBytes(size_t n) {
  std::string out;
  out.reserve(n + kPasskeyFiller.size());
  while (out.size() < n) {
    if (!out.empty()) out.push_back(' ');
    out.append(kPasskeyFiller);
  }
  out.resize(n);
  return out;
}

std::string JoinPasskey(std::string_view key, size_t garbage, double depth, std::string_view sep) {
  const auto prefix = static_cast<size_t>(std::llround(depth * static_cast<double>(garbage)));
  std::string out;
  out.append(kPasskeyTask);
  out.append(sep);
  out.append(FillerBytes(prefix));
  out.append(sep);
  out.append(PasskeyNeedle(key));
  out.append(sep);
  out.append(FillerBytes(garbage - prefix));
  out.append(sep);
  out.append(kPasskeyQuestion);
  return out;
}

size_t PasskeyFixedBytes(std::string_view key, size_t sep) {
  return kPasskeyTask.size() + PasskeyNeedle(key).size() + kPasskeyQuestion.size() + 4 * sep;
}

struct Fact {
  std::string statement;
  std::string question;  // QA form
  std::string answer;
  std::string name;
};

// A pronounceable made-up word ("Tovaril", "kemuso"): an answer no prior can guess.
std::string PseudoWord(SplitMixRng& rng, bool capital) {
  static constexpr std::string_view kOnsets[] = {"b", "d", "f", "g", "k", "l", "m", "n",
                                                 "p", "r", "s", "t", "v", "z", "br", "st"};
  static constexpr std::string_view kVowels[] = {"a", "e", "i", "o", "u", "ai", "ou"};
  std::string w;
  const int syllables = UniformInt(rng, 2, 3);
  for (int i = 0; i < syllables; ++i) {
    w += kOnsets[Pick(rng, std::size(kOnsets))];
    w += kVowels[Pick(rng, std::size(kVowels))];
  }
  if (rng.Uniform01() < 0.5) w += kOnsets[Pick(rng, 13)];
  if (capital) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
  return w;
}

Fact MakeFact(SplitMixRng& rng, std::string_view name, int relation, double pseudo_words = 0.0) {
  // Drawn only when enabled, so the default corpus stays byte-identical to stage 1.
  const bool pseudo = pseudo_words > 0.0 && relation <= 2 && rng.Uniform01() < pseudo_words;
  Fact f;
  f.name = std::string(name);
  const std::string n(name);
  switch (relation) {
    case 0: {
      f.answer = pseudo ? PseudoWord(rng, true) : std::string(kCities[Pick(rng, kCities.size())]);
      f.statement = n + " lives in " + f.answer + ".";
      f.question = "Where does " + n + " live?";
      break;
    }
    case 1: {
      f.answer = pseudo ? PseudoWord(rng, false) : std::string(kColors[Pick(rng, kColors.size())]);
      f.statement = n + "'s favorite color is " + f.answer + ".";
      f.question = "What is " + n + "'s favorite color?";
      break;
    }
    case 2: {
      f.answer = pseudo ? PseudoWord(rng, false) : std::string(kJobs[Pick(rng, kJobs.size())]);
      f.statement = "The job of " + n + " is " + f.answer + ".";
      f.question = "What is the job of " + n + "?";
      break;
    }
    case 3: {
      f.answer = std::to_string(UniformInt(rng, 1900, 2024));
      f.statement = n + " was born in " + f.answer + ".";
      f.question = "In which year was " + n + " born?";
      break;
    }
    default: {
      f.answer = TrainingKey(rng);
      f.statement = "The pass key of " + n + " is " + f.answer + ".";
      f.question = "What is the pass key of " + n + "?";
      break;
    }
  }
  return f;
}

// Distinct names for a document.
std::vector<std::string_view> PickNames(SplitMixRng& rng, int count) {
  std::vector<size_t> idx(kNames.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  for (int i = 0; i < count; ++i) {
    std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(i) + Pick(rng, idx.size() - i)]);
  }
  std::vector<std::string_view> out;
  for (int i = 0; i < count; ++i) out.push_back(kNames[idx[static_cast<size_t>(i)]]);
  return out;
}

// Filler sentences totalling about `budget` bytes (joined by spaces), then `facts` inserted at
// sentence slots: facts[i] at relative position depths[i]. Returns the joined text.
std::string WeaveFacts(SplitMixRng& rng, size_t budget, const std::vector<std::string>& facts,
                       const std::vector<double>& depths, bool landmark_filler) {
  std::vector<std::string> sentences;
  size_t used = 0;
  while (true) {
    std::string_view s =
        landmark_filler ? kPasskeyFiller : kProse[Pick(rng, kProse.size())];
    if (used + s.size() + 1 > budget) break;
    sentences.emplace_back(s);
    used += s.size() + 1;
  }
  // Insert from the deepest slot first so earlier indices stay valid.
  std::vector<std::pair<size_t, size_t>> slots;  // (slot, fact index)
  for (size_t i = 0; i < facts.size(); ++i) {
    const auto slot = static_cast<size_t>(std::llround(depths[i] * sentences.size()));
    slots.emplace_back(std::min(slot, sentences.size()), i);
  }
  std::stable_sort(slots.begin(), slots.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [slot, i] : slots) {
    sentences.insert(sentences.begin() + static_cast<std::ptrdiff_t>(slot), facts[i]);
  }
  std::string out;
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (i > 0) out.push_back(' ');
    out += sentences[i];
  }
  return out;
}

// A QA context with `facts` (the first is the asked one, placed at `depth`; the others at
// random depths) whose prompt (context + question block) is about `length` bytes.
std::string QaPrompt(SplitMixRng& rng, const std::vector<Fact>& facts, double depth, int length,
                     const std::string& question_block) {
  std::vector<std::string> statements;
  std::vector<double> depths;
  size_t fact_bytes = 0;
  for (size_t i = 0; i < facts.size(); ++i) {
    statements.push_back(facts[i].statement);
    depths.push_back(i == 0 ? depth : rng.Uniform01());
    fact_bytes += facts[i].statement.size() + 1;
  }
  const size_t fixed = kQaTask.size() + 1 + fact_bytes + question_block.size();
  const size_t budget = static_cast<size_t>(length) > fixed ? length - fixed : 0;
  const bool landmark = rng.Uniform01() < 0.25;
  std::string out(kQaTask);
  out.push_back('\n');
  out += WeaveFacts(rng, budget, statements, depths, landmark);
  out += question_block;
  return out;
}

std::string QaQuestion(const Fact& f) { return "Question: " + f.question + "\nAnswer:"; }

}  // namespace

std::string PasskeyNeedle(std::string_view key) {
  std::string k(key);
  return "The pass key is " + k + ". Remember it. " + k + " is the pass key.";
}

std::string PasskeyPrompt(std::string_view key, int length_bytes, double depth) {
  if (!(depth >= 0.0 && depth <= 1.0)) throw std::invalid_argument("depth: must be in [0, 1]");
  const size_t fixed = PasskeyFixedBytes(key, 1);
  const size_t garbage = length_bytes > 0 && static_cast<size_t>(length_bytes) > fixed
                             ? static_cast<size_t>(length_bytes) - fixed
                             : 0;
  return JoinPasskey(key, garbage, depth, "\n");
}

std::vector<RecallItem> MakePasskeySet(uint64_t seed, std::span<const int> lengths,
                                       std::span<const double> depths, int per_cell) {
  SplitMixRng rng(DeriveSeed(seed, 0x9a55));
  std::vector<RecallItem> items;
  for (int length : lengths) {
    for (double depth : depths) {
      for (int k = 0; k < per_cell; ++k) {
        const std::string key = std::to_string(UniformInt(rng, 1, 99999));
        RecallItem item;
        item.kind = "passkey";
        item.prompt = PasskeyPrompt(key, length, depth);
        item.answers = {key};
        item.length_bytes = length;
        item.depth = depth;
        items.push_back(std::move(item));
      }
    }
  }
  return items;
}

std::vector<RecallItem> MakeQaSet(uint64_t seed, std::span<const int> lengths,
                                  std::span<const double> depths, int per_cell) {
  SplitMixRng rng(DeriveSeed(seed, 0x0a0a));
  std::vector<RecallItem> items;
  for (int length : lengths) {
    for (double depth : depths) {
      for (int k = 0; k < per_cell; ++k) {
        const int n_facts = UniformInt(rng, 1, 8);
        const auto names = PickNames(rng, n_facts);
        std::vector<Fact> facts;
        for (int i = 0; i < n_facts; ++i) {
          facts.push_back(MakeFact(rng, names[static_cast<size_t>(i)], UniformInt(rng, 0, 4)));
        }
        RecallItem item;
        item.kind = "qa";
        item.prompt = QaPrompt(rng, facts, depth, length, "\n\n" + QaQuestion(facts[0]));
        item.answers = {facts[0].answer};
        item.length_bytes = length;
        item.depth = depth;
        items.push_back(std::move(item));
      }
    }
  }
  return items;
}

std::string RecallCorpus::Next(int max_bytes) {
  max_bytes = std::max(max_bytes, 256);
  const int target = max_bytes - static_cast<int>(rng_.Uniform01() * 0.4 * max_bytes);
  const double kind = rng_.Uniform01();
  if (kind < mix_.passkey) {
    // The exact product template (mostly "\n"-joined; a few separator variants for robustness).
    const std::string key = TrainingKey(rng_);
    const double sep_kind = rng_.Uniform01();
    const std::string_view sep = sep_kind < 0.85 ? "\n" : (sep_kind < 0.93 ? " " : "\n\n");
    const std::string answer = " " + key + ".";
    const size_t fixed = PasskeyFixedBytes(key, sep.size()) + answer.size();
    const size_t garbage = static_cast<size_t>(target) > fixed ? target - fixed : 0;
    double depth = rng_.Uniform01();
    // An edge key: the same draw folded into the first or last 2% (no extra draw when off, so
    // a corpus without edges is the one it always was).
    if (mix_.edge_depths > 0.0 && rng_.Uniform01() < mix_.edge_depths) {
      depth = depth < 0.5 ? depth * 0.04 : 1.0 - (1.0 - depth) * 0.04;
    }
    return JoinPasskey(key, garbage, depth, sep) + answer;
  }
  if (kind < mix_.passkey + mix_.multikey) {
    // Multi-key recall (the notes' dense retrieval supervision).
    const int n = UniformInt(rng_, 2, 8);
    const auto names = PickNames(rng_, n);
    std::vector<Fact> facts;
    std::vector<std::string> statements;
    std::vector<double> depths;
    size_t fact_bytes = 0;
    for (int i = 0; i < n; ++i) {
      facts.push_back(MakeFact(rng_, names[static_cast<size_t>(i)], 4));
      statements.push_back(facts.back().statement);
      depths.push_back(rng_.Uniform01());
      fact_bytes += statements.back().size() + 1;
    }
    std::vector<size_t> order(facts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[Pick(rng_, i)]);
    std::string questions;
    for (size_t i : order) {
      const Fact& f = facts[i];
      questions += "\nWhat is the pass key of " + f.name + "? The pass key of " + f.name +
                   " is " + f.answer + ".";
    }
    const size_t fixed = kPasskeyTask.size() + 1 + fact_bytes + questions.size();
    const size_t budget = static_cast<size_t>(target) > fixed ? target - fixed : 0;
    std::string out(kPasskeyTask);
    out.push_back('\n');
    out += WeaveFacts(rng_, budget, statements, depths, rng_.Uniform01() < 0.5);
    out += questions;
    return out;
  }
  // QA documents.
  const int n = UniformInt(rng_, 1, 8);
  const auto names = PickNames(rng_, n);
  std::vector<Fact> facts;
  for (int i = 0; i < n; ++i) {
    facts.push_back(MakeFact(rng_, names[static_cast<size_t>(i)], UniformInt(rng_, 0, 4),
                             mix_.pseudo_words));
  }
  std::string block;
  if (rng_.Uniform01() < 1.0 - mix_.qa_all_questions) {
    block = "\n\n" + QaQuestion(facts[0]) + " " + facts[0].answer;
  } else {
    std::vector<size_t> order(facts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[Pick(rng_, i)]);
    block = "\n";
    for (size_t i : order) block += "\n" + QaQuestion(facts[i]) + " " + facts[i].answer;
  }
  return QaPrompt(rng_, facts, rng_.Uniform01(), target, block);
}

std::optional<std::string> FirstInteger(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && !std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == text.size()) return std::nullopt;
  size_t j = i;
  while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
  return std::string(text.substr(i, j - i));
}

std::string NormalizeAnswer(std::string_view text) {
  std::string lowered;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::ispunct(u)) continue;
    lowered.push_back(static_cast<char>(std::tolower(u)));
  }
  std::string out;
  size_t i = 0;
  while (i < lowered.size()) {
    while (i < lowered.size() && std::isspace(static_cast<unsigned char>(lowered[i]))) ++i;
    size_t j = i;
    while (j < lowered.size() && !std::isspace(static_cast<unsigned char>(lowered[j]))) ++j;
    if (j > i) {
      const std::string word = lowered.substr(i, j - i);
      if (word != "a" && word != "an" && word != "the") {
        if (!out.empty()) out.push_back(' ');
        out += word;
      }
    }
    i = j;
  }
  return out;
}

namespace {
std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(' ', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) words.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return words;
}
}  // namespace

double TokenF1(std::string_view prediction, std::string_view gold) {
  const auto p = Words(NormalizeAnswer(prediction));
  const auto g = Words(NormalizeAnswer(gold));
  if (p.empty() || g.empty()) return p.empty() && g.empty() ? 1.0 : 0.0;
  std::map<std::string, int> counts;
  for (const auto& w : g) ++counts[w];
  int common = 0;
  for (const auto& w : p) {
    auto it = counts.find(w);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  const double precision = static_cast<double>(common) / static_cast<double>(p.size());
  const double recall = static_cast<double>(common) / static_cast<double>(g.size());
  return 2.0 * precision * recall / (precision + recall);
}

double MaxTokenF1(std::string_view prediction, std::span<const std::string> golds) {
  double best = 0.0;
  for (const auto& g : golds) best = std::max(best, TokenF1(prediction, g));
  return best;
}

}  // namespace readkv::model
