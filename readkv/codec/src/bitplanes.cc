#include "readkv/codec/bitplanes.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "plane_checks.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

// Transposes an 8x8 bit matrix held row-major in a word (bit 8r + c -> bit 8c + r); Hacker's
// Delight, section 7-3.
uint64_t TransposeBits8x8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAULL;
  x = x ^ t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCULL;
  x = x ^ t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ULL;
  return x ^ t ^ (t << 28);
}

}  // namespace

BitPlaneStore::BitPlaneStore(int head_dim, int store_bits)
    : head_dim_(head_dim), store_bits_(store_bits) {
  internal::CheckPlaneGeometry(head_dim, 8, store_bits);
}

void BitPlaneStore::Append(std::span<const uint8_t> key_codes,
                           std::span<const uint8_t> value_codes) {
  internal::CheckCodes(key_codes, head_dim_, store_bits_, "key_codes");
  internal::CheckCodes(value_codes, head_dim_, store_bits_, "value_codes");
  const int w = store_bits_;
  const int64_t block = tokens_ / kBlockTokens;
  const int slot = static_cast<int>(tokens_ % kBlockTokens);
  const size_t block_words = static_cast<size_t>(head_dim_) * w * kKeyPlaneWords;
  // Key planes grow one whole zeroed block at a time; the block's later tokens OR into it.
  if (slot == 0) key_words_.resize(key_words_.size() + block_words, 0);

  uint64_t* words = key_words_.data() + static_cast<size_t>(block) * block_words + slot / 64;
  const int shift = slot % 64;
  for (int c = 0; c < head_dim_; ++c) {
    const unsigned code = key_codes[static_cast<size_t>(c)];
    uint64_t* channel_words = words + static_cast<size_t>(c) * w * kKeyPlaneWords;
    for (int p = 0; p < w; ++p) {
      channel_words[p * kKeyPlaneWords] |= static_cast<uint64_t>((code >> (w - 1 - p)) & 1u)
                                           << shift;
    }
  }

  const size_t plane_bytes = static_cast<size_t>(head_dim_ / 8);
  const size_t old_size = value_bytes_.size();
  value_bytes_.resize(old_size + static_cast<size_t>(w) * plane_bytes);
  uint8_t* out = value_bytes_.data() + old_size;
  for (size_t b = 0; b < plane_bytes; ++b) {
    // Eight channels' codes as an 8x8 bit matrix (byte k = channel 8b + k); after the transpose
    // byte j holds bit j of each of the eight codes, i.e. one byte of plane W - 1 - j.
    uint64_t x = 0;
    for (int k = 0; k < 8; ++k) x |= static_cast<uint64_t>(value_codes[8 * b + k]) << (8 * k);
    x = TransposeBits8x8(x);
    for (int p = 0; p < w; ++p) {
      out[static_cast<size_t>(p) * plane_bytes + b] = static_cast<uint8_t>(x >> (8 * (w - 1 - p)));
    }
  }
  ++tokens_;
}

uint8_t BitPlaneStore::KeyCode(int64_t token, int channel, int depth) const {
  if (token < 0 || token >= tokens_) throw InvalidArgument("token", std::to_string(token));
  if (channel < 0 || channel >= head_dim_) {
    throw InvalidArgument("channel", std::to_string(channel));
  }
  if (depth < 0 || depth > store_bits_) throw InvalidArgument("depth", std::to_string(depth));
  const int slot = static_cast<int>(token % kBlockTokens);
  const uint64_t* words = KeyPlane(token / kBlockTokens, channel, 0) + slot / 64;
  unsigned code = 0;
  for (int p = 0; p < depth; ++p) {
    code = (code << 1) | static_cast<unsigned>((words[p * kKeyPlaneWords] >> (slot % 64)) & 1u);
  }
  return static_cast<uint8_t>(code);
}

uint8_t BitPlaneStore::ValueCode(int64_t token, int channel, int depth) const {
  if (token < 0 || token >= tokens_) throw InvalidArgument("token", std::to_string(token));
  if (channel < 0 || channel >= head_dim_) {
    throw InvalidArgument("channel", std::to_string(channel));
  }
  if (depth < 0 || depth > store_bits_) throw InvalidArgument("depth", std::to_string(depth));
  const uint8_t* planes = ValuePlane(token, 0) + channel / 8;
  const int plane_bytes = head_dim_ / 8;
  unsigned code = 0;
  for (int p = 0; p < depth; ++p) {
    code = (code << 1) | ((planes[p * plane_bytes] >> (channel % 8)) & 1u);
  }
  return static_cast<uint8_t>(code);
}

