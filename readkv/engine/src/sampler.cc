#include "readkv/engine/sampler.h"

#include <cmath>
#include <limits>
#include <vector>

namespace readkv::engine {

Sampler::Sampler(double temperature, uint64_t seed) : temperature_(temperature), rng_(seed) {}

int32_t Sampler::Greedy(std::span<const float> logits) {
  int32_t best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (!std::isfinite(v)) continue;
    // Strictly greater keeps the lowest id on ties.
    if (best < 0 || v > best_value) {
      best = static_cast<int32_t>(i);
      best_value = v;
    }
  }
  return best;
}

int32_t Sampler::Next(std::span<const float> logits) {
  const int32_t argmax = Greedy(logits);
  if (argmax < 0 || temperature_ == 0.0) return argmax;
  const double max_logit = logits[static_cast<size_t>(argmax)];
  // Softmax over finite logits in double, scaled by the max for range; the draw walks the
  // cumulative sum in id order so that the mapping from draw to token is fixed.
  std::vector<double> weights(logits.size(), 0.0);
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (!std::isfinite(v)) continue;
    weights[i] = std::exp((static_cast<double>(v) - max_logit) / temperature_);
    total += weights[i];
  }
  const double u = rng_.Uniform01();
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_positive = argmax;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    cumulative += weights[i];
    last_positive = static_cast<int32_t>(i);
    if (target < cumulative) return last_positive;
  }
  return last_positive;  // rounding left target at the very top
}

}  // namespace readkv::engine
