// Template source: dvlab-research/LongLoRA passkey_retrivial.py (generate_prompt_landmark), itself
// after epfml/landmark-attention llama/run_test.py (generate_prompt): lines [task description,
// filler prefix, needle, filler suffix, question] joined by "\n"; the filler is the five-sentence
// garbage string repeated with " " between copies and cut at a character (here: byte) count, the
// prefix and the suffix both taken from its start; the answer is the first \d+ of the output.
// Instead of a random prefix length we place the needle at the requested depth, and we size the
// filler so the whole prompt has exactly the requested byte length. The built-in model's training
// text (readkv/model recall_data.h) uses this same layout.
#include "kvgate/checks/passkey.h"

#include <cctype>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kvgate/checks/errors.h"
#include "kvgate/stats/random.h"

namespace kvgate::checks {
namespace {

// The first `n` bytes of kPasskeyFiller repeated endlessly with single spaces between copies.
std::string FillerBytes(int64_t n) {
  std::string out;
  out.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(out.size()) < n) {
    if (!out.empty()) out.push_back(' ');
    out += kPasskeyFiller;
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

// A sanity bound against typos such as an extra zero or two (16 MiB of prompt).
constexpr int64_t kMaxPromptBytes = int64_t{1} << 24;

int64_t BeforeCount(int64_t total, double depth) {
  return static_cast<int64_t>(std::llround(depth * static_cast<double>(total)));
}

std::string PercentLabel(double depth) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", std::round(depth * 1000.0) / 10.0);
  return std::string(buffer) + "%";
}

int64_t FixedBytes(size_t key_size) {
  // Four '\n' separators join the five lines.
  return static_cast<int64_t>(kPasskeyTaskDescription.size() + kPasskeyQuestion.size() +
                              PasskeyNeedle(std::string(key_size, '1')).size()) +
         4;
}

}  // namespace

std::string PasskeyNeedle(std::string_view key) {
  std::string k(key);
  return "The pass key is " + k + ". Remember it. " + k + " is the pass key.";
}

int64_t MinimumPasskeyLength(int key_digits) { return FixedBytes(static_cast<size_t>(key_digits)); }

void ValidatePasskeySettings(const PasskeySettings& s) {
  if (s.items < 1 || s.items > 1000000) {
    throw InvalidSetting("items", "must be in [1, 1000000], got " + std::to_string(s.items));
  }
  if (s.key_digits < 1 || s.key_digits > 18) {
    throw InvalidSetting("key_digits", "must be in [1, 18], got " + std::to_string(s.key_digits));
  }
  if (s.max_tokens < 1) {
    throw InvalidSetting("max_tokens", "must be ≥ 1, got " + std::to_string(s.max_tokens));
  }
  if (s.lengths.empty()) throw InvalidSetting("lengths", "at least one length is needed");
  int64_t minimum = MinimumPasskeyLength(s.key_digits);
  for (int64_t length : s.lengths) {
    if (length > kMaxPromptBytes) {
      throw InvalidSetting("lengths", std::to_string(length) + " bytes is above the limit of " +
                                          std::to_string(kMaxPromptBytes));
    }
    if (length < minimum) {
      throw InvalidSetting("lengths", std::to_string(length) +
                                          " bytes is shorter than the template's fixed text (" +
                                          std::to_string(minimum) + " bytes)");
    }
  }
  if (s.depths.empty()) throw InvalidSetting("depths", "at least one depth is needed");
  for (double depth : s.depths) {
    if (!(depth >= 0.0 && depth <= 1.0)) {
      throw InvalidSetting("depths", "each depth must be in [0, 1], got " + std::to_string(depth));
    }
  }
}

PasskeyItem BuildPasskeyItem(int64_t target_length, double depth, const std::string& key) {
  if (!(depth >= 0.0 && depth <= 1.0)) {
    throw InvalidSetting("depth", "must be in [0, 1], got " + std::to_string(depth));
  }
  if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos) {
    throw InvalidSetting("key", "must be decimal digits, got '" + key + "'");
  }
  const int64_t fixed = FixedBytes(key.size());
  if (target_length > kMaxPromptBytes) {
    throw InvalidSetting("length", std::to_string(target_length) + " bytes is above the limit of " +
                                       std::to_string(kMaxPromptBytes));
  }
  if (target_length < fixed) {
    throw InvalidSetting("length", std::to_string(target_length) +
                                       " bytes is shorter than the template's fixed text (" +
                                       std::to_string(fixed) + " bytes)");
  }
  const int64_t filler = target_length - fixed;

