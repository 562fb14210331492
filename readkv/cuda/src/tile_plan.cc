#include "tile_plan.h"

#include <algorithm>
#include <string>

#include "readkv/codec/errors.h"
#include "tile_staging.h"

namespace readkv::cuda {
namespace internal {
namespace {

void Require(bool ok, const char* field, const std::string& what) {
  if (!ok) throw codec::InvalidArgument(field, what);
}

size_t Section(size_t& at, size_t bytes) {
  const size_t start = at;
  at += (bytes + 255) / 256 * 256;
  return start;
}

}  // namespace

void CheckTileShape(const TileDecodeShape& s) {
  Require(s.batch >= 1, "batch", "must be >= 1, got " + std::to_string(s.batch));
  Require(s.heads_kv >= 1 && s.heads_q >= s.heads_kv && s.heads_q % s.heads_kv == 0, "heads_q",
          "must be a positive multiple of heads_kv");
  const int g = s.heads_q / s.heads_kv;
  Require(g == 1 || g == 2 || g == 4 || g == 8, "heads_q",
          "group heads_q / heads_kv must be 1, 2, 4 or 8, got " + std::to_string(g));
  Require(s.head_dim == 64 || s.head_dim == 128, "head_dim",
          "must be 64 or 128, got " + std::to_string(s.head_dim));
  Require(s.store_bits >= 1 && s.store_bits <= tile::kMaxTileDepth, "store_bits",
          "must be in [1, 8], got " + std::to_string(s.store_bits));
  Require(!s.byte_keys || s.store_bits == 8, "byte_keys",
          "byte keys need store_bits 8, got " + std::to_string(s.store_bits));
  Require(s.max_encoded_tokens >= 0, "max_encoded_tokens", "must be >= 0");
  Require(s.max_residual_tokens >= 0, "max_residual_tokens", "must be >= 0");
  Require(s.max_encoded_tokens + s.max_residual_tokens >= 1, "max_encoded_tokens",
          "a call needs at least one token");
  const int64_t pages = (int64_t{s.max_encoded_tokens} + kPageTokens - 1) / kPageTokens;
  Require(s.max_pages >= pages, "max_pages",
          "must be >= ceil(max_encoded_tokens / 256) = " + std::to_string(pages) + ", got " +
              std::to_string(s.max_pages));
}

TileWorkspaceLayout MakeTileWorkspaceLayout(const TileDecodeShape& s, const TilePlan& plan) {
  CheckTileShape(s);
  Require(plan.chunk_tokens >= kTileChunkStep && plan.chunk_tokens <= kTileMaxChunk &&
              plan.chunk_tokens % kTileChunkStep == 0,
          "plan",
          "chunk_tokens must be 512, 1024, 1536 or 2048, got " + std::to_string(plan.chunk_tokens));
  const int64_t need = (int64_t{s.max_encoded_tokens} + plan.chunk_tokens - 1) / plan.chunk_tokens;
  Require(plan.chunks >= 1 && plan.chunks >= need, "plan",
          "chunks " + std::to_string(plan.chunks) + " do not cover " +
              std::to_string(s.max_encoded_tokens) + " tokens");
  Require(plan.value_window_tokens == 0 || plan.value_window_tokens == plan.chunk_tokens, "plan",
          "value_window_tokens must be 0 or chunk_tokens (" + std::to_string(plan.chunk_tokens) +
              "), got " + std::to_string(plan.value_window_tokens));
  Require(!plan.one_pass || TileOnePassAllowed(s, plan), "plan",
          "one_pass needs byte keys, a Value window and at most " +
              std::to_string(kTileMaxClusterChunks) + " chunks, got " +
              std::to_string(plan.chunks));
  const auto rows = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads_kv);
  const auto heads = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads_q);
  const auto groups = static_cast<size_t>(s.groups());
  const auto tiles = static_cast<size_t>(s.max_token_tiles());
  TileWorkspaceLayout w;
  w.logit_stride = (int64_t{s.max_encoded_tokens} + s.max_residual_tokens + 15) / 16 * 16;
  size_t at = 0;
  w.fragments = Section(at, rows * groups * 32 * 2 * sizeof(uint32_t));
  w.key_depths = Section(at, rows * groups);
  w.logits = Section(at, heads * static_cast<size_t>(s.max_residual_tokens) * sizeof(float));
  w.stats = Section(at, heads * 4 * sizeof(float));
  w.block_weights = Section(at, rows * tiles * sizeof(double));
  w.value_depths = Section(at, rows * tiles);
  // One pass keeps the tiles' e values and statistics, the chunks' statistics and partials on
  // chip, and counts no arrivals.
  const size_t kept = plan.one_pass ? 0 : 1;
  w.partials = Section(at, kept * rows * static_cast<size_t>(plan.chunks) * kTileMaxGroup *
                               static_cast<size_t>(s.head_dim) * sizeof(float));
  w.tile_stats =
      Section(at, kept * rows * tiles * 3 * static_cast<size_t>(s.group()) * sizeof(float));
  w.probs =
      Section(at, kept * rows * tiles * static_cast<size_t>(s.group()) * 16 * sizeof(uint16_t));
  w.scaled_queries = Section(at, heads * static_cast<size_t>(s.head_dim) * sizeof(float));
  w.chunk_stats = Section(at, kept * rows * static_cast<size_t>(plan.chunks) * 2 *
                                  static_cast<size_t>(s.group()) * sizeof(float));
  w.arrivals = Section(at, kept * rows * sizeof(uint32_t));
  w.total = at;
  return w;
}

