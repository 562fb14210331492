// The tile reader on the GPU (issue 37; docs/readkv.md, "The tile reader", "The tile layout"):
// one decode step over tile-layout bit planes (readkv::codec::TilePlaneStore's bytes), both
// products on tensor cores (mma.sync.m16n8k16, f16 in, f32 accumulate), the GQA heads of a KV
// head in the MMA's N = 8 dimension. Its GPU tests are tests/tile_attention_test.cc (against the
// CPU reference); the present kernels, Value windows included, passed them on an H100
// (2026-12-06, e3f1576, memcheck and racecheck clean; readkv/cuda/README.md). Served by `kvgate serve --device cuda --reader
// tile` (readkv/model's GpuKvCache: no residual window; outlier page blocks with --outlier-cap).
//
// The tile pools (docs/readkv.md, "The tile layout"): pages of kPageTokens = 256 tokens, as
// ReadKV's (decode_attention.h), each page 16 token tiles:
//   key_tiles, value_tiles: [num_pages][H_kv][16][d / 16][W][32] bytes; token tile j of sequence
//     b (its tokens 16 j .. 16 j + 15) is slot j % 16 of page page_table[b * max_pages + j / 16]
//     (src/tile_pages.h, TileOffset), and a tile holds the d / 16 groups x W planes of 32 bytes
//     of a TilePlaneStore's token tile (fragment order, codec::TileElement). Only the tiles below
//     ceil(encoded_lens[b] / 16) are read, so only the first ceil(encoded_lens[b] / 256) entries
//     of a row of the page table must name pages of the pools; a page belongs to one sequence.
//     Capacity is whole pages (the allocator's unit, as ReadKV's).
//   page_table: [B][max_pages] int32, TileDecodeShape::max_pages >= ceil(max_encoded_tokens /
//     256) columns (may be null, with max_pages 0, when no sequence has encoded tokens).
// TileAppend writes the pools (codes ORed into zeroed pages).
// Inputs, per (sequence b, KV head h):
//   residual_keys, residual_values: [B][H_kv][max_residual][d] BF16 bits, the exact window,
//     residual_lens[b] tokens of it read (keys post-RoPE and transformed, as the CPU's
//     TileLayerView holds them).
//   queries [B][H_q][d] float (keys' domain); out [B][H_q][d] float.
// Outlier lists (optional; docs/readkv.md "Outliers", the codec's OutlierStore in a GPU layout,
// src/tile_outliers.h packs an entry and addresses a block): per (page, KV head), separately for
// K and V, a fixed-size page outlier block, the GPU image of one OutlierStore block (a page is a
// store block of 256 tokens), in its own pool beside the tile pools and under the same page table:
//   key_outlier_pages, value_outlier_pages: [num_pages][H_kv][kPageOutlierBlockWords] u32, a
//     block = u16 tile_start[17] (little-endian, two a word; zero padded to 64 bytes), then
//     kPageOutlierEntries u32 entries (token in tile, channel, fp16 z), sorted by (token,
//     channel) as OutlierStore sorts a block. Token tile j of sequence b reads the block (page
//     page_table[b * max_pages + j / 16], h), entries tile_start[j % 16] .. tile_start[j % 16 + 1]
//     (non-decreasing, tile_start[16] the page's entries <= kPageOutlierEntries; unused entries
//     and padding are zero). Entries only of tokens < encoded_lens[b]. A zeroed block is an empty
//     page; TileAppend keeps tile_start[j] = the page's count for every tile past its last token.
// Either kind's pool may be null (no lists of that kind: the kernels' behaviour without them,
// bit for bit). With lists every listed element reads as fp16(z): K before the softmax,
// logit += (q~ scale)_c * (sigma_c * correction(z, t_group)); V before sigma, mu and the
// inverse transform, acc += p * correction(z, t_block), p the f16 probability of the Value MMA
// (codec::AddKeyOutlierLogits / AddValueOutlierSums; the correction needs z's sign and the
// depth only: TileCentroids::outermost). An element is listed only if its code is clipped (all
// ones or all zeros), as the codec guarantees.
// The codec (ReadKvCodec: means, stds, signs of the layer; device memory) and the policy
// (ReadKvReadPolicy: R_K, R_V and the Threshold allocator's increments) are
// decode_attention.h's; both increment tables must be the step-1 table
// (DepthAllocator::increment with t_min 1, step 1: W - 1 entries), since its Value step is 1.
// Depths: per 16-channel Key group and per 16-token Value block, exactly
// codec::ChooseKeyGroupDepths / ChooseValueBlockDepths for the weights the GPU computed (Key
// weights are bit-identical to the CPU's; Value weights come from the GPU's probabilities).
//
// Launches (all on `stream`, in order; the plan fixes the grid):
//   1. TilePrepare (H_kv, B) x d: transformed queries, Key group weights and depths, folded f16
//      queries (scale * q~ * sigma), the residual window's exact logits; with Key lists also
//      the f32 scale * q~ the corrections take. Not launched with byte keys: there every
//      TileLogits block folds its row's queries itself, under its first loads' latency, and the
//      row's blocks share the residual window's logits (the Key depths are all 8).
//   2. TileLogits (chunks, H_kv, B) x 128: q.K over the chunk's token tiles on tensor cores, the
//      planes staged through shared memory by cp.async; per tile and head f16 e = exp(l - M)
//      and the statistics M, sum e, sum e^2 (f32 logits only for TileDecodeDebug::logits); a
//      tile's Key list entries are added to its logits before its statistics.
//   3. TileSelect (H_kv, B) x 256: softmax statistics and Value block weights from the tiles'
//      statistics, Value depths (block radix selection of the cut).
//   4. TileValues (chunks, H_kv, B) x 128: sum_i e_i C(code_i) per chunk on tensor cores, the
//      e values, maxima and planes staged by cp.async; a tile's Value list entries added after
//      its MMAs.
//   5. TileCombine (H_kv, B) x d: chunks summed, mu mass + sigma acc + the residual window's
//      values, inverse V transform.
// With a Value window (TilePlan::value_window_tokens = chunk_tokens) launches 3-5 are one:
//   6. TileWindowValues (chunks, H_kv, B) x 128: every block forms the row's softmax statistics
//      from the chunks' (TileLogits writes each chunk's per head), its own chunk's Value block
//      weights and depths (the window's cut: block radix selection over its <= 128 blocks),
//      then TileValues' sums; the block of the row that finishes last sums the partials and
//      does TileCombine's work. No pass over a whole row is serial, and no launch has one
//      block per row.
// With byte keys and a Value window whose row fits one cluster, a plan with one_pass set (never
// PlanTileDecode's but ChooseTileOnePass's: faster only while every row's cluster is resident,
// TilePlan says why) makes the call one launch:
//   7. TileWindowPass (chunks, H_kv, B) x 128 in clusters of (chunks, 1, 1), a row a cluster:
//      each block does TileLogits' work for its chunk with the e values and maxima kept in its
//      shared memory, the cluster exchanges the chunks' statistics through distributed shared
//      memory, and each block goes on with TileWindowValues' work for its window. Same
//      arithmetic in the same order: the same bits as launches 2 and 6.
// Byte keys (TileDecodeShape::byte_keys; codec::PlaneLayout::kTilesByteKeys, docs/readkv.md
// "Byte keys"): every key tile holds its 256 uniform-grid codes (codec/key_bytes.h) in fragment
// order instead of W = 8 planes, same sizes and offsets; value tiles are unchanged. Keys are read
// whole: the policy's key_bits must be 8 (every Key group at depth 8, as the allocator gives
// them). TileLogits decodes a lane's 8 codes from one 8-byte load (tile_fragment.h,
// DecodeByteKeys), and Key list entries correct against the grid's extreme value 127.5 / 32
// (codec::ByteKeyOutlierCorrection).
// Thread-safety: reentrant; two calls that share a workspace must be ordered.
#pragma once

