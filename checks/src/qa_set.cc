// The generated QA set is written in the forms the built-in model is trained on
// (readkv/model/src/recall_data.cc: MakeFact, WeaveFacts, QaPrompt): the same task line, fact
// templates, vocabularies, filler prose and layout. The text itself (task line, vocabularies,
// prose) is one copy in recall_format.h that both sides read; the fact templates and layout are
// pinned equal by readkv/model's suite_format_test. checks/ never links readkv/ (HTTP is the only
// door): the dependency runs the other way, the training data follows the checks' format.
//
// Held out: items are drawn from kvgate::stats::SeededRng (mt19937_64) under a domain tag, while
// the training corpus and the trainer's own evaluation sets draw from stats::SplitMixRng streams.
#include "kvgate/checks/qa_set.h"

#include <cctype>

#include <algorithm>
#include <array>
#include <cmath>

#include "kvgate/checks/errors.h"
#include "kvgate/checks/recall_format.h"
#include "kvgate/stats/random.h"

namespace kvgate::checks {
namespace {

constexpr int64_t kMinLength = 512;
constexpr int64_t kMaxLength = int64_t{1} << 24;

struct Fact {
  std::string statement;
  std::string question;
  std::string answer;
};

size_t Pick(stats::SeededRng& rng, size_t n) { return static_cast<size_t>(rng.UniformIndex(n)); }
int UniformInt(stats::SeededRng& rng, int lo, int hi) {  // inclusive
  return static_cast<int>(rng.UniformInt(lo, hi));
}

// Mostly five digits, some 1–7, as the training keys.
std::string Key(stats::SeededRng& rng) {
  int digits = rng.Uniform01() < 0.3 ? UniformInt(rng, 1, 7) : 5;
  std::string key(1, static_cast<char>('1' + Pick(rng, 9)));
  for (int i = 1; i < digits; ++i) key.push_back(static_cast<char>('0' + Pick(rng, 10)));
  return key;
}

Fact MakeFact(stats::SeededRng& rng, std::string_view name, int relation) {
  const std::string n(name);
  Fact f;
  switch (relation) {
    case 0:
      f.answer = kCities[Pick(rng, kCities.size())];
      f.statement = n + " lives in " + f.answer + ".";
      f.question = "Where does " + n + " live?";
      break;
    case 1:
      f.answer = kColors[Pick(rng, kColors.size())];
      f.statement = n + "'s favorite color is " + f.answer + ".";
      f.question = "What is " + n + "'s favorite color?";
      break;
    case 2:
      f.answer = kJobs[Pick(rng, kJobs.size())];
      f.statement = "The job of " + n + " is " + f.answer + ".";
      f.question = "What is the job of " + n + "?";
      break;
    case 3:
      f.answer = std::to_string(UniformInt(rng, 1900, 2024));
      f.statement = n + " was born in " + f.answer + ".";
      f.question = "In which year was " + n + " born?";
      break;
    default:
      f.answer = Key(rng);
      f.statement = "The pass key of " + n + " is " + f.answer + ".";
      f.question = "What is the pass key of " + n + "?";
      break;
  }
  return f;
}

// Distinct names (a partial Fisher–Yates shuffle).
std::vector<std::string_view> PickNames(stats::SeededRng& rng, int count) {
  std::array<size_t, kNames.size()> index;
  for (size_t i = 0; i < index.size(); ++i) index[i] = i;
  std::vector<std::string_view> out;
  for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
    std::swap(index[i], index[i + Pick(rng, index.size() - i)]);
    out.push_back(kNames[index[i]]);
  }
  return out;
}

// Filler sentences of about `budget` bytes (each plus one joining space), with statements[i]
// inserted at sentence slot round(depths[i] × sentences), deepest first so slots stay valid.
std::string WeaveFacts(stats::SeededRng& rng, size_t budget,
                       const std::vector<std::string>& statements,
                       const std::vector<double>& depths, bool landmark_filler) {
  std::vector<std::string> sentences;
  size_t used = 0;
  while (true) {
    std::string_view s = landmark_filler ? kPasskeyFiller : kProse[Pick(rng, kProse.size())];
    if (used + s.size() + 1 > budget) break;
    sentences.emplace_back(s);
    used += s.size() + 1;
  }
  std::vector<std::pair<size_t, size_t>> slots;  // (slot, statement index)
  for (size_t i = 0; i < statements.size(); ++i) {
    auto slot =
        static_cast<size_t>(std::llround(depths[i] * static_cast<double>(sentences.size())));
    slots.emplace_back(std::min(slot, sentences.size()), i);
  }
  std::stable_sort(slots.begin(), slots.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [slot, i] : slots) {
    sentences.insert(sentences.begin() + static_cast<std::ptrdiff_t>(slot), statements[i]);
  }
  std::string out;
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (i > 0) out.push_back(' ');
    out += sentences[i];
  }
  return out;
}

