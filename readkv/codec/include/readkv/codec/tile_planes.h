// Tile-layout bit-plane storage of ReadKV codes for one (layer, KV head), the layout of the tile
// reader (docs/readkv.md, "The tile layout").
//
// The codes are the same W-bit Lloyd-tree codes as BitPlaneStore's (bitplanes.h); only where
// their bits sit differs. Tokens are cut into token tiles of 16 (tile r holds tokens 16r..16r+15)
// and channels into groups of 16 (group g holds channels 16g..16g+15). A tile is one token tile x
// one group, 256 scalars, and plane p of a tile (bit p of each code counted from the most
// significant bit) is one 256-bit vector: 32 bytes, one DRAM sector. Reading a tile to depth t
// reads its planes [0, t): exactly t sectors, nothing beyond.
//
// Byte order (little-endian store, offsets in bytes):
// - Keys and values are two separate arrays of the same shape, [token tile][group][plane][32]:
//   plane p of tile (r, g) starts at ((r * G + g) * W + p) * 32 with G = d / 16. A tile's planes
//   are contiguous, so depth t of one tile is one run of t * 32 bytes.
// - Inside a plane the 256 bits are in mma.sync m16n8k16 A-fragment order: byte l is lane l's
//   fragment, bit k of byte l is that lane's element a_k (TileElement() gives its row and column).
//   A warp reads one plane as one coalesced 32-byte transaction, one byte per lane, and each lane
//   receives exactly the bits of its own A fragment; a single thread reads it as two 16-byte
//   vectors. Decoding t planes into a lane's eight t-bit codes takes one shift-or per plane.
// - Key tiles put tokens on rows and channels on columns (A of q.K: M = tokens, K = channels);
//   value tiles put channels on rows and tokens on columns (A of p.V with V transposed: M =
//   channels, K = tokens), so both products load their A operand straight from the planes.
// A cache object's block (256 tokens: 16 token tiles) is the block's key tiles, then its value
// tiles, each in the order above; a partial block holds ceil(tokens / 16) token tiles.
// Byte keys (PlaneLayout::kTilesByteKeys, W = 8 only; key_bytes.h): a key tile's 256 bytes are
// its 256 codes instead of its 8 planes, byte i the code of fragment element i (8 * lane + k,
// TileBitIndex), so a lane's 8 codes are one 8-byte load. Same sizes and offsets; value tiles
// unchanged. Such keys are read whole: KeyCode takes depth 8 only.
// Not thread-safe for writes; concurrent reads of a store nobody writes are safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace readkv::codec {

inline constexpr int kTileTokens = 16;    // rows of a key tile, columns of a value tile
inline constexpr int kTileChannels = 16;  // a channel group: one MMA k-slice of q.K
inline constexpr int kTilePlaneBytes = 32;

// Which byte order a ReadKV cache stores its planes in. Part of cache identity (the `layout`
// field of cache_object.h): the same codes in another order are other bytes.
enum class PlaneLayout {
  kPlanes,  // BitPlaneStore: keys channel-major per 256-token block, values token-major
  kTiles,   // TilePlaneStore: 16x16 tiles in fragment order (this header)
  kTilesByteKeys,  // the same, key tiles holding uniform bytes (key_bytes.h), W = 8
};
// "planes" | "tiles16" | "tiles16-kbytes"
std::string_view PlaneLayoutName(PlaneLayout layout);
// Throws InvalidArgument("layout") for any other name.
PlaneLayout ParsePlaneLayout(std::string_view name);
// kTiles or kTilesByteKeys: read by the tile reader.
constexpr bool IsTileLayout(PlaneLayout layout) { return layout != PlaneLayout::kPlanes; }