#include <cstddef>
#include <cstdint>

#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/one_pass_mode.h"
#include "readkv/cuda/tile_centroids.h"

namespace readkv::cuda {

// The page outlier block (above): E entries per (page, KV head) and kind, the codec's default
// per-block budget (codec::kDefaultOutlierBlockCap; docs/readkv.md "Outliers" says how it was
// measured), after a 64-byte header.
inline constexpr int kPageOutlierEntries = 160;
inline constexpr int kPageOutlierHeaderWords = 16;  // u16 tile_start[17], padded to 64 bytes
inline constexpr int kPageOutlierBlockWords = kPageOutlierHeaderWords + kPageOutlierEntries;
inline constexpr int64_t kPageOutlierBlockBytes = 4 * int64_t{kPageOutlierBlockWords};

struct TileDecodeShape {
  int batch = 1;
  int heads_q = 32;
  int heads_kv = 8;
  int head_dim = 128;           // 64 or 128
  int store_bits = 8;           // W, 1..8
  int max_encoded_tokens = 0;   // >= every encoded_lens[b]
  int max_residual_tokens = 0;  // >= every residual_lens[b]; the rows' stride of the window
  int max_pages = 0;            // columns of page_table, >= ceil(max_encoded_tokens / 256)
  // The key pool holds byte keys (below, "Byte keys"); needs store_bits 8.
  bool byte_keys = false;

