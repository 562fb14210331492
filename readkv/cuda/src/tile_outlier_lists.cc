#include "readkv/cuda/tile_outlier_lists.h"

#include <algorithm>
#include <string>

#include "readkv/codec/bitplanes.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/outliers.h"
#include "tile_outliers.h"

namespace readkv::cuda {
namespace {

static_assert(kPageTokens == codec::kBlockTokens, "a page is one codec block");
static_assert(kPageOutlierEntries == codec::kDefaultOutlierBlockCap,
              "a page block holds the codec's default block budget");
static_assert(2 * (tile::kPageTiles + 1) <= 4 * kPageOutlierHeaderWords, "tile_start fits");

constexpr int kTileTokens = 16;

// One kind of store block `block` into a page block: its entries of the first `tokens` tokens.
void FillBlock(const codec::OutlierStore& store, bool keys, int64_t block, int64_t tokens,
               uint32_t* out) {
  const auto entries = keys ? store.KeyEntries(block) : store.ValueEntries(block);
  if (entries.size() > static_cast<size_t>(kPageOutlierEntries)) {
    throw codec::InvalidArgument("outliers", "store block " + std::to_string(block) + " holds " +
                                                 std::to_string(entries.size()) +
                                                 " entries, past a page block's " +
                                                 std::to_string(kPageOutlierEntries));
  }
  int count[tile::kPageTiles + 1] = {};
  int n = 0;
  for (const codec::OutlierEntry& e : entries) {
    if (e.token >= tokens) break;  // sorted by token: the rest are past the sequence too
    ++count[e.token / kTileTokens + 1];
    tile::PageEntriesMutable(out)[n++] =
        tile::PackOutlierEntry(e.token % kTileTokens, e.channel, e.z_half);
  }
  int at = 0;
  for (int s = 0; s <= tile::kPageTiles; ++s) tile::SetPageTileStart(out, s, at += count[s]);
}

}  // namespace

const uint32_t* TileOutlierPages::Block(bool keys, int64_t page, int h) const {
  return blocks(keys).data() + tile::PageOutlierBlockAt(page, heads_kv, h);
}

const uint32_t* TileOutlierPages::BlockOfTile(bool keys, int b, int h, int64_t tile) const {
  return Block(keys, page_table[static_cast<size_t>(b) * max_pages + tile / tile::kPageTiles], h);
}

int64_t TileOutlierPages::Entries(bool keys, int b, int h, int64_t tiles) const {
  int64_t n = 0;
  for (int64_t first = 0; first < tiles; first += tile::kPageTiles) {
    const int64_t in_page = tiles - first < tile::kPageTiles ? tiles - first : tile::kPageTiles;
    n += tile::PageTileStart(BlockOfTile(keys, b, h, first), static_cast<int>(in_page));
  }
  return n;
}

TileOutlierPages BuildTileOutlierPages(const std::vector<const codec::OutlierStore*>& stores,
                                       const std::vector<int32_t>& encoded_lens, int heads_kv,
                                       const std::vector<int32_t>& page_table, int max_pages,
                                       int num_pages) {
  if (heads_kv < 1 || stores.size() != encoded_lens.size() * static_cast<size_t>(heads_kv)) {
    throw codec::InvalidArgument("outliers", "need one store per (sequence, KV head): " +
                                                 std::to_string(stores.size()) + " stores for " +
                                                 std::to_string(encoded_lens.size()) +
                                                 " sequences of " + std::to_string(heads_kv));
  }
  if (max_pages < 0 || num_pages < 0 ||
      page_table.size() != encoded_lens.size() * static_cast<size_t>(max_pages)) {
    throw codec::InvalidArgument("page_table", "must be " + std::to_string(encoded_lens.size()) +
                                                   " x " + std::to_string(max_pages) +
                                                   " entries, got " +
                                                   std::to_string(page_table.size()));
  }
  TileOutlierPages pages;
  pages.heads_kv = heads_kv;
  pages.num_pages = num_pages;
  pages.max_pages = max_pages;
  pages.page_table = page_table;
  pages.encoded_lens = encoded_lens;
  const size_t words = static_cast<size_t>(num_pages) * heads_kv * kPageOutlierBlockWords;
  pages.key_blocks.assign(words, 0);
  pages.value_blocks.assign(words, 0);
  std::vector<bool> used(static_cast<size_t>(num_pages), false);
  for (size_t b = 0; b < encoded_lens.size(); ++b) {
    const int64_t tokens = encoded_lens[b];
    const int64_t n_pages = (tokens + kPageTokens - 1) / kPageTokens;
    if (n_pages > max_pages) {
      throw codec::InvalidArgument("max_pages", "sequence " + std::to_string(b) + " has " +
                                                    std::to_string(tokens) +
                                                    " tokens, past the pages given");
    }
    for (int h = 0; h < heads_kv; ++h) {
      const codec::OutlierStore* store = stores[b * static_cast<size_t>(heads_kv) + h];
      if (store == nullptr || store->tokens() < tokens) {
        throw codec::InvalidArgument("outliers", "sequence " + std::to_string(b) + " head " +
                                                     std::to_string(h) +
                                                     ": its store holds fewer tokens than its " +
                                                     std::to_string(tokens) + " encoded ones");
      }
    }
    for (int64_t j = 0; j < n_pages; ++j) {
      const int32_t page = page_table[b * static_cast<size_t>(max_pages) + j];
      if (page < 0 || page >= num_pages || used[static_cast<size_t>(page)]) {
        throw codec::InvalidArgument("page_table", "sequence " + std::to_string(b) + " page " +
                                                       std::to_string(j) + " names page " +
                                                       std::to_string(page) +
                                                       ", outside the pool or named before");
      }
      used[static_cast<size_t>(page)] = true;
      const int64_t in_page = std::min<int64_t>(kPageTokens, tokens - j * kPageTokens);
      for (int h = 0; h < heads_kv; ++h) {
        const codec::OutlierStore& store = *stores[b * static_cast<size_t>(heads_kv) + h];
        const int64_t at = tile::PageOutlierBlockAt(page, heads_kv, h);
        FillBlock(store, true, j, in_page, pages.key_blocks.data() + at);
        FillBlock(store, false, j, in_page, pages.value_blocks.data() + at);
      }
    }
  }
  return pages;
}

}  // namespace readkv::cuda
