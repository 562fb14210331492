// The GPU tile reader's host math (src/tile_plan.h, tile_attention.h): the plan, the shape and
// plan checks, and the workspace sections. Runs in every build.
#include "tile_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "readkv/codec/errors.h"
#include "readkv/cuda/tile_attention.h"

namespace readkv::cuda {
namespace {

TileDecodeShape Shape(int batch, int hq, int hkv, int d, int encoded, int residual) {
  TileDecodeShape s;
  s.batch = batch;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.head_dim = d;
  s.store_bits = 8;
  s.max_encoded_tokens = encoded;
  s.max_residual_tokens = residual;
  s.max_pages = (encoded + kPageTokens - 1) / kPageTokens;
  return s;
}

std::string FieldOf(const TileDecodeShape& s, const TilePlan& plan) {
  try {
    TileDecodeWorkspaceBytes(s, plan);
  } catch (const codec::InvalidArgument& e) {
    return e.field();
  }
  return "";
}

TEST(TilePlanTest, ChunksCoverTheTokensAndFillTheDevice) {
  for (const int batch : {1, 4, 16}) {
    for (const int hkv : {1, 2, 8}) {
      for (const int encoded : {0, 1, 511, 512, 513, 4000, 32768, 131072}) {
        const TileDecodeShape s = Shape(batch, 4 * hkv, hkv, 128, encoded, 16);
        const TilePlan plan = PlanTileDecode(s, 132);
        ASSERT_EQ(plan.chunk_tokens % kTileChunkStep, 0);
        ASSERT_GE(plan.chunk_tokens, kTileChunkStep);
        ASSERT_LE(plan.chunk_tokens, kTileMaxChunk);
        ASSERT_GE(plan.chunks, 1);
        ASSERT_GE(int64_t{plan.chunks} * plan.chunk_tokens, encoded);
        ASSERT_LT(int64_t{plan.chunks - 1} * plan.chunk_tokens, std::max(encoded, 1));
        // A chunk above 512 only when four blocks per SM still remain.
        if (plan.chunk_tokens > kTileChunkStep) {
          EXPECT_GE(int64_t{batch} * hkv * plan.chunks, 4 * 132);
        }
        EXPECT_GT(TileDecodeWorkspaceBytes(s, plan), 0u);
      }
    }
  }
  // The largest chunk that keeps four blocks per SM (528 on 132 SMs): 8 rows of 32K tokens make
  // 256 blocks even at 1024, so 512; 32 rows make 512 blocks at 2048 and 1024 at 1024; 128 rows
  // (32K x 16, 8 KV heads) make 2048 blocks at 2048.
  const TileDecodeShape one = Shape(1, 32, 8, 128, 32768, 0);
  EXPECT_EQ(PlanTileDecode(one, 132).chunk_tokens, 512);
  const TileDecodeShape many = Shape(16, 16, 2, 128, 32768, 0);  // 32 rows
  EXPECT_EQ(PlanTileDecode(many, 132).chunk_tokens, 1024);
  const TileDecodeShape served = Shape(16, 32, 8, 128, 32768, 0);  // 128 rows
  EXPECT_EQ(PlanTileDecode(served, 132).chunk_tokens, 2048);
}

TEST(TilePlanTest, WorkspaceSectionsAreAlignedDisjointAndSized) {
  const TileDecodeShape s = Shape(3, 16, 2, 64, 1000, 40);
  const TilePlan plan{512, 2};
  const internal::TileWorkspaceLayout w = internal::MakeTileWorkspaceLayout(s, plan);
  EXPECT_EQ(w.logit_stride, 1040);
  const std::array<std::pair<size_t, size_t>, 12> sections = {{
      {w.fragments, size_t{6} * 4 * 32 * 2 * 4},
      {w.key_depths, size_t{6} * 4},
      {w.logits, size_t{3} * 16 * 40 * 4},
      {w.stats, size_t{3} * 16 * 4 * 4},
      {w.block_weights, size_t{6} * 63 * 8},
      {w.value_depths, size_t{6} * 63},
      {w.partials, size_t{6} * 2 * 8 * 64 * 4},
      {w.tile_stats, size_t{6} * 63 * 3 * 8 * 4},
      {w.probs, size_t{6} * 63 * 8 * 16 * 2},
      {w.scaled_queries, size_t{3} * 16 * 64 * 4},
      {w.chunk_stats, size_t{6} * 2 * 2 * 8 * 4},
      {w.arrivals, size_t{6} * 4},
  }};
  for (size_t i = 0; i < sections.size(); ++i) {
    EXPECT_EQ(sections[i].first % 256, 0u) << i;
    const size_t end = sections[i].first + sections[i].second;
    const size_t next = i + 1 < sections.size() ? sections[i + 1].first : w.total;
    EXPECT_LE(end, next) << "section " << i << " overlaps the next";
  }
  EXPECT_EQ(TileDecodeWorkspaceBytes(s, plan), w.total);
}

TEST(TilePlanTest, BadShapesAndPlansNameTheirField) {
  const TilePlan plan{512, 1};
  TileDecodeShape s = Shape(1, 32, 8, 128, 512, 0);
  EXPECT_EQ(FieldOf(s, plan), "");
  s.head_dim = 96;
  EXPECT_EQ(FieldOf(s, plan), "head_dim");
  s = Shape(1, 24, 8, 128, 512, 0);  // group 3
  EXPECT_EQ(FieldOf(s, plan), "heads_q");
  s = Shape(1, 32, 8, 128, 512, 0);
  s.store_bits = 9;
  EXPECT_EQ(FieldOf(s, plan), "store_bits");
  s = Shape(1, 32, 8, 128, 512, 0);
  s.byte_keys = true;  // W = 8: byte keys' only width
  EXPECT_EQ(FieldOf(s, plan), "");
  s.store_bits = 4;
  EXPECT_EQ(FieldOf(s, plan), "byte_keys");
  s = Shape(0, 32, 8, 128, 512, 0);
  EXPECT_EQ(FieldOf(s, plan), "batch");
  s = Shape(1, 32, 8, 128, 0, 0);
  EXPECT_EQ(FieldOf(s, plan), "max_encoded_tokens");
  s = Shape(1, 32, 8, 128, 512, 0);
  s.max_pages = 1;  // 512 tokens are 2 pages
  EXPECT_EQ(FieldOf(s, plan), "max_pages");
  s = Shape(1, 32, 8, 128, 513, 0);  // one chunk of 512 does not cover 513
  EXPECT_EQ(FieldOf(s, plan), "plan");
  EXPECT_EQ(FieldOf(s, TilePlan{1024, 1}), "");
  EXPECT_EQ(FieldOf(s, TilePlan{700, 1}), "plan");
  EXPECT_EQ(FieldOf(s, TilePlan{4096, 1}), "plan");  // past kTileMaxChunk
  EXPECT_THROW(PlanTileDecode(s, 0), codec::InvalidArgument);
  // A Value window is the chunk or nothing.
  EXPECT_EQ(FieldOf(s, TilePlan{1024, 1, 1024}), "");
  EXPECT_EQ(FieldOf(s, TilePlan{1024, 1, 512}), "plan");
}

TEST(TilePlanTest, AValueWindowIsTheChunk) {
  for (const int window : {512, 1024, 1536, 2048}) {
    for (const int encoded : {1, 700, 16384, 131072}) {
      const TileDecodeShape s = Shape(16, 8, 2, 64, encoded, 0);
      const TilePlan plan = PlanTileDecode(s, 132, window);
      EXPECT_EQ(plan.chunk_tokens, window);
      EXPECT_EQ(plan.value_window_tokens, window);
      EXPECT_EQ(plan.chunks, (encoded + window - 1) / window);
      EXPECT_GT(TileDecodeWorkspaceBytes(s, plan), 0u);
    }
  }
  EXPECT_EQ(PlanTileDecode(Shape(16, 8, 2, 64, 16384, 0), 132).value_window_tokens, 0);
  const TileDecodeShape s = Shape(1, 8, 2, 64, 4096, 0);
  for (const int bad : {-512, 256, 700, 2560, 4096}) {
    try {
      PlanTileDecode(s, 132, bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const codec::InvalidArgument& e) {
      EXPECT_EQ(e.field(), "value_window") << bad;
    }
  }
}

// One pass (TileWindowPass) is never PlanTileDecode's choice (faster only while the call's
// clusters are all resident, which only the device knows: TilePlan says why); a plan may ask
// for it with byte keys and a Value window whose row fits one thread-block cluster (at most
// kTileMaxClusterChunks windows), and its workspace then holds no per-tile or per-chunk
// statistics.
TEST(TilePlanTest, OnePassIsAskedForAndNeedsByteKeysWindowsAndACluster) {
  TileDecodeShape s = Shape(16, 8, 2, 64, 16384, 0);
  s.byte_keys = true;
  const TilePlan two = PlanTileDecode(s, 132, 1024);
  EXPECT_FALSE(two.one_pass);
  EXPECT_EQ(two.chunks, 16);
  TilePlan served = two;
  served.one_pass = true;
  EXPECT_EQ(FieldOf(s, served), "");
  s.max_encoded_tokens = 8192;
  TilePlan plan = PlanTileDecode(s, 132, 512);  // 16 windows
  plan.one_pass = true;
  EXPECT_EQ(FieldOf(s, plan), "");
  s.max_encoded_tokens = 8193;
  s.max_pages = 33;
  plan = PlanTileDecode(s, 132, 512);  // 17
  plan.one_pass = true;
  EXPECT_EQ(FieldOf(s, plan), "plan");
  s = Shape(16, 8, 2, 64, 16384, 0);
  s.byte_keys = true;
  const internal::TileWorkspaceLayout one = internal::MakeTileWorkspaceLayout(s, served);
  const internal::TileWorkspaceLayout apart = internal::MakeTileWorkspaceLayout(s, two);
  const size_t rows = 32, tiles = 1024, group = 4;
  // On chip in one pass: the tiles' statistics and e values, the chunks' statistics, the
  // chunks' partials ([16][8][64] floats a row) and the rows' arrivals (32 x 4 bytes, in a
  // section of 256: sections are whole multiples of 256 bytes).
  const size_t kept = rows * tiles * group * (3 * 4 + 16 * 2) + rows * 16 * 2 * group * 4 +
                      rows * 16 * 8 * 64 * 4 + 256;
  EXPECT_EQ(apart.total - one.total, kept);
  EXPECT_EQ(one.probs, one.scaled_queries);  // an empty section
  EXPECT_EQ(one.partials, one.tile_stats);
  // one_pass needs byte keys, a window and a cluster's chunks.
  TilePlan bad = served;
  bad.value_window_tokens = 0;
  EXPECT_EQ(FieldOf(s, bad), "plan");
  bad = PlanTileDecode(s, 132, 512);
  bad.one_pass = true;
  EXPECT_EQ(FieldOf(s, bad), "plan");
  TileDecodeShape tree = s;
  tree.byte_keys = false;
  EXPECT_EQ(FieldOf(tree, served), "plan");
  // The one predicate the plan check, ChooseTileOnePass and the bench share, on the same cases.
  EXPECT_TRUE(TileOnePassAllowed(s, two));
  EXPECT_FALSE(TileOnePassAllowed(s, PlanTileDecode(s, 132)));  // no window
  EXPECT_FALSE(TileOnePassAllowed(s, PlanTileDecode(s, 132, 512)));  // 32 windows
  EXPECT_FALSE(TileOnePassAllowed(tree, PlanTileDecode(tree, 132, 1024)));  // the tree's keys
}

}  // namespace
}  // namespace readkv::cuda
