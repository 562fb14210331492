#include "kvgate/stats/random.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace kvgate::stats {

uint64_t SeededRng::UniformIndex(uint64_t n) {
  if (n == 0) throw std::invalid_argument("UniformIndex: n must be > 0");
  // Values below 2^64 mod n would make the low residues more likely; draw again for those.
  // (-n) % n == 2^64 mod n in unsigned arithmetic.
  const uint64_t threshold = (0 - n) % n;
  uint64_t x = Next();
  while (x < threshold) x = Next();
  return x % n;
}

double SeededRng::Normal() {
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

}  // namespace kvgate::stats
