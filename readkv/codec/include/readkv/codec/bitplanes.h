// Bit-plane storage of ReadKV codes for one (layer, KV head) (docs/readkv.md, "Bit planes").
//
// Plane p (0-based) holds bit p of each W-bit code counted from the most significant bit, so
// reading planes [0, t) gives the depth-t prefix of every code.
// - Keys are channel-major: for each 256-token block, channel c and plane p, one 256-bit vector
//   over the block's tokens (32 bytes, one DRAM sector). Token j of a block is bit (j % 64) of
//   64-bit word (j / 64). Reading channel c to depth t in a block reads t * 32 bytes.
// - Values are token-major: for each token i and plane p, one d-bit vector over the channels
//   (d / 8 bytes). Channel c is bit (c % 8) of byte (c / 8).
// Tokens are appended one at a time; a partly filled block already holds its tokens' bits.
// Not thread-safe for writes; concurrent reads of a store nobody writes are safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace readkv::codec {

inline constexpr int kBlockTokens = 256;
inline constexpr int kKeyPlaneBytes = kBlockTokens / 8;   // 32
inline constexpr int kKeyPlaneWords = kBlockTokens / 64;  // 4

class BitPlaneStore {
 public:
  // Throws InvalidArgument("head_dim") unless d is a power of two >= 8, and
  // InvalidArgument("store_bits") unless 1 <= W <= 8.
  BitPlaneStore(int head_dim, int store_bits);

  int head_dim() const { return head_dim_; }
  int store_bits() const { return store_bits_; }
  int64_t tokens() const { return tokens_; }
  int64_t blocks() const { return (tokens_ + kBlockTokens - 1) / kBlockTokens; }

  // Appends one token given its d key codes and d value codes (each < 2^W). Throws
  // InvalidArgument("key_codes" / "value_codes") on a wrong count or a code >= 2^W.
  void Append(std::span<const uint8_t> key_codes, std::span<const uint8_t> value_codes);

  // The 4 words of key plane (block, channel, plane).
  const uint64_t* KeyPlane(int64_t block, int channel, int plane) const {
    return key_words_.data() + ((block * head_dim_ + channel) * store_bits_ + plane) *
                                   static_cast<int64_t>(kKeyPlaneWords);
  }
  // The d/8 bytes of value plane (token, plane).
  const uint8_t* ValuePlane(int64_t token, int plane) const {
    return value_bytes_.data() +
           (token * store_bits_ + plane) * static_cast<int64_t>(head_dim_ / 8);
  }

  // The depth-t prefix of a stored code (t in [0, W]); reads only planes [0, t).
  // Throws InvalidArgument("token" / "channel" / "depth") when out of range.
  uint8_t KeyCode(int64_t token, int channel, int depth) const;
  uint8_t ValueCode(int64_t token, int channel, int depth) const;

  // Raw bytes of one whole block (key planes then value planes of its tokens), for cache
  // objects, and the inverse. A restored partial block keeps `tokens_in_block` tokens.
  // AppendBlockBytes throws InvalidArgument("tokens") unless the store ends on a block boundary,
  // InvalidArgument("tokens_in_block") outside [1, 256], and CorruptObject("block") when the
  // size is wrong or key bits of absent tokens are set. Key words are little-endian.
  std::vector<uint8_t> BlockBytes(int64_t block) const;
  void AppendBlockBytes(std::span<const uint8_t> bytes, int tokens_in_block);
  // Size of one full block's bytes: d * W * 32 + 256 * W * d / 8.
  int64_t BlockByteSize() const;

  // Persistent payload bytes (allocated planes; a partial block counts whole key planes).
  int64_t PayloadBytes() const;

 private:
  int head_dim_;
  int store_bits_;
  int64_t tokens_ = 0;
  std::vector<uint64_t> key_words_;   // [block][channel][plane][4]
  std::vector<uint8_t> value_bytes_;  // [token][plane][d / 8]
};

}  // namespace readkv::codec
