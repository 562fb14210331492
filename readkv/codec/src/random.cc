#include "readkv/codec/random.h"

#include <cmath>
#include <initializer_list>
#include <numbers>

namespace readkv::codec {

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double SplitMix64::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double SplitMix64::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // 1 - U keeps the logarithm's argument in (0, 1].
  double u1 = 1.0 - Uniform();
  double u2 = Uniform();
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * std::numbers::pi * u2;
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

uint64_t DeriveSeed(uint64_t base, uint64_t a, uint64_t b, uint64_t c) {
  SplitMix64 mix(base ^ 0x6a09e667f3bcc909ULL);
  uint64_t h = mix.Next();
  for (uint64_t part : {a, b, c}) {
    SplitMix64 step(h ^ (part * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
    h = step.Next();
  }
  return h;
}

}  // namespace readkv::codec