int64_t BitPlaneStore::BlockByteSize() const {
  return static_cast<int64_t>(head_dim_) * store_bits_ * kKeyPlaneBytes +
         static_cast<int64_t>(kBlockTokens) * store_bits_ * (head_dim_ / 8);
}

std::vector<uint8_t> BitPlaneStore::BlockBytes(int64_t block) const {
  if (block < 0 || block >= blocks()) {
    throw InvalidArgument("block", std::to_string(block) + " of " + std::to_string(blocks()));
  }
  const int64_t first = block * kBlockTokens;
  const int64_t count = std::min<int64_t>(kBlockTokens, tokens_ - first);
  const size_t block_words = static_cast<size_t>(head_dim_) * store_bits_ * kKeyPlaneWords;
  const size_t value_size = static_cast<size_t>(count) * store_bits_ * (head_dim_ / 8);
  std::vector<uint8_t> out(block_words * 8 + value_size);
  // Words are written little-endian so the bytes are the same on every host.
  const uint64_t* words = key_words_.data() + static_cast<size_t>(block) * block_words;
  for (size_t i = 0; i < block_words; ++i) {
    for (int b = 0; b < 8; ++b) out[i * 8 + b] = static_cast<uint8_t>(words[i] >> (8 * b));
  }
  if (value_size > 0) {
    std::memcpy(out.data() + block_words * 8, ValuePlane(first, 0), value_size);
  }
  return out;
}

void BitPlaneStore::AppendBlockBytes(std::span<const uint8_t> bytes, int tokens_in_block) {
  if (tokens_ % kBlockTokens != 0) {
    throw InvalidArgument("tokens", "whole-block append needs a block boundary, store holds " +
                                        std::to_string(tokens_) + " tokens");
  }
  if (tokens_in_block < 1 || tokens_in_block > kBlockTokens) {
    throw InvalidArgument("tokens_in_block", "must be in [1, " + std::to_string(kBlockTokens) +
                                                 "], got " + std::to_string(tokens_in_block));
  }
  const size_t block_words = static_cast<size_t>(head_dim_) * store_bits_ * kKeyPlaneWords;
  const size_t value_size = static_cast<size_t>(tokens_in_block) * store_bits_ * (head_dim_ / 8);
  if (bytes.size() != block_words * 8 + value_size) {
    throw CorruptObject("block", "expected " + std::to_string(block_words * 8 + value_size) +
                                     " bytes for " + std::to_string(tokens_in_block) +
                                     " tokens, got " + std::to_string(bytes.size()));
  }
  std::vector<uint64_t> words(block_words);
  for (size_t i = 0; i < block_words; ++i) {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= static_cast<uint64_t>(bytes[i * 8 + b]) << (8 * b);
    words[i] = v;
  }
  // Bits of absent tokens must be clear: later appends OR into them.
  if (tokens_in_block < kBlockTokens) {
    for (size_t i = 0; i < block_words; ++i) {
      const int first_token_of_word = static_cast<int>(i % kKeyPlaneWords) * 64;
      const int present = std::clamp(tokens_in_block - first_token_of_word, 0, 64);
      const uint64_t allowed = present == 64 ? ~uint64_t{0} : (uint64_t{1} << present) - 1;
      if ((words[i] & ~allowed) != 0) {
        throw CorruptObject("block", "key bits set for tokens beyond the block's " +
                                         std::to_string(tokens_in_block));
      }
    }
  }
  key_words_.insert(key_words_.end(), words.begin(), words.end());
  value_bytes_.insert(value_bytes_.end(),
                      bytes.begin() + static_cast<std::ptrdiff_t>(block_words * 8), bytes.end());
  tokens_ += tokens_in_block;
}

int64_t BitPlaneStore::PayloadBytes() const {
  return static_cast<int64_t>(key_words_.size() * sizeof(uint64_t) + value_bytes_.size());
}

}  // namespace readkv::codec
