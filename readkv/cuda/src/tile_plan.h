// Host math of the GPU tile reader (tile_attention.h): shape checks, the plan, and where each
// buffer of a call sits in its workspace (the launcher hands the kernels these pointers). Host
// code in both builds (tests/tile_plan_test.cc pins it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "readkv/cuda/tile_attention.h"

namespace readkv::cuda::internal {

inline constexpr int kTileMaxGroup = 8;  // query heads per KV head: the MMA's N

// The Logits and Values blocks' staging (tile_kernels.cuh), shared with the traffic model: 4
// warps a block, each streaming its contiguous share of the chunk's token tiles through a ring of
// two stages of at most kTileStageBytes and kTileStageTiles tiles.
inline constexpr int kTileBlockWarps = 4;
inline constexpr int kTileStageTiles = 8;
inline constexpr int kTileStageBytes = 4096;

// The number of Logits stages over a row of `encoded` tokens whose Key group depths add up to
// `key_planes` (each stage reads the folded queries once): per chunk, per warp,
// ceil(share / tiles a stage).
int64_t TileLogitsStages(const TilePlan& plan, int64_t encoded, int key_planes);

// Byte offsets into the workspace, each section 256-byte aligned.
struct TileWorkspaceLayout {
  int64_t logit_stride = 0;  // TileDecodeDebug::logits' row: encoded + residual, to 16
  size_t fragments = 0;      // uint32 [B][H_kv][d / 16][32 lanes][2]: folded f16 queries, B order
  size_t key_depths = 0;     // uint8 [B][H_kv][d / 16]
  size_t logits = 0;         // float [B][H_q][max_residual]: the residual window's exact logits
  size_t stats = 0;          // float [B][H_q][4]: max, 1 / sum, encoded mass, unused
  size_t block_weights = 0;  // double [B][H_kv][max_token_tiles]
  size_t value_depths = 0;   // uint8 [B][H_kv][max_token_tiles]
  size_t partials = 0;       // float [B][H_kv][chunks][8][d]
  size_t tile_stats = 0;     // float [B][H_kv][max_token_tiles][3][group]: M, sum e, sum e^2
  size_t probs = 0;          // f16 [B][H_kv][max_token_tiles][group][16]: e = exp(l - M)
  size_t scaled_queries = 0;  // float [B][H_kv][d][group]: scale * q~, for the Key lists only
  size_t chunk_stats = 0;  // float [B][H_kv][chunks][2][group]: per chunk and head M, sum e
  size_t arrivals = 0;     // uint32 [B][H_kv]: TileWindowValues' blocks done (zeroed by Prepare, or
                           // by byte keys' TileLogits)
  size_t total = 0;
};

// Throws readkv::codec::InvalidArgument naming the field the kernels refuse.
void CheckTileShape(const TileDecodeShape& shape);
// Throws as CheckTileShape, and InvalidArgument("plan") for chunks that are not a multiple of
// kTileChunkStep in [kTileChunkStep, kTileMaxChunk] or do not cover max_encoded_tokens, a
// Value window other than 0 or chunk_tokens, or one_pass without byte keys, a window and at
// most kTileMaxClusterChunks chunks. A one-pass plan's layout has empty tile_stats, probs and
// chunk_stats sections.
TileWorkspaceLayout MakeTileWorkspaceLayout(const TileDecodeShape& shape, const TilePlan& plan);

}  // namespace readkv::cuda::internal
