// The tile reader (docs/readkv.md, "The tile reader"): ReadKV's read path at the granularity of a
// tensor-core tile, over the tile layout of tile_planes.h.
//
// Depths. Stage 1 gives one depth to each group of 16 Key channels (an MMA k-slice), shared by
// the g query heads of the KV head; stage 2 gives one depth to each block of 16 Value tokens. The
// allocator is DepthAllocator's threshold rule unchanged, over objects whose weight is the sum of
// their members' weights (Key channel importance, Value token importance a_i); a depth unit of an
// object costs 16 member-units, so the budgets are the reader plan's budgets over objects:
// floor(R_K * d / 16) group-planes and floor(R_V * ceil(T_enc / 16)) block-planes per KV head
// (a partial last block counts whole, as its sectors do). t_min = 1, Value step 1.
//
// Algebra. With k^_{i,c} = mu_c + sigma_c * C_t(code) (C_t: the one standard-Gaussian centroid
// table of depth t, shared by every channel, head and layer):
//   q~ . k^_i / sqrt(d) = q~ . mu / sqrt(d) + sum_c (q~_c sigma_c / sqrt(d)) C_t(code_{i,c}).
// The first term is the same for every token of the row, so the softmax does not see it: the
// reader folds sigma and 1/sqrt(d) into the query once ("folded query") and computes the second
// term only, subtracting q~ . mu / sqrt(d) from the residual window's exact logits instead so
// every logit of the row carries the same shift. Values: sum_i p_i v^_i = mu * sum_i p_i + sigma
// (.) sum_i p_i C_t(code_i), so mu and sigma are applied once per row after the weighted sum.
// Exact in real arithmetic; in float the outputs agree with dequantise-then-attend at the same
// depths up to rounding.
//
// Everything here is pure and thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "readkv/codec/allocator.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/ledgers.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/readers.h"
#include "readkv/codec/tile_planes.h"
#include "readkv/codec/transform.h"

namespace readkv::codec {

// out[j] = sum of members[16 j .. 16 j + 15] (fewer for a partial last object).
// Throws InvalidArgument("objects") unless out.size() == ceil(members.size() / 16).
void SumPerTile(std::span<const double> members, std::span<double> out);

// One KV head's depths from its objects' summed weights, with the threshold allocator of
// `allocators` and the budgets above (Values: per window of plan.value_window_tokens when set,
// each with R_V x its blocks, a partial last window too). Throw InvalidArgument("reader") unless plan is the tile
// reader's, and the allocator's InvalidArgument otherwise.
void ChooseKeyGroupDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                          std::span<const double> group_weights, std::span<uint8_t> depths,
                          AllocatorScratch& scratch);
void ChooseValueBlockDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                            std::span<const double> block_weights, std::span<uint8_t> depths,
                            AllocatorScratch& scratch);

// Byte keys (a store of PlaneLayout::kTilesByteKeys) are read whole: throws
// InvalidArgument("kv_split") unless the plan's key bits are its W (R_K = W = 8).
void RequireWholeKeys(const ReaderPlan& plan);

// q.K over the tiles of one KV head's first `tokens` tokens (a multiple of 16 or the store's
// end). folded: [group][d], scale * q~_{h,c} * sigma_c. group_depths: [d / 16].
// logits[h * stride + i] = sum_c folded[h][c] * C_{t(c / 16)}(code_{i,c}), i in [0, tokens);
// for byte keys KeyByteValue(code_{i,c}), every group at depth 8 (InvalidArgument("depth")
// otherwise).
void TileKeyLogits(const TilePlaneStore& store, int64_t tokens,
                   std::span<const uint8_t> group_depths, std::span<const float> folded, int group,
                   const LloydTree& codebook, float* logits, int64_t stride);

// p.V over the tiles of one KV head's first `tokens` tokens. probabilities: [group][stride];
// block_depths: [ceil(tokens / 16)]. acc: [group][d], overwritten with
// acc[h][c] = sum_i p_{h,i} * C_{t(i / 16)}(code_{i,c}).
void TileValueSums(const TilePlaneStore& store, int64_t tokens,
                   std::span<const uint8_t> block_depths, const float* probabilities,
                   int64_t stride, int group, const LloydTree& codebook, float* acc);

// Everything of one layer cache the tile reader reads (ReadKvLayerCache holds it).
struct TileLayerView {
  LayerGeometry geometry;
  const Calibration* calibration = nullptr;
  int layer = 0;
  const LloydTree* codebook = nullptr;
  std::span<const TilePlaneStore> stores;                  // [H_kv]
  std::span<const HadamardTransform> key_transforms;       // [H_kv]
  std::span<const HadamardTransform> value_transforms;     // [H_kv]
  std::span<const std::vector<uint16_t>> residual_keys;    // [H_kv][T_res * d] BF16
  std::span<const std::vector<uint16_t>> residual_values;  // [H_kv][T_res * d] BF16
  int64_t encoded_tokens = 0;                              // every store's token count
  int64_t residual_tokens = 0;
  // [H_kv] outlier lists (outliers.h), or empty when the cache keeps none. Their corrections
  // take a group's depth for each of its 16 channels and a block's for each of its 16 tokens.
  std::span<const OutlierStore> outliers;
};

// The depths one call chose: [H_kv][d / 16] and [H_kv][ceil(T_enc / 16)].
struct TileDepths {
  std::vector<uint8_t> key_groups;
  std::vector<uint8_t> value_blocks;
};

// One decode step of the tile reader over a layer: queries, out [H_q][d] (shapes checked by the
// caller). Ledgers: logical reads count t bits per scalar of every object read (key: t_g * 16 *
// T_enc per group, value: t_b * 16 * d per block, a partial block counting its tokens only);
// physical payload traffic counts t sectors of 32 bytes per tile read (partial tiles whole).
// With outlier lists every kept element reads as its fp16 value (K before the softmax, V before
// sigma, mu and the inverse transform, as in every reader), and each 256-token block's lists are
// read once: logical.outlier_bits and physical.outlier_bytes count them.
// `chosen`, when given, receives the depths.
AttentionLedgers TileAttend(const TileLayerView& view, const ReaderPlan& plan,
                            std::span<const float> queries, std::span<float> out,
                            TileDepths* chosen = nullptr);

}  // namespace readkv::codec