// Row and column of fragment element `bit` (0..7) of lane `lane` (0..31) in a 16x16 tile, as
// mma.sync.m16n8k16 lays out its A operand: row = lane / 4 + 8 * ((bit / 2) % 2), column =
// 2 * (lane % 4) + bit % 2 + 8 * (bit / 4).
struct TileCell {
  int row;
  int col;
};
constexpr TileCell TileElement(int lane, int bit) {
  return {lane / 4 + 8 * ((bit / 2) % 2), 2 * (lane % 4) + bit % 2 + 8 * (bit / 4)};
}
// The inverse: the bit index 8 * lane + bit of (row, col) within a plane.
constexpr int TileBitIndex(int row, int col) {
  return 8 * (4 * (row % 8) + (col % 8) / 2) + 4 * (col / 8) + 2 * (row / 8) + col % 2;
}

class TilePlaneStore {
 public:
  // Throws InvalidArgument("head_dim") unless d is a power of two >= 16,
  // InvalidArgument("store_bits") unless 1 <= W <= 8 (W = 8 for byte keys), and
  // InvalidArgument("layout") for a layout that is not a tile layout.
  TilePlaneStore(int head_dim, int store_bits, PlaneLayout layout = PlaneLayout::kTiles);

  int head_dim() const { return head_dim_; }
  int store_bits() const { return store_bits_; }
  PlaneLayout layout() const { return layout_; }
  bool byte_keys() const { return layout_ == PlaneLayout::kTilesByteKeys; }
  int groups() const { return head_dim_ / kTileChannels; }
  int64_t tokens() const { return tokens_; }
  int64_t token_tiles() const { return (tokens_ + kTileTokens - 1) / kTileTokens; }

  // Appends one token given its d key codes and d value codes (each < 2^W). Throws
  // InvalidArgument("key_codes" / "value_codes") on a wrong count or a code >= 2^W.
  void Append(std::span<const uint8_t> key_codes, std::span<const uint8_t> value_codes);

  // The W * 32 bytes of tile (token tile, group): plane p at offset p * 32 (a byte-key tile: its
  // 256 codes).
  const uint8_t* KeyTile(int64_t token_tile, int group) const {
    return key_bytes_.data() + TileOffset(token_tile, group);
  }
  const uint8_t* ValueTile(int64_t token_tile, int group) const {
    return value_bytes_.data() + TileOffset(token_tile, group);
  }

  // The depth-t prefix of a stored code (t in [0, W]); reads only planes [0, t). Throws
  // InvalidArgument("token" / "channel" / "depth") when out of range; byte keys: depth 8 only.
  uint8_t KeyCode(int64_t token, int channel, int depth) const;
  uint8_t ValueCode(int64_t token, int channel, int depth) const;

  // Raw bytes of 256-token block `block` (its key tiles, then its value tiles), for cache
  // objects, and the inverse. AppendBlockBytes throws InvalidArgument("tokens") unless the store
  // ends on a block boundary, InvalidArgument("tokens_in_block") outside [1, 256], and
  // CorruptObject("block") when the size is wrong or bits of absent tokens are set.
  std::vector<uint8_t> BlockBytes(int64_t block) const;
  void AppendBlockBytes(std::span<const uint8_t> bytes, int tokens_in_block);
  // Bytes of a block of `tokens` tokens: 2 * ceil(tokens / 16) * (d / 16) * W * 32.
  static int64_t BlockByteSize(int head_dim, int store_bits, int tokens);
  int64_t BlockByteSize() const;  // of a full block

  // Persistent payload bytes (a partial token tile counts whole).
  int64_t PayloadBytes() const;

 private:
  int64_t TileBytes() const { return int64_t{store_bits_} * kTilePlaneBytes; }
  int64_t TileOffset(int64_t token_tile, int group) const {
    return (token_tile * groups() + group) * TileBytes();
  }
  uint8_t CodeAt(const std::vector<uint8_t>& bytes, int64_t token_tile, int group, int bit_index,
                 int depth) const;

  int head_dim_;
  int store_bits_;
  PlaneLayout layout_;
  int64_t tokens_ = 0;
  std::vector<uint8_t> key_bytes_;    // [token tile][group][plane][32] (byte keys: [256] codes)
  std::vector<uint8_t> value_bytes_;  // [token tile][group][plane][32]
};

}  // namespace readkv::codec
