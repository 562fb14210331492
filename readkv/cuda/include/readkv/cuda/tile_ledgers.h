// The ledgers of one TileDecodeAttention call (tile_attention.h; docs/ledgers.md): capacity,
// logical reads and the physical-traffic model, as `kvgate bench attention` reports them for a
// `tile:W:R` row. Host functions over host copies of the lengths and of the depths the call chose
// (TileDecodeDebug::key_depths / value_depths); they compile without CUDA (src/traffic.cc).
//
// The traffic model, like decode_attention.h's, counts the bytes the five launches' own loops
// read and write in global memory (an upper bound of DRAM traffic: re-reads that hit L2 count
// too), by category and by launch. Per (sequence b, KV head) row, E = encoded_lens[b] tokens in
// tiles = ceil(E / 16) token tiles, R = residual_lens[b], g = H_q / H_kv heads, d / 16 groups,
// chunks = ceil(E / chunk_tokens) chunks holding tokens:
//   1. TilePrepare: reads the g queries, the Key mean, std and signs, the Key increments and the
//      R residual keys (BF16, payload); writes the d / 16 Key group depths, the folded queries
//      (d / 16 groups x 32 lanes x 8 bytes, the B fragments) and the residual logits.
//   2. TileLogits (plan.chunks blocks a row): each block reads the row's group depths, each warp
//      stage the folded queries (internal::TileLogitsStages), per tile its page-table entry (4
//      bytes, metadata) and the Key planes t_g x 32 bytes per (tile, group); writes per tile and
//      head 16 f16 e = exp(l - M) and 3 floats (M, sum e, sum e^2).
//   3. TileSelect: reads the Value increments, 5 floats of the tiles' statistics per tile and
//      head (M for the maxima, M and sum e for the sums, M and sum e^2 for the weights) and the
//      residual logits twice; writes the g heads' statistics (4 floats), the block weights (a
//      double per tile, read back once by the depth pass; the radix passes' re-reads when a cut
//      is needed are data-dependent, not counted) and the Value depths.
//   4. TileValues (the row's `chunks` blocks that hold tokens; the others exit at once): each
//      reads the g heads' maxima; together they read per tile its depth, its page-table entry
//      (4 bytes, metadata), its e values and maxima (g x (32 + 4) bytes) and the Value planes
//      t_r x 32 bytes per (tile, group); each writes its partial g x d floats.
//   5. TileCombine: reads the Value mean, std and signs, the statistics (2 floats a head, 3 with
//      a residual window), the partials, the residual logits and values; writes the g x d outputs.
// The f16 centroid tables (tile::TileCentroids) are a kernel parameter of TileLogits and
// TileValues: counted once per launch. The lengths arrays are not counted (nor are the other
// kernels' seq_lens).
// Outlier lists (tile_attention.h's page blocks, when `lists` is given; counted as payload):
// TilePrepare writes the f32 scaled queries (g x d floats a row); TileLogits (Key lists) and
// TileValues (Value lists) read per tile its page-table entry again (metadata) and, per warp
// share of a chunk and page it touches, its tiles' tile_start halves and their entries, each a
// contiguous range counted in the 32-byte sectors it touches; per Key entry TileLogits also reads
// sigma_c and the g scaled queries of channel c (4 + 4 g bytes).
#pragma once

#include <cstdint>

#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/tile_attention.h"
#include "readkv/cuda/tile_outlier_lists.h"

namespace readkv::cuda {

// Ledger 1: the tile pools of keys and values in whole pages, the allocation unit
// (ceil(encoded_lens[b] / 256) pages x 16 token tiles x d / 16 groups x H_kv x W x 32 bytes a
// sequence; the page table is not counted, as for ReadKV's pages), the BF16 residual
// windows (keys and values, residual_lens[b] tokens), and the codec's tables: the means, stds
// and signs of K and V ([H_kv][d] floats each), the step-1 increment table (W - 1 doubles) and
// the f16 centroid tables; with `lists`, per page of a sequence, KV head and kind one whole page
// outlier block (kPageOutlierBlockBytes: the pool's unit, as the tile pools' pages are).
int64_t TileCapacityBytes(const TileDecodeShape& shape, const int32_t* encoded_lens_host,
                          const int32_t* residual_lens_host,
                          const TileOutlierPages* lists = nullptr);

// Ledger 2: the plane bytes the chosen depths read, whole 32-byte sectors: per row
// sum_g t_g x tiles x 32 (keys) + sum_r t_r x (d / 16) x 32 (values). key_depths_host
// [B][H_kv][d / 16] and value_depths_host [B][H_kv][max_token_tiles] as TileDecodeDebug wrote
// them. With `lists`, every tile being read, per row and kind 4 bytes a tile (its two tile_start
// halves) and 4 bytes per entry of the encoded tokens.
int64_t TileLogicalBytes(const TileDecodeShape& shape, const int32_t* encoded_lens_host,
                         const uint8_t* key_depths_host, const uint8_t* value_depths_host,
                         const TileOutlierPages* lists = nullptr);

// Ledger 3, by launch ("TilePrepare", "TileLogits", "TileSelect", "TileValues", "TileCombine";
// with a Value window "TilePrepare", "TileLogits", "TileWindowValues"; byte keys launch no
// TilePrepare; a one-pass plan is "TileWindowPass" alone, without the tiles' e values and
// statistics and the chunks' statistics, which stay on chip) and by category; both depth
// arrays null: every term but the planes' payload.
TrafficBytes TileDecodeTraffic(const TileDecodeShape& shape, const TilePlan& plan,
                               const int32_t* encoded_lens_host,
                               const int32_t* residual_lens_host,
                               const uint8_t* key_depths_host, const uint8_t* value_depths_host,
                               const TileOutlierPages* lists = nullptr);

}  // namespace readkv::cuda