  int group() const { return heads_q / heads_kv; }
  int groups() const { return head_dim / 16; }
  int max_token_tiles() const { return (max_encoded_tokens + 15) / 16; }
};

struct TileDecodeInputs {
  const float* queries = nullptr;           // [B][H_q][d]
  const uint8_t* key_tiles = nullptr;       // [num_pages][H_kv][16][d / 16][W][32]
  const uint8_t* value_tiles = nullptr;     // same shape
  const int32_t* page_table = nullptr;      // [B][max_pages]
  const uint16_t* residual_keys = nullptr;  // [B][H_kv][max_residual][d] BF16
  const uint16_t* residual_values = nullptr;
  const int32_t* encoded_lens = nullptr;   // [B], each in [0, max_encoded_tokens]
  const int32_t* residual_lens = nullptr;  // [B], each in [0, max_residual_tokens]; >= 1 token
                                           // per sequence in all
  float* out = nullptr;                    // [B][H_q][d]
  // The outlier page blocks (above); null: none of that kind.
  const uint32_t* key_outlier_pages = nullptr;    // [num_pages][H_kv][kPageOutlierBlockWords]
  const uint32_t* value_outlier_pages = nullptr;  // same shape
};

// How a call splits its work, chosen on the host (PlanTileDecode) and passed to the launcher
// explicitly (FlashInfer's plan/run split: no launcher reads the environment).
struct TilePlan {
  int chunk_tokens = 1024;  // encoded tokens per Logits/Values block, a multiple of kTileChunkStep
  int chunks = 1;           // ceil(max_encoded_tokens / chunk_tokens), at least 1
  // The reader plan's Value window (codec::ReaderPlan::value_window_tokens): 0, the Value budget
  // is the row's (launches 1-5 below); otherwise it must equal chunk_tokens, and each Values
  // block cuts its own chunk's depths (launches 1, 2 and 6).
  int value_window_tokens = 0;
  // One launch (TileWindowPass) instead of launches 2 and 6: with byte keys and a Value window,
  // a row's chunks are one thread-block cluster that keeps the e values on chip and exchanges
  // the chunks' softmax statistics through distributed shared memory. Needs byte keys, a Value
  // window and chunks <= kTileMaxClusterChunks. On an H100 it takes 55.0 us at the served point
  // against the two launches' 59.5-59.8 (8K x 1: 27.0 against 28.6), but only while the call's
  // rows (batch x H_kv clusters) are all resident at once, which PlanTileDecode (host only)
  // cannot know: ChooseTileOnePass (below) asks the device and is how kvgate serve sets it;
  // docs/performance-notes.md, "One pass per row".
  bool one_pass = false;
};
// A chunk is a multiple of 512 tokens (its four warps' shares then split evenly into tiles),
// at most 2048 tokens (a Values warp keeps the depths of its <= 32 tiles in one register).
inline constexpr int kTileChunkStep = 512;
inline constexpr int kTileMaxChunk = 2048;
// The largest thread-block cluster of an H100 or H200 (16, non-portable; 8 is the portable
// size): a one-pass row has at most this many chunks.
inline constexpr int kTileMaxClusterChunks = 16;

// Whether a call of this shape and plan may run in one pass (TilePlan::one_pass): byte keys, a
// Value window, a row's windows in one cluster. Whether it should is ChooseTileOnePass's (below).
inline bool TileOnePassAllowed(const TileDecodeShape& shape, const TilePlan& plan) {
  return shape.byte_keys && plan.value_window_tokens > 0 && plan.chunks <= kTileMaxClusterChunks;
}

// The plan for a shape on a device of `sm_count` SMs: the largest chunk of 2048 or 1024 tokens
// that still gives every SM four Logits blocks (512 when none does): a block holds 33 KB of
// staging, ~6 fit an SM, and a whole number of waves matters less past a few. With a Value
// window (the reader plan's, tokens) the chunk is the window. Throws
// readkv::codec::InvalidArgument naming the field for a shape the kernels refuse (head_dim not 64
// or 128, group not 1, 2, 4 or 8, store_bits outside 1..8, negative or zero sizes, no tokens),
// and "value_window" for a window that is not 0 or a chunk (512, 1024, 1536 or 2048).
TilePlan PlanTileDecode(const TileDecodeShape& shape, int sm_count, int value_window_tokens = 0);

// The workspace a call needs (device memory, no initialisation needed). Throws as PlanTileDecode
// for a bad shape, and InvalidArgument("plan") for a plan whose chunks do not cover the tokens.
size_t TileDecodeWorkspaceBytes(const TileDecodeShape& shape, const TilePlan& plan);

// A one-pass block's timeline (TileDecodeDebug::phases): where its lifetime goes, for the bench
// (`kvgate bench attention`, docs/performance-notes.md). Thread 0 of each TileWindowPass block
// reads its SM's clock (clock64, cycles) at each stamp below, in program order, and the global
// timer (%globaltimer, ns) at the first and last: start; its chunk's Logits done (thread 0's
// warp); the cluster barrier passed (every chunk's statistics visible); the row's statistics
// formed; the window's Value depths cut; its Value stream done and its partial written; its
// end (the row finished by its last block, the cluster's last barrier passed). Lane 0 of each
// of its kTilePhaseWarps warps also reads the clock when that warp's share of the Value stream
// is done (before the block's barrier that ends the phase; 0 in a block with no Value tiles).
enum TilePhaseStamp : int {
  kStampStart,
  kStampLogits,
  kStampBarrier,
  kStampStatistics,
  kStampCut,
  kStampValues,
  kStampEnd,
  kTilePhaseStamps
};
inline constexpr int kTilePhaseWarps = 4;  // the warps of a TileWindowPass block
struct TilePhaseClocks {
  unsigned long long clock[kTilePhaseStamps];            // SM cycles at each stamp
  unsigned long long values_warp_end[kTilePhaseWarps];  // SM cycles, each warp's Values done
  unsigned long long global_start_ns;                   // the global timer at kStampStart ...
  unsigned long long global_end_ns;                     // ... and at kStampEnd
  unsigned sm;  // the SM it ran on (%smid, at kStampStart)
};

// Optional outputs for tests (any may be null; device memory).
struct TileDecodeDebug {
  uint8_t* key_depths = nullptr;    // [B][H_kv][d / 16]
  uint8_t* value_depths = nullptr;  // [B][H_kv][max_token_tiles]
  double* block_weights = nullptr;  // [B][H_kv][max_token_tiles], what the Value depths came from
  float* logits = nullptr;  // [B][H_q][stride], stride = max_encoded + max_residual rounded up
                           // to 16: the logits of the encoded tokens, then the residual ones
  // [2], added to (not set): the call's logical plane reads in bits, sum over rows of
  // 16 E sum_g t_g + d sum_j t_j n_j (E encoded tokens, t_g a Key group's depth, t_j a Value
  // tile's, n_j its tokens), and its plane payload in bytes, 32 ceil(E / 16) sum_g t_g +
  // 2 d sum_j t_j (whole 32-byte plane sectors). The codec's tile reader counts the same
  // (TileAttend's ledgers; outlier lists and the residual window are not in these two). Summed
  // by TilePrepare (byte keys: TileLogits' first block of the row) and TileSelect with one
  // atomic add per row, so a server keeps its ledgers
  // without reading depths back.
  unsigned long long* totals = nullptr;  // [2], added to: logical bits, physical bytes
  // [1], added to: the outlier entries the call's lists hold, of each kind given, every entry of
  // each row's pages up to its encoded length (each page block's count, tile_start[16]), 4 bytes
  // each in the ledgers. Summed by TileSelect with one atomic add per row; untouched without lists.
  unsigned long long* outlier_entries = nullptr;
  // [B][H_kv][chunks] (a block's, in grid order: chunk fastest), set: a one-pass call's
  // timeline per block (TilePhaseClocks, above); untouched by the two or five launches.
  TilePhaseClocks* phases = nullptr;
};

// One decode step. `centroids` by value (a kernel parameter). Returns cudaErrorInvalidValue for
// a plan or shape the kernels cannot run (checked as TileDecodeWorkspaceBytes does, without
// throwing), byte keys with a policy whose key_bits is not 8, a null input (the pools and page table may be null only when max_encoded_tokens is
// 0); launch errors otherwise. Never synchronises.
cudaError_t TileDecodeAttention(const TileDecodeShape& shape, const TileDecodeInputs& inputs,
                                const ReadKvCodec& codec, const tile::TileCentroids& centroids,
                                const ReadKvReadPolicy& policy, const TilePlan& plan,
                                void* workspace, cudaStream_t stream,
                                const TileDecodeDebug& debug = {});

// For a one-pass plan (TilePlan::one_pass), how many of the call's clusters (a row each, batch x
// heads_kv in all) the current device holds at once: cudaOccupancyMaxActiveClusters for
// TileWindowPass's launch, into *clusters. Fewer than the call's clusters means it runs in
// waves. cudaErrorInvalidValue for a plan that is not one pass, a shape or plan the kernels
// refuse, or a null pointer; launches nothing.
cudaError_t TileOnePassResidentClusters(const TileDecodeShape& shape, const TilePlan& plan,
                                        int* clusters);

// Whether a call of this shape and plan should run in one pass (TilePlan::one_pass), the choice
// kvgate serve makes for every tile-reader call and `kvgate bench attention` makes unless told:
// true when the plan allows it (byte keys, a Value window, at most kTileMaxClusterChunks
// chunks), the current device launches thread-block clusters, and it holds all of the call's
// batch x heads_kv clusters at once (TileOnePassResidentClusters). One pass measured faster
// than the two launches wherever its rows were resident, and ~1.5x slower when they ran in two
// waves (docs/performance-notes.md, "One pass per row"), so a call that would run in waves
// stays in two launches. The device's answer depends on the device, head_dim, group, chunks
// and chunk_tokens only; it is asked once per such key and kept for the process (thread-safe),
// so a call pays a cached lookup. Into *one_pass (false on any error); cudaErrorInvalidValue
// for a null pointer or an allowed plan whose shape the kernels refuse, the device's error
// otherwise. Launches nothing.
cudaError_t ChooseTileOnePass(const TileDecodeShape& shape, const TilePlan& plan,
                              bool* one_pass);

// plan->one_pass as `mode` asks (one_pass_mode.h): kAuto, ChooseTileOnePass's answer (its error
// returned); kOn, every byte-key call (a launch refuses a plan TileOnePassAllowed refuses); kOff,
// never. What both `kvgate serve` and `kvgate bench attention` call with their --one-pass.
inline cudaError_t ApplyOnePassMode(OnePassMode mode, const TileDecodeShape& shape,
                                    TilePlan* plan) {
  switch (mode) {
    case OnePassMode::kOn:
      plan->one_pass = shape.byte_keys;
      return cudaSuccess;
    case OnePassMode::kOff:
      plan->one_pass = false;
      return cudaSuccess;
    case OnePassMode::kAuto:
      break;
  }
  return ChooseTileOnePass(shape, *plan, &plan->one_pass);
}

// The write side of the tile pools (layout above; device memory) and, optionally, of the outlier
// page blocks: both outlier pools null (no lists written), or both set with the rest.
struct TileCache {
  uint8_t* key_tiles = nullptr;    // [num_pages][H_kv][16][d / 16][W][32]
  uint8_t* value_tiles = nullptr;  // same shape
  uint32_t* key_outlier_pages = nullptr;    // [num_pages][H_kv][kPageOutlierBlockWords]
  uint32_t* value_outlier_pages = nullptr;  // same shape
  int outlier_cap = 0;             // entries per (token, KV head) and kind, 1..16
  float outlier_threshold = 0.0f;  // |z| past which a value is listed (the codec's resolved one)
  void* outlier_workspace = nullptr;  // TileAppendOutlierWorkspaceBytes(tokens, H_kv, cap)
  // [3], added to (not set): values past the threshold beyond a token's cap, selected entries
  // past a block's budget (kPageOutlierEntries), tokens refused as out of order (their entries
  // not written). The first two summed over K and V are codec::OutlierStats::dropped().
  unsigned long long* outlier_dropped = nullptr;
  // Keys written as byte keys (TileDecodeShape::byte_keys): one plain byte store per key element
  // (its byte is its own), codec::EncodeKeyByte of the same standardised z; needs W = 8.
  bool byte_keys = false;
};

// Device workspace TileAppend needs for `tokens` tokens with outlier lists of cap `cap` (the
// staged entries, [tokens][H_kv][2][cap] u32, and their counts, [tokens][H_kv][2] u32).
size_t TileAppendOutlierWorkspaceBytes(int tokens, int heads_kv, int cap);

// Encodes and appends tokens into the tile pools: keys and values [tokens][H_kv][d] float (keys
// post-RoPE); token k goes to
// position positions[k] of sequence seq_ids[k], in page page_table[seq_ids[k] * max_pages +
// positions[k] / 256] (shape: heads_kv, head_dim 64 or 128, max_pages; the rest unused). Codes
// are bit-identical to readkv::codec's (the encode of readkv_encode.cuh). A token's bits land in bytes that the other 15 tokens of its tile also
// write: they are ORed in by 32-bit atomics, so the pages must be zero before their tokens are
// appended (zero pages when allocating), any number of a tile's tokens may be appended in one
// launch, and a slot must not be appended twice.
// With outlier pools, the lists too, the codec's OutlierStore bytes for the same standardised
// values (docs/readkv.md "Outliers"): the append kernel stages each (token, head, kind)'s
// selection (|z| > threshold, ranked by |z|, ties the lower channel, the first `cap`; z in fp16
// round to nearest even) in the workspace, then a second kernel, a thread per (run of a page's
// tokens, head, kind), appends each token's entries after the block's, within the block budget
// kPageOutlierEntries (the codec's block_cap must be that), sorted by channel, and keeps
// tile_start right. Its assumption: a page's tokens arrive in position order, and within one
// launch a page's tokens are consecutive (tokens grouped by sequence, each sequence's in
// increasing position: how a server batches a prefill and a decode step). A token that breaks it
// where it shows (its tile before one already holding entries, or its slot not after the last
// entry in its tile) has no entries written and is counted (outlier_dropped[2]): a test must
// find that counter 0. New pages' blocks must be zero, as the tile pools.
// Returns cudaErrorInvalidValue for a bad shape, a store_bits outside 1..8 (byte keys: not 8), a
// null pointer, or
// outlier pools with a cap outside 1..16, a threshold not finite and positive, or a null
// workspace or counter; never synchronises.
cudaError_t TileAppend(const DecodeShape& shape, int tokens, const float* keys,
                       const float* values, const int32_t* seq_ids, const int32_t* positions,
                       const int32_t* page_table, const ReadKvCodec& codec,
                       const TileCache& cache, cudaStream_t stream);

}  // namespace readkv::cuda