std::string QuestionBlock(std::string_view question) {
  return "\n\nQuestion: " + std::string(question) + "\nAnswer:";
}

std::string DepthLabel(int bucket, int buckets) {
  auto percent = [buckets](int b) { return std::to_string((200 * b + buckets) / (2 * buckets)); };
  return "depth=" + percent(bucket) + "-" + percent(bucket + 1) + "%";
}

}  // namespace

void ValidateQaSettings(const QaSetSettings& s) {
  if (s.items < 1 || s.items > 1000000) {
    throw InvalidSetting("items", "must be in [1, 1000000], got " + std::to_string(s.items));
  }
  if (s.lengths.empty()) throw InvalidSetting("lengths", "at least one length is needed");
  for (int64_t length : s.lengths) {
    if (length < kMinLength || length > kMaxLength) {
      throw InvalidSetting("lengths", "each length must be in [" + std::to_string(kMinLength) +
                                          ", " + std::to_string(kMaxLength) + "] bytes, got " +
                                          std::to_string(length));
    }
  }
  if (s.depth_buckets < 1 || s.depth_buckets > 100) {
    throw InvalidSetting("depth_buckets",
                         "must be in [1, 100], got " + std::to_string(s.depth_buckets));
  }
  if (s.min_facts < 1 || s.max_facts > 8 || s.min_facts > s.max_facts) {
    throw InvalidSetting("facts", "need 1 ≤ min_facts ≤ max_facts ≤ 8, got " +
                                      std::to_string(s.min_facts) + ".." +
                                      std::to_string(s.max_facts));
  }
  if (s.max_tokens < 1) {
    throw InvalidSetting("max_tokens", "must be ≥ 1, got " + std::to_string(s.max_tokens));
  }
}

std::vector<QaItem> GenerateQaSet(const QaSetSettings& settings) {
  ValidateQaSettings(settings);
  stats::SeededRng rng(settings.seed ^ 0x6b76'6761'7465'5141ULL);  // "kvgateQA"
  const size_t buckets = static_cast<size_t>(settings.depth_buckets);
  const size_t cells = settings.lengths.size() * buckets;
  std::vector<QaItem> items;
  items.reserve(static_cast<size_t>(settings.items));
  for (int i = 0; i < settings.items; ++i) {
    const size_t cell = static_cast<size_t>(i) % cells;
    const int64_t length = settings.lengths[cell / buckets];
    const int bucket = static_cast<int>(cell % buckets);
    const double depth = (bucket + rng.Uniform01()) / static_cast<double>(buckets);

    const int n_facts = UniformInt(rng, settings.min_facts, settings.max_facts);
    std::vector<std::string_view> names = PickNames(rng, n_facts);
    std::vector<Fact> facts;
    for (int f = 0; f < n_facts; ++f) {
      facts.push_back(MakeFact(rng, names[static_cast<size_t>(f)], UniformInt(rng, 0, 4)));
    }
    // facts[0] is the one asked about, at the item's depth; the others anywhere.
    std::vector<std::string> statements;
    std::vector<double> depths;
    size_t fact_bytes = 0;
    for (size_t f = 0; f < facts.size(); ++f) {
      statements.push_back(facts[f].statement);
      depths.push_back(f == 0 ? depth : rng.Uniform01());
      fact_bytes += facts[f].statement.size() + 1;
    }
    const size_t fixed = kQaTask.size() + 1 + fact_bytes + QuestionBlock(facts[0].question).size();
    const size_t budget = static_cast<size_t>(length) > fixed ? length - fixed : 0;
    const bool landmark = rng.Uniform01() < 0.25;

    QaItem item;
    item.id = "qa-" + std::to_string(i);
    item.context =
        std::string(kQaTask) + "\n" + WeaveFacts(rng, budget, statements, depths, landmark);
    item.question = facts[0].question;
    item.answers = {facts[0].answer};
    item.subsets = {"length=" + std::to_string(length), DepthLabel(bucket, settings.depth_buckets)};
    items.push_back(std::move(item));
  }
  return items;
}

std::string QaPrompt(const QaItem& item) { return item.context + QuestionBlock(item.question); }

std::string QaPrediction(std::string_view completion) {
  completion = completion.substr(0, completion.find('\n'));
  const char* kSpace = " \t\r\f\v";
  size_t begin = completion.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  size_t end = completion.find_last_not_of(kSpace);
  completion = completion.substr(begin, end - begin + 1);
  // A chat model may echo the prompt's "Answer:" before the answer.
  constexpr std::string_view kAnswer = "answer:";
  if (completion.size() > kAnswer.size()) {
    bool echoed = true;
    for (size_t i = 0; i < kAnswer.size(); ++i) {
      echoed &= std::tolower(static_cast<unsigned char>(completion[i])) == kAnswer[i];
    }
    if (echoed) return QaPrediction(completion.substr(kAnswer.size()));
  }
  return std::string(completion);
}

}  // namespace kvgate::checks
