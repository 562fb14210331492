// kvgate's one source of random numbers: two engines, one set of draws written once over either,
// and one seed derivation. The host's seeded draws (bootstraps, check items, loadgen schedules
// and prompts, the codec's signs and synthetic data, the training corpus, sampling) go through
// this header, so a seed means the same numbers wherever it is used. The one exception: the CUDA
// bench kernels hash (seed, index) on the device (readkv/cuda/src/bench_kernels.cu), where host
// code cannot run.
//
// Engines (both are standard UniformRandomBitGenerators):
//   - std::mt19937_64: its output sequence is fixed by the C++ standard ([rand.predef]).
//   - SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-mixed 64-bit generator, cheap to seed,
//     for the many short streams a derived seed starts.
// Draws (Rng<Engine>): our own code on top of the raw 64-bit outputs, never <random>'s or Boost's
// distributions, whose algorithms differ between library implementations and versions.
//
// Cross-platform contract for a given seed:
//   - bit-identical everywhere: Next, UniformIndex, UniformInt, Uniform01, DeriveSeed (integer
//     arithmetic and one exact scaling);
//   - Normal, Exponential, Gamma go through libm's log/sqrt/sin/cos/pow: identical wherever the
//     math library is, and may differ in the last ulp across math libraries.
// Frozen: SeededRng's draws (bootstraps are regated from stored history) and SplitMixRng's
// Next/Uniform01/Normal with DeriveSeed (the codec's signs and synthetic data, hence every cache
// identity, and the training corpus of the committed models). stats/tests/random_test.cc pins
// them; changing any of them is a format change.
//
// Not thread-safe: one generator per thread. Copyable (a copy continues the same sequence).
#pragma once

#include <cstdint>
#include <limits>
#include <random>

namespace kvgate::stats {

// SplitMix64: state += 0x9e3779b97f4a7c15, output = the MurmurHash3-style finaliser of the state.
class SplitMix64 {
 public:
  using result_type = uint64_t;
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return std::numeric_limits<uint64_t>::max(); }

 private:
  uint64_t state_;
};

// The draws, over Engine = std::mt19937_64 or SplitMix64 (the two instantiated in random.cc).
template <class Engine>
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // The engine's next raw 64-bit output.
  uint64_t Next() { return engine_(); }

  // Uniform integer in [0, n), unbiased (rejection of the short top range of 2^64 mod n).
  // Throws std::invalid_argument when n == 0.
  uint64_t UniformIndex(uint64_t n);

  // Uniform integer in [lo, hi] (both included): lo + UniformIndex(hi - lo + 1).
  // Throws std::invalid_argument when lo > hi.
  int64_t UniformInt(int64_t lo, int64_t hi);

  // Uniform double in [0, 1) with 53 random bits (one output).
  double Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Standard normal draw (Box–Muller; two outputs make a pair of draws, the second is kept for
  // the next call).
  double Normal();

  // Exponential with the given rate (mean 1 / rate) by inversion: -log(1 - U) / rate; one output.
  // Throws std::invalid_argument unless rate is finite and > 0.
  double Exponential(double rate);

  // Gamma with the given shape and scale (mean shape * scale) by Marsaglia and Tsang's method
  // (2000), with the U^(1/shape) boost for shape < 1. Throws std::invalid_argument unless both
  // are finite and > 0.
  double Gamma(double shape, double scale);

 private:
  Engine engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

extern template class Rng<std::mt19937_64>;
extern template class Rng<SplitMix64>;

// The statistics' and checks' generator: mt19937_64 under the draws.
using SeededRng = Rng<std::mt19937_64>;
// The codec's, the model's and loadgen's generator: SplitMix64 under the draws.
using SplitMixRng = Rng<SplitMix64>;

// Derives an independent seed from a base seed and a small tuple (e.g. layer, head, purpose; or
// stream, index), by chained SplitMix64 steps. Omitted parts are 0, so DeriveSeed(s, a) ==
// DeriveSeed(s, a, 0, 0).
uint64_t DeriveSeed(uint64_t base, uint64_t a, uint64_t b = 0, uint64_t c = 0);

}  // namespace kvgate::stats
