#include "readkv/codec/calibration.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "kvgate/stats/random.h"
#include "readkv/codec/cache_object.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::DeriveSeed;

namespace {

using Json = nlohmann::json;

constexpr const char* kFormat = "readkv-calibration";
constexpr int kFormatVersion = 1;

// The double that nlohmann writes for a float. Prefer the shortest decimal of the float (at most
// 9 significant digits) when reading that decimal back through double gives the same float;
// otherwise (a double-rounding corner) write the float's exact double value. Either way
// Parse recovers the identical float.
double JsonFloat(float f, const char* field) {
  if (!std::isfinite(f)) throw InvalidArgument(field, "non-finite value cannot be serialised");
  char buf[32];
  const auto written = std::to_chars(buf, buf + sizeof(buf), f);
  double shortest = 0.0;
  std::from_chars(buf, written.ptr, shortest);
  if (std::bit_cast<uint32_t>(static_cast<float>(shortest)) == std::bit_cast<uint32_t>(f)) {
    return shortest;
  }
  return static_cast<double>(f);
}

Json FloatArray(const std::vector<float>& values, const char* field) {
  Json out = Json::array();
  for (float v : values) out.push_back(JsonFloat(v, field));
  return out;
}

const Json& Field(const Json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) throw InvalidArgument(name, "missing");
  return *it;
}

int64_t GetInt(const Json& j, const char* name, int64_t min, int64_t max) {
  const Json& v = Field(j, name);
  if (!v.is_number_integer()) throw InvalidArgument(name, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
    throw InvalidArgument(name, "out of range");
  }
  const int64_t x = v.get<int64_t>();
  if (x < min || x > max) throw InvalidArgument(name, "out of range: " + std::to_string(x));
  return x;
}

uint64_t GetSeed(const Json& j, const char* name) {
  const Json& v = Field(j, name);
  if (!v.is_number_unsigned()) throw InvalidArgument(name, "must be an unsigned integer");
  return v.get<uint64_t>();
}

enum class Sign { kAny, kPositive, kNonNegative };

std::vector<float> GetFloats(const Json& j, const char* name, size_t count, Sign sign) {
  const Json& v = Field(j, name);
  if (!v.is_array()) throw InvalidArgument(name, "must be an array");
  if (v.size() != count) {
    throw InvalidArgument(
        name, "expected " + std::to_string(count) + " numbers, found " + std::to_string(v.size()));
  }
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    const Json& x = v[i];
    const std::string where = "element " + std::to_string(i);
    if (!x.is_number()) throw InvalidArgument(name, where + " is not a number");
    const double d = x.get<double>();
    const float f = static_cast<float>(d);
    if (!std::isfinite(f)) throw InvalidArgument(name, where + " is not a finite float");
    if (sign == Sign::kPositive && !(f > 0.0f)) {
      throw InvalidArgument(name, where + " must be > 0");
    }
    if (sign == Sign::kNonNegative && !(f >= 0.0f)) {
      throw InvalidArgument(name, where + " must be >= 0");
    }
    out[i] = f;
  }
  return out;
}

void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void CheckGeometry(int layers, int kv_heads, int head_dim) {
  if (layers < 1) throw InvalidArgument("layers", "must be >= 1");
  if (kv_heads < 1) throw InvalidArgument("kv_heads", "must be >= 1");
  if (head_dim < 8 || !std::has_single_bit(static_cast<unsigned>(head_dim))) {
    throw InvalidArgument("head_dim", "must be a power of two >= 8");
  }
}

}  // namespace

uint64_t TransformSeeds::KeySeed(int layer, int head) const {
  return DeriveSeed(key, static_cast<uint64_t>(layer), static_cast<uint64_t>(head));
}

uint64_t TransformSeeds::ValueSeed(int layer, int head) const {
  return DeriveSeed(value, static_cast<uint64_t>(layer), static_cast<uint64_t>(head));
}

namespace {

std::span<const float> HeadSlice(const Calibration& c, const std::vector<float>& v,
                                 const char* field, int layer, int head) {
  if (layer < 0 || layer >= c.layers) throw InvalidArgument("layer", std::to_string(layer));
  if (head < 0 || head >= c.kv_heads) throw InvalidArgument("head", std::to_string(head));
  const size_t begin = c.ChannelIndex(layer, head, 0);
  if (v.size() < begin + static_cast<size_t>(c.head_dim)) {
    throw InvalidArgument(field, "shorter than layers * kv_heads * head_dim");
  }
  return std::span<const float>(v).subspan(begin, static_cast<size_t>(c.head_dim));
}

}  // namespace

