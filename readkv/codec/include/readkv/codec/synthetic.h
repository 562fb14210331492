// Seeded synthetic K/V/Q for one layer, for the CLI, tests and benchmarks: Gaussian keys and
// values per (KV head, channel) with their own means and scales, a few key "outlier" channels
// with a large scale (as real post-RoPE keys have), and one planted high-attention token whose
// key is aligned with the queries of its KV head. Deterministic: every draw comes from
// kvgate::stats::SplitMixRng seeded through kvgate::stats::DeriveSeed (stats/random.h), so the
// same config gives the same floats everywhere.
// The distribution's parameters, the data sample, the queries and the calibration sample use
// independent derived seeds: the calibration never sees the data it is evaluated on.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/calibration.h"

namespace readkv::codec {

struct SyntheticConfig {
  LayerGeometry geometry;
  int64_t tokens = 1024;
  uint64_t seed = 1;
  int outlier_channels = 4;      // key channels per KV head drawn with outlier_scale
  float outlier_scale = 8.0f;    // their standard deviation (others: 1)
  float key_mean_spread = 0.5f;  // key channel means ~ N(0, spread^2)
  bool plant_token = true;
  // Logit (q . k / sqrt(d)) of the planted key above a mean key, averaged over the KV head's
  // query heads.
  double planted_logit = 10.0;
  // A KV head whose values (means and scales) are multiplied by loud_value_scale; -1 = none.
  int loud_value_head = -1;
  float loud_value_scale = 1.0f;

  // Throws InvalidArgument: the geometry's fields, "tokens" (< 1), "outlier_channels" (outside
  // [0, d]), "loud_value_head" (outside [-1, H_kv)).
  void Validate() const;
};

struct SyntheticLayer {
  LayerGeometry geometry;
  int64_t tokens = 0;
  std::vector<float> keys;     // [T][H_kv][d]
  std::vector<float> values;   // [T][H_kv][d]
  std::vector<float> queries;  // [H_q][d]
  int64_t planted_token = -1;  // index of the planted token, -1 if none
};

SyntheticLayer MakeSyntheticLayer(const SyntheticConfig& config);

// A one-layer calibration measured on `samples` fresh tokens of the same distribution (no planted
// token). Throws InvalidArgument("samples") for samples < 2.
Calibration MakeSyntheticCalibration(const SyntheticConfig& config, int64_t samples = 4096,
                                     TransformSeeds seeds = {});

}  // namespace readkv::codec
