#include "readkv/codec/plane_decode.h"

#include <array>
#include <bit>
#include <cstring>

#include "readkv/codec/tile_planes.h"

namespace readkv::codec {
namespace {

static_assert(std::endian::native == std::endian::little,
              "packed codes are stored to bytes in little-endian order");

// kSpread[b] has bit k of b in bit 0 of byte k. Shifting a word of 8 packed codes left by one and
// or-ing kSpread[plane byte] appends one plane bit to 8 codes at once; codes have at most 8 bits
// and are shifted at most 7 times before their last bit, so no bit crosses into the next byte.
constexpr std::array<uint64_t, 256> MakeSpread() {
  std::array<uint64_t, 256> table{};
  for (int b = 0; b < 256; ++b) {
    uint64_t word = 0;
    for (int k = 0; k < 8; ++k) word |= static_cast<uint64_t>((b >> k) & 1) << (8 * k);
    table[static_cast<size_t>(b)] = word;
  }
  return table;
}
constexpr std::array<uint64_t, 256> kSpread = MakeSpread();

}  // namespace

void DecodeKeyBlockCodes(const BitPlaneStore& store, int64_t block, int channel, int depth,
                         uint8_t* codes) {
  uint64_t packed[kBlockTokens / 8] = {};
  for (int p = 0; p < depth; ++p) {
    const uint64_t* plane = store.KeyPlane(block, channel, p);
    for (int w = 0; w < kKeyPlaneWords; ++w) {
      const uint64_t word = plane[w];
      for (int m = 0; m < 8; ++m) {
        uint64_t& slot = packed[w * 8 + m];
        slot = (slot << 1) | kSpread[(word >> (8 * m)) & 0xffu];
      }
    }
  }
  std::memcpy(codes, packed, sizeof(packed));
}

void DecodeValueCodes(const BitPlaneStore& store, int64_t token, int depth, uint8_t* codes) {
  const int bytes = store.head_dim() / 8;
  for (int m = 0; m < bytes; ++m) {
    uint64_t packed = 0;
    for (int p = 0; p < depth; ++p) {
      packed = (packed << 1) | kSpread[store.ValuePlane(token, p)[m]];
    }
    std::memcpy(codes + 8 * m, &packed, sizeof(packed));
  }
}

void DecodeTileCodes(const uint8_t* tile, int depth, uint8_t* codes) {
  for (int lane = 0; lane < kTilePlaneBytes; ++lane) {
    uint64_t packed = 0;
    for (int p = 0; p < depth; ++p) {
      packed = (packed << 1) | kSpread[tile[p * kTilePlaneBytes + lane]];
    }
    std::memcpy(codes + 8 * lane, &packed, sizeof(packed));
  }
}

}  // namespace readkv::codec