  PasskeyItem item;
  item.target_length = target_length;
  item.depth = depth;
  item.key = key;
  item.filler_before = BeforeCount(filler, depth);
  item.filler_after = filler - item.filler_before;
  std::string before = FillerBytes(item.filler_before);
  std::string after = FillerBytes(item.filler_after);
  item.prompt.reserve(static_cast<size_t>(target_length));
  item.prompt += kPasskeyTaskDescription;
  item.prompt += '\n';
  item.prompt += before;
  item.prompt += '\n';
  item.needle_offset = static_cast<int64_t>(item.prompt.size());
  item.prompt += PasskeyNeedle(key);
  item.prompt += '\n';
  item.prompt += after;
  item.prompt += '\n';
  item.prompt += kPasskeyQuestion;
  item.subsets = {"length=" + std::to_string(target_length), "depth=" + PercentLabel(depth)};
  return item;
}

std::vector<PasskeyItem> GeneratePasskeyItems(const PasskeySettings& settings) {
  ValidatePasskeySettings(settings);
  uint64_t low = 1;
  for (int i = 1; i < settings.key_digits; ++i) low *= 10;
  const uint64_t span = low * 10 - low;  // keys in [low, 10·low - 1]
  // Domain-separated from every other seeded stream of the suite (the QA set, load schedules).
  stats::SeededRng rng(settings.seed ^ 0x9a55'6b65'7900'0001ULL);
  const size_t depths = settings.depths.size();
  const size_t cells = settings.lengths.size() * depths;
  std::vector<PasskeyItem> items;
  items.reserve(static_cast<size_t>(settings.items));
  for (int i = 0; i < settings.items; ++i) {
    size_t cell = static_cast<size_t>(i) % cells;
    std::string key = std::to_string(low + rng.UniformIndex(span));
    PasskeyItem item =
        BuildPasskeyItem(settings.lengths[cell / depths], settings.depths[cell % depths], key);
    item.id = "passkey-" + std::to_string(i);
    items.push_back(std::move(item));
  }
  return items;
}

std::optional<std::string> FirstInteger(std::string_view text) {
  size_t begin = text.find_first_of("0123456789");
  if (begin == std::string_view::npos) return std::nullopt;
  size_t end = text.find_first_not_of("0123456789", begin);
  return std::string(text.substr(begin, end == std::string_view::npos ? end : end - begin));
}

std::optional<std::string> PasskeyAnswer(std::string_view output) {
  std::string lower(output);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t after = std::string::npos;
  for (std::string_view phrase : {"pass key is", "passkey is"}) {
    const size_t at = lower.rfind(phrase);
    if (at != std::string::npos && (after == std::string::npos || at + phrase.size() > after)) {
      after = at + phrase.size();
    }
  }
  if (after != std::string::npos) {
    if (auto key = FirstInteger(output.substr(after))) return key;
  }
  return FirstInteger(output);
}

bool PasskeyCorrect(std::string_view output, std::string_view key) {
  std::optional<std::string> found = PasskeyAnswer(output);
  if (!found) return false;
  auto strip = [](std::string_view digits) {
    size_t nonzero = digits.find_first_not_of('0');
    return nonzero == std::string_view::npos ? std::string_view("0") : digits.substr(nonzero);
  };
  return strip(*found) == strip(key);
}

}  // namespace kvgate::checks
