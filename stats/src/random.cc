#include "kvgate/stats/random.h"

#include <cmath>
#include <initializer_list>
#include <numbers>
#include <stdexcept>
#include <string>

namespace kvgate::stats {

template <class Engine>
uint64_t Rng<Engine>::UniformIndex(uint64_t n) {
  if (n == 0) throw std::invalid_argument("UniformIndex: n must be > 0");
  // Values below 2^64 mod n would make the low residues more likely; draw again for those.
  // (-n) % n == 2^64 mod n in unsigned arithmetic.
  const uint64_t threshold = (0 - n) % n;
  uint64_t x = Next();
  while (x < threshold) x = Next();
  return x % n;
}

template <class Engine>
int64_t Rng<Engine>::UniformInt(int64_t lo, int64_t hi) {
  if (lo > hi) {
    throw std::invalid_argument("UniformInt: lo (" + std::to_string(lo) + ") must be <= hi (" +
                                std::to_string(hi) + ")");
  }
  // hi - lo + 1 in unsigned arithmetic; it wraps to 0 only for the full 64-bit range.
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  const uint64_t offset = span == 0 ? Next() : UniformIndex(span);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + offset);
}

template <class Engine>
double Rng<Engine>::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // 1 - U is in (0, 1], so the log is finite.
  double u1 = 1.0 - Uniform01();
  double u2 = Uniform01();
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * std::numbers::pi * u2;
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

template <class Engine>
double Rng<Engine>::Exponential(double rate) {
  if (!(rate > 0) || !std::isfinite(rate)) {
    throw std::invalid_argument("Exponential: rate must be finite and > 0");
  }
  return -std::log(1.0 - Uniform01()) / rate;
}

template <class Engine>
double Rng<Engine>::Gamma(double shape, double scale) {
  if (!(shape > 0) || !std::isfinite(shape) || !(scale > 0) || !std::isfinite(scale)) {
    throw std::invalid_argument("Gamma: shape and scale must be finite and > 0");
  }
  if (shape < 1.0) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a); 1 - U is in (0, 1].
    const double boost = std::pow(1.0 - Uniform01(), 1.0 / shape);
    return Gamma(shape + 1.0, scale) * boost;
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0.0;
    double v = 0.0;
    do {
      x = Normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - Uniform01();  // (0, 1]
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return d * v * scale;
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

template class Rng<std::mt19937_64>;
template class Rng<SplitMix64>;

uint64_t DeriveSeed(uint64_t base, uint64_t a, uint64_t b, uint64_t c) {
  // Each step is the first output of a SplitMix64 seeded with the running hash mixed with the
  // next part (the part spread by the golden-ratio constant, offset so that 0 is not a no-op).
  uint64_t h = SplitMix64(base ^ 0x6a09e667f3bcc909ULL)();
  for (uint64_t part : {a, b, c}) {
    h = SplitMix64(h ^ (part * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL))();
  }
  return h;
}

}  // namespace kvgate::stats
