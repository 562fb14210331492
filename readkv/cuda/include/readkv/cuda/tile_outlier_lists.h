// The GPU tile reader's outlier lists (tile_attention.h, "Outlier lists") on the host: built from
// the codec's OutlierStores (readkv/codec/outliers.h) of a call's (sequence, KV head) rows, in
// the layout TileDecodeInputs takes (upload the four arrays as they are), and read by the tile
// ledgers (tile_ledgers.h). Host code in both builds; plain C++17 (the codec's types are only
// declared here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace readkv::codec {
class OutlierStore;
}

namespace readkv::cuda {

struct TileOutlierLists {
  int rows = 0;             // B x H_kv, row b * H_kv + h
  int max_token_tiles = 0;  // TileDecodeShape::max_token_tiles()
  int max_entries = 0;      // TileDecodeShape::max_outlier_entries: the entries' row stride
  std::vector<uint32_t> key_offsets, value_offsets;  // [rows][max_token_tiles + 1]
  std::vector<uint32_t> key_entries, value_entries;  // [rows][max_entries], tile::PackOutlierEntry

  const std::vector<uint32_t>& offsets(bool keys) const {
    return keys ? key_offsets : value_offsets;
  }
  // Row `row`'s entries of its tiles [0, tiles) for keys or values.
  int64_t Entries(bool keys, int64_t row, int64_t tiles) const {
    return offsets(keys)[static_cast<size_t>(row * (max_token_tiles + 1) + tiles)];
  }
};

// The lists of a call: stores [B x H_kv] (row b * H_kv + h; each holding at least encoded_lens[b]
// tokens), the entries of each row's first encoded_lens[b] tokens, by 16-token tile, each
// tile's in the store's (token, channel) order. max_entries is the largest row's count of either
// kind (at least 1, so that a call without entries still has arrays to point at). Throws
// readkv::codec::InvalidArgument("outliers") for a store count that is not encoded_lens.size() x
// heads_kv or a store shorter than its sequence, InvalidArgument("max_token_tiles") for a
// sequence past max_token_tiles tiles.
TileOutlierLists BuildTileOutlierLists(const std::vector<const codec::OutlierStore*>& stores,
                                       const std::vector<int32_t>& encoded_lens, int heads_kv,
                                       int max_token_tiles);

}  // namespace readkv::cuda
