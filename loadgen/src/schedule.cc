#include "kvgate/loadgen/schedule.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "kvgate/loadgen/datasets.h"
#include "kvgate/stats/random.h"

namespace kvgate::loadgen {
namespace {

// Stream ids for stats::DeriveSeed: one independent random stream per purpose.
constexpr uint64_t kArrivalStream = 1;
constexpr uint64_t kInputLengthStream = 2;
constexpr uint64_t kPromptTextStream = 3;
constexpr uint64_t kOutputLengthStream = 4;
constexpr uint64_t kPasskeyStream = 5;

// Arrival generation stops here even if the bounds would allow more: a typo such as
// --rate 1e9 --duration 60 must fail clearly, not exhaust memory.
constexpr int64_t kMaxArrivals = 50'000'000;

// Common English words; most are a single token in GPT-style and Llama BPE vocabularies, so the
// word count is a fair first guess of the token count (the server's `usage` is authoritative).
constexpr std::string_view kVocabulary[] = {
    "the",      "of",        "and",     "to",     "in",     "is",      "you",    "that",
    "it",       "he",        "was",     "for",    "on",     "are",     "as",     "with",
    "his",      "they",      "at",      "be",     "this",   "have",    "from",   "or",
    "one",      "had",       "by",      "word",   "but",    "not",     "what",   "all",
    "were",     "we",        "when",    "your",   "can",    "said",    "there",  "use",
    "an",       "each",      "which",   "she",    "do",     "how",     "their",  "if",
    "will",     "up",        "other",   "about",  "out",    "many",    "then",   "them",
    "these",    "so",        "some",    "her",    "would",  "make",    "like",   "him",
    "into",     "time",      "has",     "look",   "two",    "more",    "write",  "go",
    "see",      "number",    "no",      "way",    "could",  "people",  "my",     "than",
    "first",    "water",     "been",    "call",   "who",    "oil",     "its",    "now",
    "find",     "long",      "down",    "day",    "did",    "get",     "come",   "made",
    "may",      "part",      "over",    "new",    "sound",  "take",    "only",   "little",
    "work",     "know",      "place",   "year",   "live",   "me",      "back",   "give",
    "most",     "very",      "after",   "thing",  "our",    "just",    "name",   "good",
    "sentence", "man",       "think",   "say",    "great",  "where",   "help",   "through",
    "much",     "before",    "line",    "right",  "too",    "mean",    "old",    "any",
    "same",     "tell",      "boy",     "follow", "came",   "want",    "show",   "also",
    "around",   "form",      "three",   "small",  "set",    "put",     "end",    "does",
    "another",  "well",      "large",   "must",   "big",    "even",    "such",   "because",
    "turn",     "here",      "why",     "ask",    "went",   "men",     "read",   "need",
    "land",     "different", "home",    "us",     "move",   "try",     "kind",   "hand",
    "picture",  "again",     "change",  "off",    "play",   "spell",   "air",    "away",
    "animal",   "house",     "point",   "page",   "letter", "mother",  "answer", "found",
    "study",    "still",     "learn",   "should", "world",  "high",    "every",  "near",
    "add",      "food",      "between", "own",    "below",  "country", "plant",  "last",
    "school",   "father",    "keep",    "tree",   "never"};

constexpr std::string_view kPasskeyTask =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "them. I will quiz you about the important information there.";
constexpr std::string_view kPasskeyFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr std::string_view kPasskeyQuestion = "What is the pass key? The pass key is";

int CountWords(std::string_view text) {
  int words = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = c == ' ' || c == '\n' || c == '\t';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

std::string Needle(int64_t key) {
  std::string k = std::to_string(key);
  return "The pass key is " + k + ". Remember it. " + k + " is the pass key.";
}

std::string RepeatFiller(int count) {
  std::string out;
  out.reserve(static_cast<size_t>(count) * (kPasskeyFiller.size() + 1));
  for (int i = 0; i < count; ++i) {
    if (i > 0) out += ' ';
    out += kPasskeyFiller;
  }
  return out;
}

}  // namespace

std::vector<int64_t> GenerateArrivals(Arrival arrival, double rate_rps, double burstiness,
                                      uint64_t seed, int64_t max_count, double max_duration_s) {
  if (!(rate_rps > 0) || !std::isfinite(rate_rps)) {
    throw SettingsError("rate", "offered rate must be a finite number > 0 requests/s");
  }
  if (max_count <= 0 && !(max_duration_s > 0)) {
    throw SettingsError("requests", "an arrival schedule needs a count or a duration bound");
  }
  if (arrival == Arrival::kGamma && !(burstiness > 0)) {
    throw SettingsError("burstiness", "must be > 0 (1 = Poisson)");
  }
  int64_t limit = max_count > 0 ? max_count : kMaxArrivals;
  if (max_duration_s > 0) {
    double expected = rate_rps * max_duration_s;
    if (max_count <= 0 && expected > 0.9 * kMaxArrivals) {
      throw SettingsError("duration", "rate x duration asks for about " +
                                          std::to_string(static_cast<int64_t>(expected)) +
                                          " requests; the limit is " +
                                          std::to_string(kMaxArrivals));
    }
  }
  if (limit > kMaxArrivals) {
    throw SettingsError("requests", "at most " + std::to_string(kMaxArrivals) + " requests");
  }
  const double duration_ns = max_duration_s > 0 ? max_duration_s * 1e9 : 0.0;
  stats::SplitMixRng rng(stats::DeriveSeed(seed, kArrivalStream, 0));
  // vLLM's gamma parameterisation: shape = burstiness, scale = 1 / (rate * burstiness).
  const double gamma_scale = 1.0 / (rate_rps * burstiness);

  std::vector<int64_t> arrivals;
  double expected = duration_ns > 0 ? rate_rps * max_duration_s * 1.1 + 16 : 0.0;
  arrivals.reserve(static_cast<size_t>(
      duration_ns > 0 ? std::min(static_cast<double>(limit), expected) : limit));
  double t_s = 0.0;
  for (int64_t k = 0; k < limit; ++k) {
    if (k > 0) {
      switch (arrival) {
        case Arrival::kPoisson:
          t_s += rng.Exponential(rate_rps);
          break;
        case Arrival::kGamma:
          t_s += rng.Gamma(burstiness, gamma_scale);
          break;
        // k / rate rather than a running sum, so a long constant schedule does not drift.
        case Arrival::kConstant:
          t_s = static_cast<double>(k) / rate_rps;
          break;
      }
    }
    double t_ns = t_s * 1e9;
    if (duration_ns > 0 && t_ns >= duration_ns) break;
    arrivals.push_back(static_cast<int64_t>(std::llround(t_ns)));
  }
  return arrivals;
}

int SampleLength(const LengthDistribution& dist, uint64_t seed) {
  stats::SplitMixRng rng(seed);
  double value = dist.mean;
  switch (dist.kind) {
    case LengthDistributionKind::kConstant:
      break;
    case LengthDistributionKind::kUniform: {
      int lo = static_cast<int>(std::floor(dist.mean * (1.0 - dist.spread)));
      int hi = static_cast<int>(std::ceil(dist.mean * (1.0 + dist.spread)));
      value = static_cast<double>(rng.UniformInt(std::max(lo, 1), std::max(hi, 1)));
      break;
    }
    case LengthDistributionKind::kNormal:
      if (dist.spread > 0) {
        value = std::round(dist.mean + dist.spread * dist.mean * rng.Normal());
      }
      break;
    case LengthDistributionKind::kLogNormal:
      if (dist.spread > 0) {
        // exp(mu + sigma Z): mu and sigma are the log's mean and sd; mu = ln(mean) - sigma^2 / 2
        // keeps the distribution's own mean at `mean`.
        double sigma = dist.spread;
        double mu = std::log(static_cast<double>(dist.mean)) - sigma * sigma / 2.0;
        value = std::round(std::exp(mu + sigma * rng.Normal()));
      }
      break;
  }
  return static_cast<int>(std::clamp<double>(value, 1.0, static_cast<double>(dist.max)));
}

std::string SyntheticText(int words, uint64_t seed) {
  stats::SplitMixRng rng(seed);
  std::string text;
  text.reserve(static_cast<size_t>(std::max(words, 0)) * 6);
  for (int i = 0; i < words; ++i) {
    if (i > 0) text += ' ';
    text += kVocabulary[rng.UniformIndex(std::size(kVocabulary))];
  }
  return text;
}

std::string PasskeyPrompt(int length_words, double depth, int64_t key) {
  static const int filler_words = CountWords(kPasskeyFiller);
  const int fixed_words =
      CountWords(kPasskeyTask) + CountWords(Needle(key)) + CountWords(kPasskeyQuestion);
  int repeats = std::max(0, static_cast<int>(std::lround(
                                static_cast<double>(length_words - fixed_words) / filler_words)));
  int before = static_cast<int>(std::lround(std::clamp(depth, 0.0, 1.0) * repeats));
  std::string prompt(kPasskeyTask);
  prompt += '\n';
  if (before > 0) prompt += RepeatFiller(before) + '\n';
  prompt += Needle(key);
  prompt += '\n';
  if (repeats - before > 0) prompt += RepeatFiller(repeats - before) + '\n';
  prompt += kPasskeyQuestion;
  return prompt;
}

namespace {

std::shared_ptr<const std::vector<Workload::FileEntry>> ParsePromptFile(const std::string& path,
                                                                        std::string& sha256) {
  FileBytes file = ReadFileBytes(path, "prompts");
  sha256 = std::move(file.sha256);
  std::istringstream in(std::move(file.bytes));
  auto entries = std::make_unique<std::vector<Workload::FileEntry>>();
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto where = [&] { return path + ":" + std::to_string(line_no) + ": "; };
    nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
      throw SettingsError("prompts", where() + "not a JSON object");
    }
    Workload::FileEntry entry;
    auto prompt = json.find("prompt");
    if (prompt == json.end()) throw SettingsError("prompts", where() + "missing \"prompt\"");
    if (prompt->is_string()) {
      if (prompt->get_ref<const std::string&>().empty()) {
        throw SettingsError("prompts", where() + "\"prompt\" is empty");
      }
    } else if (prompt->is_array()) {
      if (prompt->empty()) throw SettingsError("prompts", where() + "\"prompt\" is empty");
      for (const auto& id : *prompt) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0) {
          throw SettingsError("prompts", where() + "a token-id \"prompt\" must hold integers >= 0");
        }
      }
    } else {
      throw SettingsError("prompts",
                          where() + "\"prompt\" must be a string or an array of token ids");
    }
    entry.prompt = *prompt;
    auto max_tokens = json.find("max_tokens");
    if (max_tokens != json.end()) {
      if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1 ||
          max_tokens->get<int64_t>() > (1 << 24)) {
        throw SettingsError("prompts", where() + "\"max_tokens\" must be an integer >= 1");
      }
      entry.max_tokens = max_tokens->get<int>();
    }
    entries->push_back(std::move(entry));
  }
  if (entries->empty()) throw SettingsError("prompts", "prompt file '" + path + "' has no prompts");
  return entries;
}

}  // namespace

