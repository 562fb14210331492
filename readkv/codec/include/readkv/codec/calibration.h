// Calibration of the ReadKV codec and the FP8 baseline, measured once on sample K/V and frozen.
//
// For every (layer, KV head, channel) it holds, in the *transformed* domain (after the Hadamard
// rotation of transform.h), the mean and standard deviation of keys and of values; ReadKV codes
// z = (x' - mu) / sigma. It also holds the raw-domain absolute maxima per (layer, KV head) that
// the FP8 baseline turns into scales (amax / 448). Immutable after Finish(); thread-safe to read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "readkv/codec/transform.h"

namespace readkv::codec {

// Seeds of the sign vectors. The sign vector of (layer, head) is derived from the base seed with
// DeriveSeed(base, layer, head); keys and queries share `key`, values use `value`.
struct TransformSeeds {
  uint64_t key = 0x5eed0001;
  uint64_t value = 0x5eed0002;
  uint64_t KeySeed(int layer, int head) const;
  uint64_t ValueSeed(int layer, int head) const;
};

struct Calibration {
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  TransformSeeds seeds;
  // Index of (layer, head, channel): (layer * kv_heads + head) * head_dim + channel.
  std::vector<float> key_mean, key_std, value_mean, value_std;
  // Index of (layer, head): layer * kv_heads + head. Raw-domain max |x| over the samples.
  std::vector<float> key_amax, value_amax;
  int64_t samples_per_head = 0;  // tokens observed per (layer, head); the fewest over heads

  size_t ChannelIndex(int layer, int head, int channel) const {
    return (static_cast<size_t>(layer) * kv_heads + head) * head_dim + channel;
  }
  std::span<const float> KeyMean(int layer, int head) const;
  std::span<const float> KeyStd(int layer, int head) const;
  std::span<const float> ValueMean(int layer, int head) const;
  std::span<const float> ValueStd(int layer, int head) const;

  // Canonical JSON text (sorted keys). Round-trips exactly: each float is written as its
  // shortest decimal (at most 9 significant digits), or as its exact double value in the rare
  // case where reading that decimal through double would round to a different float.
  // Throws InvalidArgument naming the array if a value is not finite.
  std::string Serialize() const;
  // Throws InvalidArgument naming the field when the text is malformed or inconsistent.
  static Calibration Parse(const std::string& text);
  // Stable 128-bit hex digest over the geometry, seeds and every float's bits
  // (samples_per_head is bookkeeping and not covered).
  std::string Digest() const;
};

// Accumulates statistics (Welford, in double) from raw K/V rows; sigma is the sample standard
// deviation (divisor n - 1). Not thread-safe.
class Calibrator {
 public:
  // sigma below `min_std` is clamped to it so a constant channel cannot divide by zero.
  Calibrator(int layers, int kv_heads, int head_dim, TransformSeeds seeds = {},
             float min_std = 1e-4f);
  // key and value: the raw (pre-transform, post-RoPE for keys) vectors of one token, d each.
  // Throws InvalidArgument("layer" / "head" / "key" / "value") on bad indices, sizes or
  // non-finite values.
  void Observe(int layer, int head, std::span<const float> key, std::span<const float> value);
  // Throws InvalidArgument("samples") if some (layer, head) saw fewer than 2 tokens.
  Calibration Finish() const;

 private:
  int layers_, kv_heads_, head_dim_;
  TransformSeeds seeds_;
  float min_std_;
  std::vector<HadamardTransform> key_transforms_, value_transforms_;
  std::vector<double> k_mean_, k_m2_, v_mean_, v_m2_;
  std::vector<int64_t> count_;
  std::vector<float> k_amax_, v_amax_;
};

}  // namespace readkv::codec
