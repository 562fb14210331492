// The GPU tile reader's outlier page blocks (tile_attention.h, "Outlier lists") on the host:
// built from the codec's OutlierStores (readkv/codec/outliers.h) of a call's (sequence, KV head)
// rows under the call's page table, in the layout TileDecodeInputs takes (upload the two pools as
// they are), and read by the tile ledgers (tile_ledgers.h). The bench and the tests build them
// here; a server's TileAppend writes the same bytes on the device (tests/tile_append_test.cc).
// Host code in both builds; plain C++17 (the codec's types are only declared here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "readkv/cuda/tile_attention.h"

namespace readkv::codec {
class OutlierStore;
}

namespace readkv::cuda {

struct TileOutlierPages {
  int heads_kv = 0;
  int num_pages = 0;
  int max_pages = 0;                 // columns of page_table
  std::vector<int32_t> page_table;   // [B][max_pages], the call's (host copy)
  std::vector<int32_t> encoded_lens;  // [B]
  // [num_pages][H_kv][kPageOutlierBlockWords]; pages no sequence uses stay zero.
  std::vector<uint32_t> key_blocks, value_blocks;

  int batch() const { return static_cast<int>(encoded_lens.size()); }
  const std::vector<uint32_t>& blocks(bool keys) const { return keys ? key_blocks : value_blocks; }
  // Block (page, h) of a kind.
  const uint32_t* Block(bool keys, int64_t page, int h) const;
  // The block holding token tile `tile` of (b, h), through the page table.
  const uint32_t* BlockOfTile(bool keys, int b, int h, int64_t tile) const;
  // Entries of (b, h)'s token tiles [0, tiles) of a kind (tiles <= ceil(encoded_lens[b] / 16)).
  int64_t Entries(bool keys, int b, int h, int64_t tiles) const;
};

// The page blocks of a call: stores [B x H_kv] (row b * H_kv + h; each holding at least
// encoded_lens[b] tokens); page j of sequence b (page_table[b * max_pages + j], j <
// ceil(encoded_lens[b] / 256)) gets store block j's entries of the encoded tokens, tile_start[s]
// the count of those in its tiles below s. Throws readkv::codec::InvalidArgument("outliers") for
// a store count that is not encoded_lens.size() x heads_kv, a store shorter than its sequence or
// a store block past kPageOutlierEntries entries; ("page_table") for a table that is not
// B x max_pages, a page outside [0, num_pages) or one page named twice; ("max_pages") for a
// sequence past max_pages pages.
TileOutlierPages BuildTileOutlierPages(const std::vector<const codec::OutlierStore*>& stores,
                                       const std::vector<int32_t>& encoded_lens, int heads_kv,
                                       const std::vector<int32_t>& page_table, int max_pages,
                                       int num_pages);

}  // namespace readkv::cuda
