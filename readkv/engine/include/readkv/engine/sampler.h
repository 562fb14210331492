// Picks the next token from one sequence's logits: greedy or seeded temperature sampling.
#pragma once

#include <cstdint>
#include <span>

#include "kvgate/stats/random.h"

namespace readkv::engine {

// One per sequence; not thread-safe (the engine worker owns it). The same temperature, seed and
// logits always give the same tokens on any machine: one kvgate::stats::SeededRng::Uniform01 per
// sampled token (mt19937_64 under the seed; bit-identical everywhere), not a library
// distribution whose algorithm is unspecified.
class Sampler {
 public:
  // temperature 0 = greedy; must be finite and >= 0 (the caller validates).
  Sampler(double temperature, uint64_t seed);

  // Returns the next token id, or -1 if no logit is finite (the model is broken). Non-finite
  // logits get probability 0.
  int32_t Next(std::span<const float> logits);

  // The highest logit's id; ties go to the lowest id; non-finite logits never win.
  // Returns -1 if no logit is finite.
  static int32_t Greedy(std::span<const float> logits);

 private:
  double temperature_;
  kvgate::stats::SeededRng rng_;
};

}  // namespace readkv::engine
