#include "readkv/codec/synthetic.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::DeriveSeed;
using kvgate::stats::SplitMixRng;

namespace {

// Purposes of the derived seeds.
constexpr uint64_t kParameters = 1;
constexpr uint64_t kData = 2;
constexpr uint64_t kQueries = 3;
constexpr uint64_t kCalibration = 4;
constexpr uint64_t kPlanted = 5;

// Per (KV head, channel) means and scales of keys and values: [H_kv][d] each.
struct Distribution {
  std::vector<float> key_mean, key_scale, value_mean, value_scale;
};

Distribution MakeDistribution(const SyntheticConfig& config) {
  const int hkv = config.geometry.heads_kv;
  const int d = config.geometry.head_dim;
  Distribution dist;
  const auto n = static_cast<size_t>(hkv) * d;
  dist.key_mean.resize(n);
  dist.key_scale.assign(n, 1.0f);
  dist.value_mean.resize(n);
  dist.value_scale.resize(n);
  SplitMixRng rng(DeriveSeed(config.seed, kParameters));
  for (int h = 0; h < hkv; ++h) {
    const size_t base = static_cast<size_t>(h) * d;
    for (int c = 0; c < d; ++c) {
      dist.key_mean[base + c] = static_cast<float>(config.key_mean_spread * rng.Normal());
      dist.value_mean[base + c] = static_cast<float>(0.2 * rng.Normal());
      dist.value_scale[base + c] = static_cast<float>(0.5 + rng.Uniform01());
    }
    // Distinct outlier channels by a partial Fisher-Yates shuffle.
    std::vector<int> channels(static_cast<size_t>(d));
    for (int c = 0; c < d; ++c) channels[static_cast<size_t>(c)] = c;
    for (int k = 0; k < config.outlier_channels; ++k) {
      const auto pick = k + static_cast<int>(rng.Next() % static_cast<uint64_t>(d - k));
      std::swap(channels[static_cast<size_t>(k)], channels[static_cast<size_t>(pick)]);
      dist.key_scale[base + static_cast<size_t>(channels[static_cast<size_t>(k)])] =
          config.outlier_scale;
    }
    if (h == config.loud_value_head) {
      for (int c = 0; c < d; ++c) {
        dist.value_mean[base + c] *= config.loud_value_scale;
        dist.value_scale[base + c] *= config.loud_value_scale;
      }
    }
  }
  return dist;
}

void Sample(const Distribution& dist, int64_t tokens, uint64_t seed, std::vector<float>& keys,
            std::vector<float>& values) {
  const size_t row = dist.key_mean.size();
  keys.resize(static_cast<size_t>(tokens) * row);
  values.resize(keys.size());
  SplitMixRng rng(seed);
  for (int64_t i = 0; i < tokens; ++i) {
    float* k = keys.data() + static_cast<size_t>(i) * row;
    float* v = values.data() + static_cast<size_t>(i) * row;
    for (size_t j = 0; j < row; ++j) {
      k[j] = static_cast<float>(dist.key_mean[j] + dist.key_scale[j] * rng.Normal());
      v[j] = static_cast<float>(dist.value_mean[j] + dist.value_scale[j] * rng.Normal());
    }
  }
}

}  // namespace

void SyntheticConfig::Validate() const {
  geometry.Validate();
  if (tokens < 1) throw InvalidArgument("tokens", "must be >= 1, got " + std::to_string(tokens));
  if (outlier_channels < 0 || outlier_channels > geometry.head_dim) {
    throw InvalidArgument("outlier_channels",
                          "must be in [0, d], got " + std::to_string(outlier_channels));
  }
  if (loud_value_head < -1 || loud_value_head >= geometry.heads_kv) {
    throw InvalidArgument("loud_value_head",
                          "must be in [-1, H_kv), got " + std::to_string(loud_value_head));
  }
}

SyntheticLayer MakeSyntheticLayer(const SyntheticConfig& config) {
  config.Validate();
  const Distribution dist = MakeDistribution(config);
  const LayerGeometry& geo = config.geometry;
  const int d = geo.head_dim;
  const int g = geo.group();
  SyntheticLayer layer;
  layer.geometry = geo;
  layer.tokens = config.tokens;
  Sample(dist, config.tokens, DeriveSeed(config.seed, kData), layer.keys, layer.values);
  layer.queries.resize(static_cast<size_t>(geo.heads_q) * d);
  SplitMixRng qrng(DeriveSeed(config.seed, kQueries));
  for (float& q : layer.queries) q = static_cast<float>(qrng.Normal());

  if (config.plant_token) {
    SplitMixRng prng(DeriveSeed(config.seed, kPlanted));
    layer.planted_token = static_cast<int64_t>(prng.Next() % static_cast<uint64_t>(config.tokens));
    const size_t row = static_cast<size_t>(geo.heads_kv) * d;
    for (int h = 0; h < geo.heads_kv; ++h) {
      // Direction: the normalised sum of the group's queries; length: the planted logit.
      std::vector<double> u(static_cast<size_t>(d), 0.0);
      for (int q = 0; q < g; ++q) {
        const float* query = layer.queries.data() + static_cast<size_t>(h * g + q) * d;
        for (int c = 0; c < d; ++c) u[static_cast<size_t>(c)] += query[c];
      }
      double norm = 0.0;
      for (double x : u) norm += x * x;
      norm = std::sqrt(norm);
      double mean_projection = 0.0;
      for (int q = 0; q < g; ++q) {
        const float* query = layer.queries.data() + static_cast<size_t>(h * g + q) * d;
        for (int c = 0; c < d; ++c) mean_projection += query[c] * u[static_cast<size_t>(c)] / norm;
      }
      mean_projection /= g;
      const double alpha = config.planted_logit * std::sqrt(static_cast<double>(d)) /
                           std::max(mean_projection, 1e-6);
      float* k = layer.keys.data() + static_cast<size_t>(layer.planted_token) * row +
                 static_cast<size_t>(h) * d;
      for (int c = 0; c < d; ++c) {
        k[c] = static_cast<float>(dist.key_mean[static_cast<size_t>(h) * d + c] +
                                  alpha * u[static_cast<size_t>(c)] / norm);
      }
    }
  }
  return layer;
}

Calibration MakeSyntheticCalibration(const SyntheticConfig& config, int64_t samples,
                                     TransformSeeds seeds) {
  config.Validate();
  if (samples < 2) throw InvalidArgument("samples", "need >= 2, got " + std::to_string(samples));
  const Distribution dist = MakeDistribution(config);
  std::vector<float> keys, values;
  Sample(dist, samples, DeriveSeed(config.seed, kCalibration), keys, values);
  const LayerGeometry& geo = config.geometry;
  const auto d = static_cast<size_t>(geo.head_dim);
  Calibrator calibrator(1, geo.heads_kv, geo.head_dim, seeds);
  for (int64_t i = 0; i < samples; ++i) {
    for (int h = 0; h < geo.heads_kv; ++h) {
      const size_t offset = (static_cast<size_t>(i) * geo.heads_kv + h) * d;
      calibrator.Observe(0, h, std::span<const float>(keys).subspan(offset, d),
                         std::span<const float>(values).subspan(offset, d));
    }
  }
  return calibrator.Finish();
}

}  // namespace readkv::codec
