// The seeded schedule of a run, generated before the run starts: open-loop arrival times and the
// request each schedule slot sends (prompt and max_tokens). Everything here is a pure function of
// (settings, seed): every draw is kvgate::stats::SplitMixRng's under a seed from
// kvgate::stats::DeriveSeed(seed, stream, index) (stats/random.h), one stream per purpose, so
// request i's prompt does not depend on how many requests come before it. Word choices, uniform
// lengths and passkeys are integer draws, identical on every machine; exponential, gamma, normal
// and log-normal draws go through libm and may differ in the last ulp across math libraries (an
// arrival time is rounded to the nanosecond, a length to an integer).
//
// Thread-safety: the functions are pure; a Workload is immutable after Create() and may be read
// from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen {

// Arrival offsets in nanoseconds from the run's time zero, ascending. Request 0 is at 0 and
// request k at the sum of the first k gaps (vLLM's convention), so N arrivals span N - 1 gaps.
// Generation stops at `max_count` arrivals (0 = no count bound) or at the first arrival at or
// beyond `max_duration_s` (0 = no time bound); at least one bound must be set.
std::vector<int64_t> GenerateArrivals(Arrival arrival, double rate_rps, double burstiness,
                                      uint64_t seed, int64_t max_count, double max_duration_s);

// One schedule slot's request.
struct RequestSpec {
  nlohmann::json prompt;  // a string, or an array of token ids (prompt files only)
  int max_tokens = 0;
  int64_t passkey = -1;  // the hidden key for passkey prompts, -1 otherwise
  // Synthetic: the sampled prompt length (the words of `prompt`; with InputUnit::kTokens the
  // token count the prompt is then cut to). 0 for the other workloads.
  int input_length = 0;
};

// The passkey prompt of docs/definitions.md ("Passkey"; the Landmark-Attention/LongLoRA
// template): task description, filler sentences to about `length_words` words, the needle at
// `depth` (0 = before all filler, 1 = after all filler), and the question. Lines are joined by
// newlines as in LongLoRA's passkey_retrieval.
std::string PasskeyPrompt(int length_words, double depth, int64_t key);

// Synthetic text of exactly `words` words drawn from a fixed vocabulary of common English words
// (each about one token in common BPE vocabularies), seeded.
std::string SyntheticText(int words, uint64_t seed);

// Request slot -> request, per WorkloadSettings. Create() reads and validates the prompt file
// (throws SettingsError naming the file and line on bad input).
class Workload {
 public:
  static Workload Create(const WorkloadSettings& settings, uint64_t seed);

  // One line of a prompt file, or one request of a dataset chosen before the run.
  struct FileEntry {
    nlohmann::json prompt;
    int max_tokens = 0;  // 0 = not given; drawn from settings.output
  };
  // A workload whose requests were chosen before the run (ShareGPT: they depend on the server's
  // tokenizer): slot i uses entries[i % entries.size()]; `entries` must not be empty.
  static Workload FromEntries(const WorkloadSettings& settings, uint64_t seed,
                              std::vector<FileEntry> entries);

  // The request of schedule slot `index` (>= 0); deterministic.
  RequestSpec At(int64_t index) const;

  // Number of distinct prompts of a prompt file or chosen dataset (0 for generated workloads).
  size_t file_lines() const { return file_ ? file_->size() : 0; }
  // The SHA-256 of the prompt file's bytes that Create() parsed ("" for other workloads).
  const std::string& file_sha256() const { return file_sha256_; }

 private:
  WorkloadSettings settings_;
  uint64_t seed_ = 0;
  std::shared_ptr<const std::vector<FileEntry>> file_;
  std::string file_sha256_;
};

// Draws one length from `dist` with a generator seeded by `seed` (used by Workload; exposed for
// tests of the distributions).
int SampleLength(const LengthDistribution& dist, uint64_t seed);

}  // namespace kvgate::loadgen
