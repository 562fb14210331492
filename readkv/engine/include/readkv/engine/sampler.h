// Picks the next token from one sequence's logits: greedy or seeded temperature sampling.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace readkv::engine {

// One per sequence; not thread-safe (the engine worker owns it). The same temperature, seed and
// logits always give the same tokens on any machine: the uniform draw is built from the raw
// 64-bit engine output, not from a library distribution whose algorithm is unspecified.
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
  std::mt19937_64 rng_;
};

}  // namespace readkv::engine
