// Outliers of the ReadKV code: a capped sparse list beside the bit planes (docs/readkv.md,
// "Outliers"), KVQuant's dense-and-sparse split adapted to a progressive code.
//
// The Gaussian Lloyd tree clips: every standardised value z past its outermost threshold (|z| >
// 3.99 for W = 8) decodes as the outermost centroid (4.21). At write time, per (token, KV head)
// and separately for K and V, the elements with |z| > `threshold` (never below the tree's
// outermost threshold) are ranked by |z| (so by their clipping error), largest first (ties: lower
// channel), and the first `cap` of them are kept as entries (token in block, channel, z in
// IEEE fp16, rounded to nearest even). The bit planes store every value as before, clipped, so the
// planes are bit for bit those of a cache without outliers. Values past the cap stay clipped and
// are counted (`OutlierStats::dropped`).
// Each 256-token block and kind also has a budget, `block_cap` entries (the GPU's fixed-size page
// block, docs/readkv.md "Outliers"): tokens are taken in order, and a token that finds only
// n < its selection's size left in its block keeps the first n of its ranking (largest |z|) and
// drops the rest (`OutlierStats::over_budget`, part of `dropped`); a full block keeps nothing
// more.
//
// A reader that reconstructs a kept element at depth t (t in [0, W]) from the planes gets
// centroid_t(code); the entry corrects it exactly to fp16(z) by adding OutlierCorrection(z, t) =
// fp16(z) - centroid_t(code). Because |z| is past the outermost threshold the code is all ones (z >
// 0) or all zeros (z < 0), so the correction needs the sign and the depth only, never the planes.
// In a reader: for K, logit_{h,i} += q~_{h,c} sigma_c / sqrt(d) * correction (AddKeyOutlierLogits);
// for V, acc_{h,c} += p_{h,i} * correction in the standardised domain, before sigma, mu and the
// inverse transform (AddValueOutlierSums). Both are reader-independent: the greedy, constrained,
// full and tile readers call the same two functions.
//
// Storage, per (layer, KV head) and 256-token block: u16 key count, u16 value count, then the key
// entries and the value entries, 4 bytes each (u8 token in block, u8 channel, u16 fp16 bits),
// sorted by (token, channel). Channels must fit u8 (d <= 256). Capacity is 4 bytes per block and
// head plus 4 bytes per entry; a reader reads every entry of the blocks it reads.
// Pure; OutlierStore is not thread-safe for writes, concurrent reads are safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "readkv/codec/codebook.h"

namespace readkv::codec {

inline constexpr int kMaxOutlierCap = 16;
inline constexpr int kOutlierEntryBytes = 4;
inline constexpr int kOutlierBlockHeaderBytes = 4;
// The default per-block budget (entries per 256-token block, KV head and kind), chosen by
// measurement (docs/readkv.md, "Outliers": the most any block selected on the development seed,
// with headroom, and the GPU's page block <= 5% of the payload at d = 64, W = 8).
inline constexpr int kDefaultOutlierBlockCap = 160;
// A block holds at most 256 tokens x kMaxOutlierCap entries.
inline constexpr int kMaxOutlierBlockCap = 256 * kMaxOutlierCap;

// Part of the cache identity: a cache written with another cap, threshold or block budget is
// another cache.
struct OutlierOptions {
  int cap = 0;             // entries per (token, KV head) for K and again for V; 0 = off
  float threshold = 0.0f;  // |z| past which a value is an outlier; 0 = the tree's outermost
  int block_cap = 0;       // entries per (256-token block, KV head) and kind; 0 = the default
  bool enabled() const { return cap > 0; }
};

// The options with the threshold resolved for `tree` (0 -> its outermost threshold) and the
// block budget (0 -> kDefaultOutlierBlockCap). Throws InvalidArgument("outlier_cap") outside
// [0, kMaxOutlierCap], InvalidArgument("outlier_threshold") for a non-finite threshold or one
// below the tree's outermost threshold (such values are not clipped),
// InvalidArgument("outlier_block_cap") outside [0, kMaxOutlierBlockCap],
// InvalidArgument("head_dim") for d > 256 with outliers on. Off stays {0, 0, 0}.
OutlierOptions ResolveOutlierOptions(const OutlierOptions& options, const LloydTree& tree,
                                     int head_dim);

// IEEE binary16 round to nearest even (saturating to +-65504 is not needed for z) and back.
uint16_t FloatToHalf(float x);
float HalfToFloat(uint16_t h);

struct OutlierEntry {
  uint8_t token = 0;    // within its 256-token block
  uint8_t channel = 0;  // in the transformed domain
  uint16_t z_half = 0;  // the standardised value, fp16 bits
};

// fp16(z) - centroid_t of the clipped code (the outermost node of depth t on z's side; 0 at t=0).
float OutlierCorrection(const LloydTree& tree, uint16_t z_half, int depth);

// Kept and dropped outliers, counted at write time.
struct OutlierStats {
  int64_t beyond = 0;       // values with |z| > threshold
  int64_t kept = 0;         // of them, entries written
  int64_t over_budget = 0;  // of them, selected (within the cap) but past the block's budget
  int64_t dropped() const { return beyond - kept; }
};

// Selects one token's entries from its d standardised values: writes up to `cap` channels into
// `out` (sorted by channel) and returns how many; `beyond` gets the count past the threshold.
// The cap is min(resolved.cap, out_channels.size()): a shorter span keeps the first of the
// ranking (the block budget's rule).
int SelectOutliers(std::span<const float> z, const OutlierOptions& resolved,
                   std::span<uint8_t> out_channels, int64_t& beyond);

// The outlier lists of one (layer, KV head), K and V, per 256-token block.
class OutlierStore {
 public:
  OutlierStore() = default;
  // `resolved` must already be resolved (ResolveOutlierOptions): InvalidArgument
  // ("outlier_block_cap") for a block budget outside [1, kMaxOutlierBlockCap] with outliers on.
  OutlierStore(int head_dim, const OutlierOptions& resolved);