std::span<const float> Calibration::KeyMean(int layer, int head) const {
  return HeadSlice(*this, key_mean, "key_mean", layer, head);
}
std::span<const float> Calibration::KeyStd(int layer, int head) const {
  return HeadSlice(*this, key_std, "key_std", layer, head);
}
std::span<const float> Calibration::ValueMean(int layer, int head) const {
  return HeadSlice(*this, value_mean, "value_mean", layer, head);
}
std::span<const float> Calibration::ValueStd(int layer, int head) const {
  return HeadSlice(*this, value_std, "value_std", layer, head);
}

std::string Calibration::Serialize() const {
  // nlohmann::json keeps object keys sorted, which makes the text canonical.
  Json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["layers"] = layers;
  j["kv_heads"] = kv_heads;
  j["head_dim"] = head_dim;
  j["key_seed"] = seeds.key;
  j["value_seed"] = seeds.value;
  j["samples_per_head"] = samples_per_head;
  j["key_mean"] = FloatArray(key_mean, "key_mean");
  j["key_std"] = FloatArray(key_std, "key_std");
  j["value_mean"] = FloatArray(value_mean, "value_mean");
  j["value_std"] = FloatArray(value_std, "value_std");
  j["key_amax"] = FloatArray(key_amax, "key_amax");
  j["value_amax"] = FloatArray(value_amax, "value_amax");
  return j.dump();
}

Calibration Calibration::Parse(const std::string& text) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw InvalidArgument("json", "calibration text is not valid JSON");
  if (!j.is_object()) throw InvalidArgument("json", "calibration must be a JSON object");
  const Json& format = Field(j, "format");
  if (!format.is_string() || format.get<std::string>() != kFormat) {
    throw InvalidArgument("format", std::string("must be \"") + kFormat + "\"");
  }
  if (GetInt(j, "version", 0, std::numeric_limits<int>::max()) != kFormatVersion) {
    throw InvalidArgument(
        "version", "unsupported; this codec reads version " + std::to_string(kFormatVersion));
  }
  Calibration c;
  c.layers = static_cast<int>(GetInt(j, "layers", 1, 1 << 16));
  c.kv_heads = static_cast<int>(GetInt(j, "kv_heads", 1, 1 << 16));
  c.head_dim = static_cast<int>(GetInt(j, "head_dim", 8, 1 << 16));
  CheckGeometry(c.layers, c.kv_heads, c.head_dim);
  c.seeds.key = GetSeed(j, "key_seed");
  c.seeds.value = GetSeed(j, "value_seed");
  c.samples_per_head = GetInt(j, "samples_per_head", 0, std::numeric_limits<int64_t>::max());
  const size_t heads = static_cast<size_t>(c.layers) * c.kv_heads;
  const size_t channels = heads * c.head_dim;
  c.key_mean = GetFloats(j, "key_mean", channels, Sign::kAny);
  c.key_std = GetFloats(j, "key_std", channels, Sign::kPositive);
  c.value_mean = GetFloats(j, "value_mean", channels, Sign::kAny);
  c.value_std = GetFloats(j, "value_std", channels, Sign::kPositive);
  c.key_amax = GetFloats(j, "key_amax", heads, Sign::kNonNegative);
  c.value_amax = GetFloats(j, "value_amax", heads, Sign::kNonNegative);
  if (j.size() != 14) throw InvalidArgument("json", "unknown fields present");
  return c;
}

std::string Calibration::Digest() const {
  std::vector<uint8_t> bytes;
  bytes.reserve(40 + 4 * (key_mean.size() * 4 + key_amax.size() * 2));
  PutU64(bytes, static_cast<uint64_t>(layers));
  PutU64(bytes, static_cast<uint64_t>(kv_heads));
  PutU64(bytes, static_cast<uint64_t>(head_dim));
  PutU64(bytes, seeds.key);
  PutU64(bytes, seeds.value);
  // Each array is preceded by its length so moving a value between arrays changes the digest.
  for (const auto* values :
       {&key_mean, &key_std, &value_mean, &value_std, &key_amax, &value_amax}) {
    PutU64(bytes, values->size());
    for (float v : *values) {
      const uint32_t bits = std::bit_cast<uint32_t>(v);
      for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(bits >> (8 * i)));
    }
  }
  return ContentDigest(bytes);
}

