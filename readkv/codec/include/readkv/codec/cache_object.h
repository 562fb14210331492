// Cache identity and the versioned on-disk format of a stored cache object
// (docs/cache-identity.md).
//
// A stored object is valid only for the exact thing that wrote it. Loading an object whose
// identity differs from the reader's throws IdentityMismatch naming the first differing field
// (in the order of the struct below); a bad magic, a truncated object or a checksum that fails
// throws CorruptObject naming the part. Nothing is ever decoded from a refused object.
// The codec does no I/O: objects are serialised to and parsed from byte buffers.
//
// Layout (little-endian):
//   "RKVCACHE" | u32 format_version | u32 header_bytes | header (canonical JSON) |
//   u64 XXH3-64 of (format_version, header_bytes, header) | u32 block_count |
//   block_count x ( u64 payload_bytes | u64 XXH3-64 of the payload | payload ) |
//   u32 outlier_count | outlier_count x ( u64 bytes | u64 XXH3-64 of them | bytes )
// Version 3 added the outlier section (outliers.h): outlier_count is layers * heads_kv when the
// identity's outlier_cap is above 0 (one OutlierStore::BlockBytes per (layer, KV head), same
// order as the blocks) and 0 otherwise. The cap and threshold are identity fields, so an object
// written without outliers (or with another cap or threshold) is IdentityMismatch("outlier_cap")
// or ("outlier_threshold") for a reader that keeps them, and the other way round.
// Version 4 added the identity field `outlier_block_cap` (the lists' per-block budget,
// OutlierOptions::block_cap): a version-3 object, written without a budget, is
// IdentityMismatch("format_version"), never read as if it had one; one of another budget is
// IdentityMismatch("outlier_block_cap").
// Version 2 put format_version and header_bytes under the header's checksum (version 1 summed the
// header alone), so a flipped byte anywhere before the blocks reads as CorruptObject("header"),
// never as another format version. Every later version keeps this preamble: an object of another
// version whose preamble checksum holds is IdentityMismatch("format_version"); so is a version-1
// object whose own checksum holds. Version 3 added the identity field `layout` (the byte order
// of the planes: "planes", bitplanes.h, or "tiles16", tile_planes.h); an object of the other
// layout is IdentityMismatch("layout").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace readkv::codec {

inline constexpr uint32_t kCacheFormatVersion = 4;

struct CacheIdentity {
  std::string model_id;
  std::string weights_digest;
  int layers = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  std::string rope_type = "default";
  double rope_theta = 10000.0;
  std::string rope_scaling = "none";  // canonical text of any scaling settings
  uint64_t key_transform_seed = 0;
  uint64_t value_transform_seed = 0;
  std::string calibration_digest;
  std::string codebook_id;
  int codebook_version = 0;
  int store_bits = 0;
  int outlier_cap = 0;             // OutlierOptions::cap; 0 = no outlier lists
  double outlier_threshold = 0.0;  // the resolved OutlierOptions::threshold (a float); 0 when off
  int outlier_block_cap = 0;       // the resolved OutlierOptions::block_cap; 0 when off
  std::string layout = "planes";  // PlaneLayoutName(): "planes" | "tiles16"
  uint32_t format_version = kCacheFormatVersion;

  // Canonical JSON (fixed key order) and a stable 128-bit hex digest of it.
  std::string ToJson() const;
  static CacheIdentity FromJson(const std::string& text);  // throws CorruptObject("header")
  std::string Digest() const;

  // Throws IdentityMismatch for the first field where `found` differs from *this.
  void RequireSame(const CacheIdentity& found) const;
  bool operator==(const CacheIdentity&) const = default;
};

// One stored object: the encoded KV of one prefix block (up to kBlockTokens tokens starting at
// `first_token`) for every (layer, KV head), in the BlockBytes form of the identity's layout
// (BitPlaneStore or TilePlaneStore).
struct CacheObject {
  CacheIdentity identity;
  std::string prefix_digest;  // what the tokens of the prefix up to this block hash to
  int64_t first_token = 0;
  int tokens = 0;
  // Index layer * heads_kv + head.
  std::vector<std::vector<uint8_t>> blocks;
  // OutlierStore::BlockBytes per (layer, KV head), same index; empty when outlier_cap is 0.
  std::vector<std::vector<uint8_t>> outliers;
};

// Throws InvalidArgument ("format_version", "tokens", "first_token", "blocks") when the object
// is inconsistent: only version kCacheFormatVersion is written, tokens in [1, kBlockTokens],
// exactly layers * heads_kv blocks, each of the layout's BlockBytes size for `tokens`;
// "layout" when the identity names no known layout; "outliers" unless there is one section
// per block with outliers on (none off), each of 4 bytes plus 4 per entry its counts announce.
std::vector<uint8_t> SerializeCacheObject(const CacheObject& object);

// Parses and verifies an object against the reader's identity. Checks, in order: magic, the
// preamble's checksum (format version, header length and header), format version, identity (field
// by field), block count, every block checksum, the outlier count and every outlier section's
// checksum and size against its counts, no trailing bytes, every block's size. Truncation anywhere
// throws CorruptObject naming the part ("magic", "format_version", "header", "block_count",
// "block <i>", "outlier_count", "outliers <i>"); nothing is read out of bounds. The entries
// themselves are checked when appended (OutlierStore::AppendBlockBytes). Throws
// InvalidArgument("format_version") if `expected` asks for a version this codec cannot read.
CacheObject ParseCacheObject(std::span<const uint8_t> bytes, const CacheIdentity& expected);

// XXH3-128 of bytes as 32 hex digits; the project's one content digest.
std::string ContentDigest(std::span<const uint8_t> bytes);
std::string ContentDigest(const std::string& text);

}  // namespace readkv::codec
