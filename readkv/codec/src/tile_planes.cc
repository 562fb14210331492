#include "readkv/codec/tile_planes.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "plane_checks.h"
#include "readkv/codec/bitplanes.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/key_bytes.h"

namespace readkv::codec {
namespace {

// Writes the W bits of `code` at bit index `bit` of each plane of one tile.
void PutCode(uint8_t* tile, int store_bits, int bit, unsigned code) {
  for (int p = 0; p < store_bits; ++p) {
    tile[p * kTilePlaneBytes + bit / 8] |=
        static_cast<uint8_t>(((code >> (store_bits - 1 - p)) & 1u) << (bit % 8));
  }
}

// Whether element `bit` of a tile holds a nonzero code (every plane's bit, or the byte).
bool CodeSet(const uint8_t* tile, int store_bits, bool bytes, int bit) {
  if (bytes) return tile[bit] != 0;
  for (int p = 0; p < store_bits; ++p) {
    if ((tile[p * kTilePlaneBytes + bit / 8] >> (bit % 8)) & 1u) return true;
  }
  return false;
}

}  // namespace

std::string_view PlaneLayoutName(PlaneLayout layout) {
  switch (layout) {
    case PlaneLayout::kTiles:
      return "tiles16";
    case PlaneLayout::kTilesByteKeys:
      return "tiles16-kbytes";
    case PlaneLayout::kPlanes:
      break;
  }
  return "planes";
}

PlaneLayout ParsePlaneLayout(std::string_view name) {
  if (name == "planes") return PlaneLayout::kPlanes;
  if (name == "tiles16") return PlaneLayout::kTiles;
  if (name == "tiles16-kbytes") return PlaneLayout::kTilesByteKeys;
  throw InvalidArgument("layout", "must be planes, tiles16 or tiles16-kbytes, got '" +
                                      std::string(name) + "'");
}

TilePlaneStore::TilePlaneStore(int head_dim, int store_bits, PlaneLayout layout)
    : head_dim_(head_dim), store_bits_(store_bits), layout_(layout) {
  internal::CheckPlaneGeometry(head_dim, kTileChannels, store_bits);
  if (!IsTileLayout(layout)) {
    throw InvalidArgument("layout", "a tile store holds a tile layout, got planes");
  }
  if (byte_keys() && store_bits != kKeyByteStoreBits) {
    throw InvalidArgument("store_bits", "byte keys need W = 8, got " + std::to_string(store_bits));
  }
}

void TilePlaneStore::Append(std::span<const uint8_t> key_codes,
                            std::span<const uint8_t> value_codes) {
  internal::CheckCodes(key_codes, head_dim_, store_bits_, "key_codes");
  internal::CheckCodes(value_codes, head_dim_, store_bits_, "value_codes");
  const int64_t tile = tokens_ / kTileTokens;
  const int slot = static_cast<int>(tokens_ % kTileTokens);
  if (slot == 0) {
    // A token tile grows whole and zeroed; its later tokens OR into it.
    const auto row_bytes = static_cast<size_t>(groups() * TileBytes());
    key_bytes_.resize(key_bytes_.size() + row_bytes, 0);
    value_bytes_.resize(value_bytes_.size() + row_bytes, 0);
  }
  for (int c = 0; c < head_dim_; ++c) {
    const int group = c / kTileChannels;
    const int lane_channel = c % kTileChannels;
    const auto offset = static_cast<size_t>(TileOffset(tile, group));
    const int key_bit = TileBitIndex(slot, lane_channel);
    if (byte_keys()) {
      key_bytes_[offset + static_cast<size_t>(key_bit)] = key_codes[static_cast<size_t>(c)];
    } else {
      PutCode(key_bytes_.data() + offset, store_bits_, key_bit, key_codes[static_cast<size_t>(c)]);
    }
    PutCode(value_bytes_.data() + offset, store_bits_, TileBitIndex(lane_channel, slot),
            value_codes[static_cast<size_t>(c)]);
  }
  ++tokens_;
}

uint8_t TilePlaneStore::CodeAt(const std::vector<uint8_t>& bytes, int64_t token_tile, int group,
                               int bit_index, int depth) const {
  const uint8_t* tile = bytes.data() + TileOffset(token_tile, group);
  unsigned code = 0;
  for (int p = 0; p < depth; ++p) {
    code = (code << 1) | ((tile[p * kTilePlaneBytes + bit_index / 8] >> (bit_index % 8)) & 1u);
  }
  return static_cast<uint8_t>(code);
}

uint8_t TilePlaneStore::KeyCode(int64_t token, int channel, int depth) const {
  if (token < 0 || token >= tokens_) throw InvalidArgument("token", "out of range");
  if (channel < 0 || channel >= head_dim_) throw InvalidArgument("channel", "out of range");
  if (depth < 0 || depth > store_bits_) throw InvalidArgument("depth", "out of range");
  const int64_t tile = token / kTileTokens;
  const int bit = TileBitIndex(static_cast<int>(token % kTileTokens), channel % kTileChannels);
  if (byte_keys()) {
    if (depth != store_bits_) throw InvalidArgument("depth", "byte keys are read whole (depth 8)");
    return key_bytes_[static_cast<size_t>(TileOffset(tile, channel / kTileChannels) + bit)];
  }
  return CodeAt(key_bytes_, tile, channel / kTileChannels, bit, depth);
}

uint8_t TilePlaneStore::ValueCode(int64_t token, int channel, int depth) const {
  if (token < 0 || token >= tokens_) throw InvalidArgument("token", "out of range");
  if (channel < 0 || channel >= head_dim_) throw InvalidArgument("channel", "out of range");
  if (depth < 0 || depth > store_bits_) throw InvalidArgument("depth", "out of range");
  return CodeAt(value_bytes_, token / kTileTokens, channel / kTileChannels,
                TileBitIndex(channel % kTileChannels, static_cast<int>(token % kTileTokens)),
                depth);
}

int64_t TilePlaneStore::BlockByteSize(int head_dim, int store_bits, int tokens) {
  const int64_t tiles = (tokens + kTileTokens - 1) / kTileTokens;
  return 2 * tiles * (head_dim / kTileChannels) * store_bits * kTilePlaneBytes;
}

int64_t TilePlaneStore::BlockByteSize() const {
  return BlockByteSize(head_dim_, store_bits_, kBlockTokens);
}

int64_t TilePlaneStore::PayloadBytes() const {
  return static_cast<int64_t>(key_bytes_.size() + value_bytes_.size());
}

std::vector<uint8_t> TilePlaneStore::BlockBytes(int64_t block) const {
  const int64_t first = block * kBlockTokens;
  if (block < 0 || first >= tokens_) throw InvalidArgument("block", "out of range");
  const int64_t tokens = std::min<int64_t>(kBlockTokens, tokens_ - first);
  const int64_t half = BlockByteSize(head_dim_, store_bits_, static_cast<int>(tokens)) / 2;
  const auto start = static_cast<size_t>(TileOffset(first / kTileTokens, 0));
  const auto n = static_cast<size_t>(half);
  std::vector<uint8_t> out(2 * n);
  std::memcpy(out.data(), key_bytes_.data() + start, n);
  std::memcpy(out.data() + n, value_bytes_.data() + start, n);
  return out;
}

void TilePlaneStore::AppendBlockBytes(std::span<const uint8_t> bytes, int tokens_in_block) {
  if (tokens_ % kBlockTokens != 0) {
    throw InvalidArgument("tokens", "a block can only be appended after whole blocks");
  }
  if (tokens_in_block < 1 || tokens_in_block > kBlockTokens) {
    throw InvalidArgument("tokens_in_block",
                          "must be in [1, 256], got " + std::to_string(tokens_in_block));
  }
  const int64_t size = BlockByteSize(head_dim_, store_bits_, tokens_in_block);
  if (static_cast<int64_t>(bytes.size()) != size) {
    throw CorruptObject("block", "has " + std::to_string(bytes.size()) + " bytes, expected " +
                                     std::to_string(size));
  }
  // Tokens past the end of the last token tile must have no bits set in any plane (no nonzero
  // byte, for byte keys).
  const int used = tokens_in_block % kTileTokens;
  if (used != 0) {
    const int64_t half = size / 2;
    const int64_t last_row = half - groups() * TileBytes();
    for (int64_t section : {int64_t{0}, half}) {
      for (int g = 0; g < groups(); ++g) {
        const uint8_t* tile = bytes.data() + section + last_row + g * TileBytes();
        for (int slot = used; slot < kTileTokens; ++slot) {
          for (int c = 0; c < kTileChannels; ++c) {
            const int bit = section == 0 ? TileBitIndex(slot, c) : TileBitIndex(c, slot);
            if (CodeSet(tile, store_bits_, section == 0 && byte_keys(), bit)) {
              throw CorruptObject("block", "bits of absent tokens are set");
            }
          }
        }
      }
    }
  }
  // resize + memcpy: a range insert trips a GCC 12 -Wstringop-overflow false positive at -O2.
  const auto half = static_cast<size_t>(size / 2);
  const size_t old = key_bytes_.size();
  key_bytes_.resize(old + half);
  value_bytes_.resize(old + half);
  std::memcpy(key_bytes_.data() + old, bytes.data(), half);
  std::memcpy(value_bytes_.data() + old, bytes.data() + half, half);
  tokens_ += tokens_in_block;
}

}  // namespace readkv::codec