Calibrator::Calibrator(int layers, int kv_heads, int head_dim, TransformSeeds seeds, float min_std)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), seeds_(seeds), min_std_(min_std) {
  CheckGeometry(layers, kv_heads, head_dim);
  if (!(min_std > 0.0f) || !std::isfinite(min_std)) {
    throw InvalidArgument("min_std", "must be finite and > 0");
  }
  const size_t heads = static_cast<size_t>(layers) * kv_heads;
  key_transforms_.reserve(heads);
  value_transforms_.reserve(heads);
  for (int l = 0; l < layers; ++l) {
    for (int h = 0; h < kv_heads; ++h) {
      key_transforms_.emplace_back(head_dim, seeds.KeySeed(l, h));
      value_transforms_.emplace_back(head_dim, seeds.ValueSeed(l, h));
    }
  }
  const size_t channels = heads * head_dim;
  k_mean_.assign(channels, 0.0);
  k_m2_.assign(channels, 0.0);
  v_mean_.assign(channels, 0.0);
  v_m2_.assign(channels, 0.0);
  count_.assign(heads, 0);
  k_amax_.assign(heads, 0.0f);
  v_amax_.assign(heads, 0.0f);
}

void Calibrator::Observe(int layer, int head, std::span<const float> key,
                         std::span<const float> value) {
  if (layer < 0 || layer >= layers_) throw InvalidArgument("layer", std::to_string(layer));
  if (head < 0 || head >= kv_heads_) throw InvalidArgument("head", std::to_string(head));
  const size_t d = static_cast<size_t>(head_dim_);
  if (key.size() != d) throw InvalidArgument("key", "expected " + std::to_string(d) + " values");
  if (value.size() != d) {
    throw InvalidArgument("value", "expected " + std::to_string(d) + " values");
  }
  for (size_t i = 0; i < d; ++i) {
    if (!std::isfinite(key[i])) throw InvalidArgument("key", "non-finite value");
    if (!std::isfinite(value[i])) throw InvalidArgument("value", "non-finite value");
  }
  const size_t lh = static_cast<size_t>(layer) * kv_heads_ + head;
  for (size_t i = 0; i < d; ++i) {
    k_amax_[lh] = std::max(k_amax_[lh], std::fabs(key[i]));
    v_amax_[lh] = std::max(v_amax_[lh], std::fabs(value[i]));
  }
  std::vector<float> k_rot(d), v_rot(d);
  key_transforms_[lh].Forward(key, k_rot);
  value_transforms_[lh].Forward(value, v_rot);
  const double n = static_cast<double>(++count_[lh]);
  const size_t base = lh * d;
  for (size_t c = 0; c < d; ++c) {
    const double kx = k_rot[c];
    const double kd = kx - k_mean_[base + c];
    k_mean_[base + c] += kd / n;
    k_m2_[base + c] += kd * (kx - k_mean_[base + c]);
    const double vx = v_rot[c];
    const double vd = vx - v_mean_[base + c];
    v_mean_[base + c] += vd / n;
    v_m2_[base + c] += vd * (vx - v_mean_[base + c]);
  }
}

Calibration Calibrator::Finish() const {
  Calibration c;
  c.layers = layers_;
  c.kv_heads = kv_heads_;
  c.head_dim = head_dim_;
  c.seeds = seeds_;
  const size_t heads = count_.size();
  const size_t d = static_cast<size_t>(head_dim_);
  int64_t fewest = std::numeric_limits<int64_t>::max();
  for (size_t lh = 0; lh < heads; ++lh) {
    if (count_[lh] < 2) {
      throw InvalidArgument("samples", "layer " + std::to_string(lh / kv_heads_) + " head " +
                                           std::to_string(lh % kv_heads_) + " saw " +
                                           std::to_string(count_[lh]) + " tokens, needs >= 2");
    }
    fewest = std::min(fewest, count_[lh]);
  }
  c.samples_per_head = fewest;
  c.key_mean.resize(heads * d);
  c.key_std.resize(heads * d);
  c.value_mean.resize(heads * d);
  c.value_std.resize(heads * d);
  for (size_t lh = 0; lh < heads; ++lh) {
    // Sample standard deviation (n - 1), clamped from below.
    const double denom = static_cast<double>(count_[lh] - 1);
    for (size_t ch = 0; ch < d; ++ch) {
      const size_t i = lh * d + ch;
      c.key_mean[i] = static_cast<float>(k_mean_[i]);
      c.value_mean[i] = static_cast<float>(v_mean_[i]);
      c.key_std[i] = std::max(min_std_, static_cast<float>(std::sqrt(k_m2_[i] / denom)));
      c.value_std[i] = std::max(min_std_, static_cast<float>(std::sqrt(v_m2_[i] / denom)));
    }
  }
  c.key_amax = k_amax_;
  c.value_amax = v_amax_;
  return c;
}

}  // namespace readkv::codec