Workload Workload::Create(const WorkloadSettings& settings, uint64_t seed) {
  Workload workload;
  workload.settings_ = settings;
  workload.seed_ = seed;
  if (settings.kind == WorkloadKind::kPromptFile) {
    workload.file_ = ParsePromptFile(settings.prompt_file, workload.file_sha256_);
  }
  return workload;
}

Workload Workload::FromEntries(const WorkloadSettings& settings, uint64_t seed,
                               std::vector<FileEntry> entries) {
  if (entries.empty()) throw std::invalid_argument("Workload::FromEntries: no entries");
  Workload workload;
  workload.settings_ = settings;
  workload.seed_ = seed;
  workload.file_ = std::make_shared<const std::vector<FileEntry>>(std::move(entries));
  return workload;
}

RequestSpec Workload::At(int64_t index) const {
  if (index < 0) throw std::invalid_argument("Workload::At: index must be >= 0");
  const uint64_t slot = static_cast<uint64_t>(
      settings_.distinct_prompts > 0 ? index % settings_.distinct_prompts : index);
  RequestSpec spec;
  spec.max_tokens =
      SampleLength(settings_.output, stats::DeriveSeed(seed_, kOutputLengthStream, slot));
  switch (settings_.kind) {
    case WorkloadKind::kSynthetic: {
      int words = SampleLength(settings_.input, stats::DeriveSeed(seed_, kInputLengthStream, slot));
      spec.prompt = SyntheticText(words, stats::DeriveSeed(seed_, kPromptTextStream, slot));
      spec.input_length = words;
      break;
    }
    case WorkloadKind::kPasskey: {
      const auto& lengths = settings_.passkey_lengths;
      const auto& depths = settings_.passkey_depths;
      int length = lengths[slot % lengths.size()];
      double depth = depths[(slot / lengths.size()) % depths.size()];
      stats::SplitMixRng rng(stats::DeriveSeed(seed_, kPasskeyStream, slot));
      // LongLoRA draws keys with random.randint(1, 50000).
      spec.passkey = rng.UniformInt(1, 50000);
      spec.prompt = PasskeyPrompt(length, depth, spec.passkey);
      break;
    }
    case WorkloadKind::kPromptFile:
    case WorkloadKind::kShareGpt:
    case WorkloadKind::kTrace: {
      const FileEntry& entry = (*file_)[slot % file_->size()];
      spec.prompt = entry.prompt;
      if (entry.max_tokens > 0) spec.max_tokens = entry.max_tokens;
      break;
    }
  }
  return spec;
}

}  // namespace kvgate::loadgen
