// Deterministic pseudo-random numbers that give the same sequence on every platform and
// standard library (std::normal_distribution does not), so seeded data and signs are
// reproducible byte for byte.
#pragma once

#include <cstdint>

namespace readkv::codec {

// SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-mixed 64-bit generator.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  // Standard normal by the Box-Muller transform (the second value is cached).
  double Normal();

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Derives an independent seed from a base seed and a small tuple (layer, head, purpose).
uint64_t DeriveSeed(uint64_t base, uint64_t a, uint64_t b = 0, uint64_t c = 0);

}  // namespace readkv::codec