int64_t TileLogitsStages(const TilePlan& plan, int64_t encoded, int key_planes) {
  const int64_t tiles = (encoded + 15) / 16, chunk_tiles = plan.chunk_tokens / 16;
  const int64_t per_stage = tile::KeyTilesPerStage(key_planes);
  int64_t stages = 0;
  for (int64_t first = 0; first < tiles; first += chunk_tiles) {
    const int64_t end = std::min(tiles, first + chunk_tiles);
    for (int w = 0; w < kTileBlockWarps; ++w) {
      const tile::WarpShare share =
          tile::ShareOfWarp(static_cast<int>(first), static_cast<int>(end), w);
      stages += (share.count() + per_stage - 1) / per_stage;
    }
  }
  return stages;
}

}  // namespace internal

TilePlan PlanTileDecode(const TileDecodeShape& shape, int sm_count, int value_window_tokens) {
  internal::CheckTileShape(shape);
  internal::Require(sm_count >= 1, "sm_count", "must be >= 1, got " + std::to_string(sm_count));
  internal::Require(value_window_tokens == 0 ||
                        (value_window_tokens >= kTileChunkStep &&
                         value_window_tokens <= kTileMaxChunk &&
                         value_window_tokens % kTileChunkStep == 0),
                    "value_window",
                    "the GPU tile reader's Value windows are its chunks: 0 (the row), 512, "
                    "1024, 1536 or 2048 tokens, got " +
                        std::to_string(value_window_tokens));
  const int64_t rows = int64_t{shape.batch} * shape.heads_kv;
  TilePlan plan;
  plan.chunk_tokens = kTileChunkStep;
  for (const int chunk : {kTileMaxChunk, 1024}) {
    const int64_t chunks = (int64_t{shape.max_encoded_tokens} + chunk - 1) / chunk;
    if (rows * chunks >= 4 * int64_t{sm_count}) {
      plan.chunk_tokens = chunk;
      break;
    }
  }
  if (value_window_tokens > 0) plan.chunk_tokens = value_window_tokens;
  plan.value_window_tokens = value_window_tokens;
  plan.chunks = static_cast<int>(std::max<int64_t>(
      1, (int64_t{shape.max_encoded_tokens} + plan.chunk_tokens - 1) / plan.chunk_tokens));
  return plan;
}

size_t TileDecodeWorkspaceBytes(const TileDecodeShape& shape, const TilePlan& plan) {
  return internal::MakeTileWorkspaceLayout(shape, plan).total;
}

}  // namespace readkv::cuda
