#include "readkv/codec/outliers.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "readkv/codec/bitplanes.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/key_bytes.h"

namespace readkv::codec {

OutlierOptions ResolveOutlierOptions(const OutlierOptions& options, const LloydTree& tree,
                                     int head_dim) {
  if (options.cap < 0 || options.cap > kMaxOutlierCap) {
    throw InvalidArgument("outlier_cap", "must be in [0, " + std::to_string(kMaxOutlierCap) +
                                             "], got " + std::to_string(options.cap));
  }
  if (!options.enabled()) return {};
  if (options.block_cap < 0 || options.block_cap > kMaxOutlierBlockCap) {
    throw InvalidArgument("outlier_block_cap", "must be in [0, " +
                                                   std::to_string(kMaxOutlierBlockCap) +
                                                   "] (0: the default " +
                                                   std::to_string(kDefaultOutlierBlockCap) +
                                                   "), got " + std::to_string(options.block_cap));
  }
  const float outer = tree.thresholds(tree.store_bits()).back();
  OutlierOptions resolved = options;
  if (resolved.threshold == 0.0f) resolved.threshold = outer;
  if (resolved.block_cap == 0) resolved.block_cap = kDefaultOutlierBlockCap;
  if (!std::isfinite(resolved.threshold) || resolved.threshold < outer) {
    throw InvalidArgument("outlier_threshold",
                          "must be finite and at least the tree's outermost threshold " +
                              std::to_string(outer) + ", got " +
                              std::to_string(resolved.threshold));
  }
  if (head_dim > 256) {
    throw InvalidArgument("head_dim",
                          "outlier entries hold a u8 channel: d <= 256 with "
                          "outliers on, got " +
                              std::to_string(head_dim));
  }
  return resolved;
}

uint16_t FloatToHalf(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf stays inf, NaN stays a quiet NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (mag < 0x38800000u) {  // subnormal half (or zero): scale by 2^24 and round to an integer
    const float scaled = std::bit_cast<float>(mag) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t h = (mag - 0x38000000u) >> 13;
  const uint32_t rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float v = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

float OutlierCorrection(const LloydTree& tree, uint16_t z_half, int depth) {
  const float z = HalfToFloat(z_half);
  if (depth == 0) return z;
  const float outer = tree.centroids(depth).back();  // antisymmetric: the low end is -outer
  return z - (z >= 0.0f ? outer : -outer);
}

int SelectOutliers(std::span<const float> z, const OutlierOptions& resolved,
                   std::span<uint8_t> out_channels, int64_t& beyond) {
  beyond = 0;
  if (!resolved.enabled()) return 0;
  // The cap is small: keep the best `cap` by insertion into a sorted prefix.
  int kept = 0;
  const int cap = std::min<int>(resolved.cap, static_cast<int>(out_channels.size()));
  for (size_t c = 0; c < z.size(); ++c) {
    const float a = std::fabs(z[c]);
    if (!(a > resolved.threshold)) continue;
    ++beyond;
    int at = kept;
    while (at > 0 && std::fabs(z[out_channels[static_cast<size_t>(at - 1)]]) < a) --at;
    if (at >= cap) continue;
    for (int m = std::min(kept, cap - 1); m > at; --m) {
      out_channels[static_cast<size_t>(m)] = out_channels[static_cast<size_t>(m - 1)];
    }
    out_channels[static_cast<size_t>(at)] = static_cast<uint8_t>(c);
    kept = std::min(kept + 1, cap);
  }
  std::sort(out_channels.begin(), out_channels.begin() + kept);
  return kept;
}

OutlierStore::OutlierStore(int head_dim, const OutlierOptions& resolved)
    : head_dim_(head_dim), options_(resolved) {
  if (resolved.enabled() && (resolved.block_cap < 1 || resolved.block_cap > kMaxOutlierBlockCap)) {
    throw InvalidArgument("outlier_block_cap", "must be resolved to [1, " +
                                                   std::to_string(kMaxOutlierBlockCap) + "], got " +
                                                   std::to_string(resolved.block_cap));
  }
}

void OutlierStore::AppendKind(std::span<const float> z, std::vector<OutlierEntry>& entries,
                              std::vector<int64_t>& offsets, OutlierStats& stats) {
  if (tokens_ % kBlockTokens == 0) offsets.push_back(offsets.back());
  uint8_t channels[kMaxOutlierCap];
  int64_t beyond = 0;
  // The block's budget left: a shorter span keeps the first of the token's ranking.
  const auto left = static_cast<size_t>(std::max<int64_t>(
      0, options_.block_cap - (offsets.back() - offsets[offsets.size() - 2])));
  const int selected =
      SelectOutliers(z, options_, std::span<uint8_t>(channels, kMaxOutlierCap), beyond);
  const int kept = selected <= static_cast<int>(left)
                       ? selected
                       : SelectOutliers(z, options_, std::span<uint8_t>(channels, left), beyond);
  stats.over_budget += selected - kept;
  for (int m = 0; m < kept; ++m) {
    entries.push_back(
        {static_cast<uint8_t>(tokens_ % kBlockTokens), channels[m], FloatToHalf(z[channels[m]])});
  }
  offsets.back() += kept;
  stats.beyond += beyond;
  stats.kept += kept;
}

void OutlierStore::AppendToken(std::span<const float> key_z, std::span<const float> value_z) {
  AppendKind(key_z, key_entries_, key_offset_, key_stats_);
  AppendKind(value_z, value_entries_, value_offset_, value_stats_);
  ++tokens_;
}

std::span<const OutlierEntry> OutlierStore::KeyEntries(int64_t block) const {
  const auto b = static_cast<size_t>(block);
  return std::span<const OutlierEntry>(key_entries_)
      .subspan(static_cast<size_t>(key_offset_[b]),
               static_cast<size_t>(key_offset_[b + 1] - key_offset_[b]));
}

std::span<const OutlierEntry> OutlierStore::ValueEntries(int64_t block) const {
  const auto b = static_cast<size_t>(block);
  return std::span<const OutlierEntry>(value_entries_)
      .subspan(static_cast<size_t>(value_offset_[b]),
               static_cast<size_t>(value_offset_[b + 1] - value_offset_[b]));
}

int64_t OutlierStore::Bytes() const {
  if (!options_.enabled()) return 0;
  return blocks() * kOutlierBlockHeaderBytes + entries() * kOutlierEntryBytes;
}

int64_t OutlierStore::BlockReadBytes(int64_t block) const {
  if (!options_.enabled()) return 0;
  return kOutlierBlockHeaderBytes +
         static_cast<int64_t>(KeyEntries(block).size() + ValueEntries(block).size()) *
             kOutlierEntryBytes;
}

std::vector<uint8_t> OutlierStore::BlockBytes(int64_t block) const {
  const auto keys = KeyEntries(block);
  const auto values = ValueEntries(block);
  std::vector<uint8_t> out;
  out.reserve(kOutlierBlockHeaderBytes + (keys.size() + values.size()) * kOutlierEntryBytes);
  for (size_t n : {keys.size(), values.size()}) {
    out.push_back(static_cast<uint8_t>(n));
    out.push_back(static_cast<uint8_t>(n >> 8));
  }
  for (const auto list : {keys, values}) {
    for (const OutlierEntry& e : list) {
      out.push_back(e.token);
      out.push_back(e.channel);
      out.push_back(static_cast<uint8_t>(e.z_half));
      out.push_back(static_cast<uint8_t>(e.z_half >> 8));
    }
  }
  return out;
}

void OutlierStore::AppendBlockBytes(std::span<const uint8_t> bytes, int tokens_in_block) {
  if (tokens_ % kBlockTokens != 0) {
    throw InvalidArgument("tokens", "outlier blocks append on a block boundary only");
  }
  if (tokens_in_block < 1 || tokens_in_block > kBlockTokens) {
    throw InvalidArgument("tokens_in_block", "must be in [1, 256]");
  }
  if (bytes.size() < size_t{kOutlierBlockHeaderBytes}) throw CorruptObject("outliers", "truncated");
  const size_t counts[2] = {static_cast<size_t>(bytes[0] | (bytes[1] << 8)),
                            static_cast<size_t>(bytes[2] | (bytes[3] << 8))};
  if (bytes.size() != kOutlierBlockHeaderBytes + (counts[0] + counts[1]) * kOutlierEntryBytes) {
    throw CorruptObject("outliers", "size does not match its counts");
  }
  if (static_cast<int64_t>(std::max(counts[0], counts[1])) > options_.block_cap) {
    throw CorruptObject("outliers", "more entries than the block budget " +
                                        std::to_string(options_.block_cap));
  }
  std::vector<OutlierEntry> parsed[2];
  size_t at = kOutlierBlockHeaderBytes;
  for (int kind = 0; kind < 2; ++kind) {
    int per_token = 0;
    for (size_t n = 0; n < counts[kind]; ++n, at += kOutlierEntryBytes) {
      const OutlierEntry e{bytes[at], bytes[at + 1],
                           static_cast<uint16_t>(bytes[at + 2] | (bytes[at + 3] << 8))};
      if (e.token >= tokens_in_block || e.channel >= head_dim_ ||
          !std::isfinite(HalfToFloat(e.z_half))) {
        throw CorruptObject("outliers", "entry out of range");
      }
      if (!parsed[kind].empty()) {
        const OutlierEntry& prev = parsed[kind].back();
        if (e.token < prev.token || (e.token == prev.token && e.channel <= prev.channel)) {
          throw CorruptObject("outliers", "entries not sorted by (token, channel)");
        }
        per_token = e.token == prev.token ? per_token + 1 : 1;
      } else {
        per_token = 1;
      }
      if (per_token > options_.cap) throw CorruptObject("outliers", "more entries than the cap");
      parsed[kind].push_back(e);
    }
  }
  key_entries_.insert(key_entries_.end(), parsed[0].begin(), parsed[0].end());
  value_entries_.insert(value_entries_.end(), parsed[1].begin(), parsed[1].end());
  key_offset_.push_back(static_cast<int64_t>(key_entries_.size()));
  value_offset_.push_back(static_cast<int64_t>(value_entries_.size()));
  tokens_ += tokens_in_block;
}

namespace {

// logits[h * stride + token] += scaled_queries[h * d + channel] * key_std[channel] *
// correction(entry) for every entry and query head: the K correction of either key format.
template <typename Correction>
void AddKeyCorrections(std::span<const OutlierEntry> entries, const Correction& correction,
                       std::span<const float> key_std, const float* scaled_queries, int g, int d,
                       float* logits, int64_t stride) {
  for (const OutlierEntry& e : entries) {
    const float delta = key_std[e.channel] * correction(e);
    for (int h = 0; h < g; ++h) {
      logits[h * stride + e.token] += scaled_queries[h * d + e.channel] * delta;
    }
  }
}

}  // namespace

void AddKeyOutlierLogits(std::span<const OutlierEntry> entries, const LloydTree& tree,
                         const uint8_t* key_depth, std::span<const float> key_std,
                         const float* scaled_queries, int g, int d, float* logits, int64_t stride) {
  AddKeyCorrections(
      entries,
      [&](const OutlierEntry& e) {
        return OutlierCorrection(tree, e.z_half, key_depth[e.channel]);
      },
      key_std, scaled_queries, g, d, logits, stride);
}

float ByteKeyOutlierCorrection(uint16_t z_half) {
  const float z = HalfToFloat(z_half);
  return z - (z >= 0.0f ? kKeyByteOutermost : -kKeyByteOutermost);
}

void AddByteKeyOutlierLogits(std::span<const OutlierEntry> entries,
                             std::span<const float> key_std, const float* scaled_queries, int g,
                             int d, float* logits, int64_t stride) {
  AddKeyCorrections(
      entries, [](const OutlierEntry& e) { return ByteKeyOutlierCorrection(e.z_half); }, key_std,
      scaled_queries, g, d, logits, stride);
}

void AddValueOutlierSums(std::span<const OutlierEntry> entries, const LloydTree& tree,
                         const uint8_t* value_depth, const float* probabilities, int g,
                         int64_t stride, int d, float* acc) {
  for (const OutlierEntry& e : entries) {
    const float delta = OutlierCorrection(tree, e.z_half, value_depth[e.token]);
    for (int h = 0; h < g; ++h) {
      acc[h * d + e.channel] += probabilities[h * stride + e.token] * delta;
    }
  }
}

}  // namespace readkv::codec
