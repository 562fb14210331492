#include "readkv/codec/tile_reader.h"

#include <algorithm>
#include <array>
#include <string>

#include "readkv/codec/errors.h"
#include "readkv/codec/key_bytes.h"
#include "readkv/codec/plane_decode.h"

namespace readkv::codec {
namespace {

// kCell[8 * lane + bit] = row * 16 + col of that fragment element (tile_planes.h).
constexpr std::array<uint8_t, 256> MakeCells() {
  std::array<uint8_t, 256> cells{};
  for (int lane = 0; lane < 32; ++lane) {
    for (int bit = 0; bit < 8; ++bit) {
      const TileCell cell = TileElement(lane, bit);
      cells[static_cast<size_t>(8 * lane + bit)] = static_cast<uint8_t>(cell.row * 16 + cell.col);
    }
  }
  return cells;
}
constexpr std::array<uint8_t, 256> kCell = MakeCells();

// A tile's planes [0, depth) decoded and looked up in the standard table: out[row * 16 + col].
void DecodeTile(const uint8_t* tile, int depth, const LloydTree& codebook, float* out) {
  uint8_t codes[256];
  DecodeTileCodes(tile, depth, codes);
  const float* table = codebook.centroids(depth).data();
  for (int k = 0; k < 256; ++k) out[kCell[static_cast<size_t>(k)]] = table[codes[k]];
}

// A byte-key tile's codes read back (key_bytes.h): out[row * 16 + col].
void DecodeByteKeyTile(const uint8_t* tile, float* out) {
  for (int k = 0; k < 256; ++k) out[kCell[static_cast<size_t>(k)]] = KeyByteValue(tile[k]);
}

void RequireTilePlan(const ReaderPlan& plan) {
  if (plan.reader != ReaderKind::kTile) {
    throw InvalidArgument("reader", "tile depths need the tile reader's plan, got " +
                                        std::string(ReaderName(plan.reader)));
  }
}

}  // namespace

void RequireWholeKeys(const ReaderPlan& plan) {
  if (plan.key_bits != static_cast<double>(plan.store_bits)) {
    throw InvalidArgument("kv_split", "byte keys are read whole: the key bits must be W = " +
                                          std::to_string(plan.store_bits) + ", got " +
                                          std::to_string(plan.key_bits));
  }
}

void SumPerTile(std::span<const double> members, std::span<double> out) {
  const size_t objects = (members.size() + kTileTokens - 1) / kTileTokens;
  if (out.size() != objects) {
    throw InvalidArgument(
        "objects", "expected " + std::to_string(objects) + ", got " + std::to_string(out.size()));
  }
  std::fill(out.begin(), out.end(), 0.0);
  for (size_t m = 0; m < members.size(); ++m) out[m / kTileTokens] += members[m];
}

// The plan's budgets over objects: KeyBudget(groups, 1) = floor(R_K * d / 16) and
// ValueBudget(blocks, 1) = floor(R_V * blocks).
void ChooseKeyGroupDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                          std::span<const double> group_weights, std::span<uint8_t> depths,
                          AllocatorScratch& scratch) {
  RequireTilePlan(plan);
  const auto groups = static_cast<int>(group_weights.size());
  allocators.key.Threshold(group_weights, plan.KeyBudget(groups, 1), depths, scratch);
}

void ChooseValueBlockDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                            std::span<const double> block_weights, std::span<uint8_t> depths,
                            AllocatorScratch& scratch) {
  RequireTilePlan(plan);
  const size_t blocks = block_weights.size();
  // A window's blocks (the whole row when no window is set); a partial last window's budget is
  // R_V x its own blocks.
  const size_t per = plan.value_window_tokens > 0
                         ? static_cast<size_t>(plan.value_window_tokens / kTileTokens)
                         : std::max<size_t>(blocks, 1);
  for (size_t first = 0; first < blocks; first += per) {
    const size_t n = std::min(per, blocks - first);
    allocators.value.Threshold(block_weights.subspan(first, n),
                               plan.ValueBudget(static_cast<int64_t>(n), 1),
                               depths.subspan(first, n), scratch);
  }
}

void TileKeyLogits(const TilePlaneStore& store, int64_t tokens,
                   std::span<const uint8_t> group_depths, std::span<const float> folded, int group,
                   const LloydTree& codebook, float* logits, int64_t stride) {
  const int d = store.head_dim();
  float tile[256];
  for (int64_t r = 0; r * kTileTokens < tokens; ++r) {
    const int rows = static_cast<int>(std::min<int64_t>(kTileTokens, tokens - r * kTileTokens));
    for (int h = 0; h < group; ++h) {
      std::fill(logits + h * stride + r * kTileTokens, logits + h * stride + r * kTileTokens + rows,
                0.0f);
    }
    for (int g = 0; g < store.groups(); ++g) {
      const int t = group_depths[static_cast<size_t>(g)];
      if (store.byte_keys()) {
        if (t != store.store_bits()) throw InvalidArgument("depth", "byte keys are read whole");
        DecodeByteKeyTile(store.KeyTile(r, g), tile);
      } else if (t == 0) {
        continue;  // centroid 0 everywhere: mu alone, folded out of the logits
      } else {
        DecodeTile(store.KeyTile(r, g), t, codebook, tile);
      }
      for (int h = 0; h < group; ++h) {
        const float* q = folded.data() + static_cast<size_t>(h) * d + g * kTileChannels;
        float* row_logits = logits + h * stride + r * kTileTokens;
        for (int row = 0; row < rows; ++row) {
          float dot = 0.0f;
          for (int col = 0; col < kTileChannels; ++col) dot += q[col] * tile[row * 16 + col];
          row_logits[row] += dot;
        }
      }
    }
  }
}

void TileValueSums(const TilePlaneStore& store, int64_t tokens,
                   std::span<const uint8_t> block_depths, const float* probabilities,
                   int64_t stride, int group, const LloydTree& codebook, float* acc) {
  const int d = store.head_dim();
  std::fill(acc, acc + static_cast<int64_t>(group) * d, 0.0f);
  float tile[256];
  for (int64_t r = 0; r * kTileTokens < tokens; ++r) {
    const int t = block_depths[static_cast<size_t>(r)];
    if (t == 0) continue;  // every value of the block at mu: carried by the probability mass
    const int cols = static_cast<int>(std::min<int64_t>(kTileTokens, tokens - r * kTileTokens));
    for (int g = 0; g < store.groups(); ++g) {
      DecodeTile(store.ValueTile(r, g), t, codebook, tile);
      for (int h = 0; h < group; ++h) {
        const float* p = probabilities + h * stride + r * kTileTokens;
        float* out = acc + static_cast<size_t>(h) * d + g * kTileChannels;
        for (int row = 0; row < kTileChannels; ++row) {
          float dot = 0.0f;
          for (int col = 0; col < cols; ++col) dot += p[col] * tile[row * 16 + col];
          out[row] += dot;
        }
      }
    }
  }
}

}  // namespace readkv::codec
