// The seeded random source of kvgate's statistics: std::mt19937_64 (its output sequence is fixed
// by the C++ standard) with our own draws on top, because the standard's distributions differ
// between library implementations. Integer draws (and so every bootstrap) are bit-identical on
// every platform for a given seed; Uniform01 is too; Normal goes through libm's log/cos/sqrt and
// may differ in the last ulp across math libraries.
//
// Not thread-safe: one SeededRng per thread. Copyable (a copy continues the same sequence).
#pragma once

#include <cstdint>
#include <random>

namespace kvgate::stats {

class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : engine_(seed) {}

  // The next raw 64-bit output of mt19937_64.
  uint64_t Next() { return engine_(); }

  // Uniform integer in [0, n), unbiased (rejection of the short top range of 2^64 mod n).
  // Throws std::invalid_argument when n == 0.
  uint64_t UniformIndex(uint64_t n);

  // Uniform double in [0, 1) with 53 random bits.
  double Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Standard normal draw (Box–Muller; consumes two outputs per pair of draws).
  double Normal();

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace kvgate::stats