  int64_t tokens() const { return tokens_; }
  int64_t blocks() const { return static_cast<int64_t>(key_offset_.size()) - 1; }

  // Appends one token given its standardised K and V (d each), within the block budget; counts
  // into key_stats() / value_stats(). Only the token count moves when outliers are off.
  void AppendToken(std::span<const float> key_z, std::span<const float> value_z);

  std::span<const OutlierEntry> KeyEntries(int64_t block) const;
  std::span<const OutlierEntry> ValueEntries(int64_t block) const;
  int64_t entries() const {
    return static_cast<int64_t>(key_entries_.size() + value_entries_.size());
  }
  const OutlierStats& key_stats() const { return key_stats_; }
  const OutlierStats& value_stats() const { return value_stats_; }

  // Persistent bytes: 4 per block (the two counts) plus 4 per entry.
  int64_t Bytes() const;
  // Bytes of block `block` read by a reader that reads the block: the same formula for one block.
  int64_t BlockReadBytes(int64_t block) const;

  // One block's serialised section (the layout above), and the inverse for a block appended to
  // a store that ends on a block boundary. AppendBlockBytes throws CorruptObject("outliers") when
  // the size, a count (or one past the block budget), the order, a token (>= tokens_in_block), a
  // channel (>= d), an entry past the cap for its token, or a |z| not past the threshold is
  // wrong, InvalidArgument("tokens") off a block boundary.
  std::vector<uint8_t> BlockBytes(int64_t block) const;
  void AppendBlockBytes(std::span<const uint8_t> bytes, int tokens_in_block);

 private:
  void AppendKind(std::span<const float> z, std::vector<OutlierEntry>& entries,
                  std::vector<int64_t>& offsets, OutlierStats& stats);

  int head_dim_ = 0;
  OutlierOptions options_;
  int64_t tokens_ = 0;
  std::vector<OutlierEntry> key_entries_, value_entries_;
  std::vector<int64_t> key_offset_{0}, value_offset_{0};  // [blocks + 1]
  OutlierStats key_stats_, value_stats_;
};

// The K correction of one block's entries: for every entry (token j of the block, channel c),
// logits[h * stride + j] += scaled_queries[h * d + c] * key_std[c] * OutlierCorrection(z,
// key_depth[c]) for the g query heads. scaled_queries: [g][d] transformed queries times 1/sqrt(d);
// logits: the block's first column. Call before the softmax.
void AddKeyOutlierLogits(std::span<const OutlierEntry> entries, const LloydTree& tree,
                         const uint8_t* key_depth, std::span<const float> key_std,
                         const float* scaled_queries, int g, int d, float* logits, int64_t stride);

// The same for byte keys (key_bytes.h), read whole: the correction is fp16(z) - (+-3.984375),
// ByteKeyOutlierCorrection (every listed z is past the grid's extreme cells, as for the tree).
float ByteKeyOutlierCorrection(uint16_t z_half);
void AddByteKeyOutlierLogits(std::span<const OutlierEntry> entries,
                             std::span<const float> key_std, const float* scaled_queries, int g,
                             int d, float* logits, int64_t stride);

// The V correction of one block's entries: acc[h * d + c] += probabilities[h * stride + j] *
// OutlierCorrection(z, value_depth[j]) for the g query heads; acc is in the standardised domain
// (before sigma, mu and the inverse transform). value_depth and probabilities: the block's first
// token.
void AddValueOutlierSums(std::span<const OutlierEntry> entries, const LloydTree& tree,
                         const uint8_t* value_depth, const float* probabilities, int g,
                         int64_t stride, int d, float* acc);

}  // namespace readkv::codec
