#include "readkv/cuda/tile_outlier_lists.h"

#include <algorithm>
#include <string>

#include "readkv/codec/bitplanes.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/outliers.h"
#include "tile_outliers.h"

namespace readkv::cuda {
namespace {

constexpr int kTileTokens = 16;

// One kind of one row: offsets [max_token_tiles + 1] and its entries, from the store's blocks.
void BuildRow(const codec::OutlierStore& store, bool keys, int64_t tokens, int max_token_tiles,
              uint32_t* offsets, std::vector<uint32_t>& entries) {
  std::vector<uint32_t> count(static_cast<size_t>(max_token_tiles) + 1, 0);
  entries.clear();
  const int64_t blocks = (tokens + codec::kBlockTokens - 1) / codec::kBlockTokens;
  for (int64_t b = 0; b < blocks; ++b) {
    for (const codec::OutlierEntry& e : keys ? store.KeyEntries(b) : store.ValueEntries(b)) {
      const int64_t token = b * codec::kBlockTokens + e.token;
      if (token >= tokens) break;  // sorted by token: the rest are past the sequence too
      ++count[static_cast<size_t>(token / kTileTokens) + 1];
      entries.push_back(
          tile::PackOutlierEntry(static_cast<int>(token % kTileTokens), e.channel, e.z_half));
    }
  }
  uint32_t at = 0;
  for (size_t t = 0; t < count.size(); ++t) offsets[t] = at += count[t];
}

}  // namespace

TileOutlierLists BuildTileOutlierLists(const std::vector<const codec::OutlierStore*>& stores,
                                       const std::vector<int32_t>& encoded_lens, int heads_kv,
                                       int max_token_tiles) {
  if (heads_kv < 1 || stores.size() != encoded_lens.size() * static_cast<size_t>(heads_kv)) {
    throw codec::InvalidArgument("outliers", "need one store per (sequence, KV head): " +
                                                 std::to_string(stores.size()) + " stores for " +
                                                 std::to_string(encoded_lens.size()) +
                                                 " sequences of " + std::to_string(heads_kv));
  }
  TileOutlierLists lists;
  lists.rows = static_cast<int>(stores.size());
  lists.max_token_tiles = max_token_tiles;
  const size_t stride = static_cast<size_t>(max_token_tiles) + 1;
  lists.key_offsets.assign(stores.size() * stride, 0);
  lists.value_offsets.assign(stores.size() * stride, 0);
  std::vector<std::vector<uint32_t>> keys(stores.size()), values(stores.size());
  for (size_t row = 0; row < stores.size(); ++row) {
    const int64_t tokens = encoded_lens[row / static_cast<size_t>(heads_kv)];
    if (stores[row] == nullptr || stores[row]->tokens() < tokens) {
      throw codec::InvalidArgument("outliers", "row " + std::to_string(row) +
                                                   "'s store holds fewer tokens than its " +
                                                   std::to_string(tokens) + " encoded ones");
    }
    if ((tokens + kTileTokens - 1) / kTileTokens > max_token_tiles) {
      throw codec::InvalidArgument("max_token_tiles", "row " + std::to_string(row) + " has " +
                                                          std::to_string(tokens) +
                                                          " tokens, past the tiles given");
    }
    BuildRow(*stores[row], true, tokens, max_token_tiles, &lists.key_offsets[row * stride],
             keys[row]);
    BuildRow(*stores[row], false, tokens, max_token_tiles, &lists.value_offsets[row * stride],
             values[row]);
    lists.max_entries = std::max({lists.max_entries, static_cast<int>(keys[row].size()),
                                  static_cast<int>(values[row].size())});
  }
  lists.max_entries = std::max(lists.max_entries, 1);
  const auto m = static_cast<size_t>(lists.max_entries);
  lists.key_entries.assign(stores.size() * m, 0);
  lists.value_entries.assign(stores.size() * m, 0);
  for (size_t row = 0; row < stores.size(); ++row) {
    std::copy(keys[row].begin(), keys[row].end(), lists.key_entries.begin() + row * m);
    std::copy(values[row].begin(), values[row].end(), lists.value_entries.begin() + row * m);
  }
  return lists;
}

}  // namespace readkv::cuda
