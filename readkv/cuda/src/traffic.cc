// The traffic model of decode_attention.h and the tile reader's ledgers (tile_ledgers.h): bytes
// each kernel reads or writes in global memory, counted from the kernels' own loops (an upper
// bound of DRAM traffic: re-reads that hit L2 are counted too, and said so in the bench output).
// Host-only; compiled with and without CUDA.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/tile_centroids.h"
#include "readkv/cuda/tile_ledgers.h"
#include "split_work.h"
#include "tile_outliers.h"
#include "tile_pages.h"
#include "tile_plan.h"
#include "tile_staging.h"

namespace readkv::cuda {
namespace {

int64_t Chunks(int64_t tokens, int chunk) { return (tokens + chunk - 1) / chunk; }

// Builds a TrafficBytes term by term: each term goes to its category and to the launch that reads
// or writes it, so the two views add up to the same total by construction.
class Ledger {
 public:
  Ledger(std::initializer_list<const char*> kernels) {
    int k = 0;
    for (const char* kernel : kernels) t_.kernels[k++].kernel = kernel;
  }
  void Read(int64_t TrafficBytes::*category, int kernel, int64_t bytes) {
    t_.*category += bytes;
    t_.kernels[kernel].read += bytes;
  }
  void Write(int64_t TrafficBytes::*category, int kernel, int64_t bytes) {
    t_.*category += bytes;
    t_.kernels[kernel].write += bytes;
  }
  TrafficBytes Take() const { return t_; }

 private:
  TrafficBytes t_;
};
constexpr auto kPayload = &TrafficBytes::payload, kMetadata = &TrafficBytes::metadata,
               kScores = &TrafficBytes::scores, kSchedule = &TrafficBytes::schedule,
               kPartials = &TrafficBytes::partials, kIo = &TrafficBytes::io;

// The dense and FP8 kernels' schedule (split_work.h) with the grid they get on an H100/H200
// (132 SMs; dense holds two blocks per SM, FP8 three). The persistent schedule: one partial per
// (block, head it holds tiles of, warp), written once and read once by the combine. The cluster
// schedule: one launch whose partials stay in the clusters' shared memory, each head's outputs
// written by its cluster.
TrafficBytes SplitTraffic(const DecodeShape& shape, const int32_t* seq_lens, int element_bytes,
                          bool scales, int blocks_per_sm, const SplitPlan& plan) {
  enum { kSplit, kCombine };
  const int resident = blocks_per_sm * internal::kAssumedSms;
  const int64_t heads = static_cast<int64_t>(shape.batch) * shape.heads_kv;
  const int cluster =
      plan.valid()  // the launcher refuses an invalid plan: its terms are the persistent ones
          ? internal::PlannedClusterSize(plan.cluster, heads, resident, shape.min_tokens,
                                         shape.max_tokens)
          : 0;
  Ledger t = cluster > 0 ? Ledger({"SplitDecodeKernel"})
                         : Ledger({"SplitDecodeKernel", "CombineSplits"});
  const internal::SplitWork work =
      cluster > 0 ? internal::MakeClusterWork(shape.batch, shape.heads_kv, shape.max_tokens, cluster)
                  : internal::MakeSplitWork(shape.batch, shape.heads_kv, shape.max_tokens, resident);
  const int64_t d = shape.head_dim;
  const int64_t g = shape.heads_q / shape.heads_kv;
  for (int b = 0; b < shape.batch; ++b) {
    const int64_t tokens = seq_lens[b];
    const int64_t real = Chunks(tokens, internal::kSplitTileTokens);
    t.Read(kPayload, kSplit, 2 * tokens * shape.heads_kv * d * element_bytes);
    t.Read(kMetadata, kSplit, 4 * shape.heads_kv * real);  // a page-table entry per tile
    if (scales) t.Read(kMetadata, kSplit, 2 * 4 * shape.heads_kv);
    for (int h = 0; h < shape.heads_kv; ++h) {
      const int64_t start = (static_cast<int64_t>(b) * shape.heads_kv + h) * work.per_head;
      int64_t segments = 0;
      for (int k = work.BlockOf(start); k < work.grid && work.Begin(k) < start + work.per_head;
           ++k) {
        const int64_t lo = std::max(work.Begin(k), start) - start;
        const int64_t end = std::min(work.Begin(k + 1), start + work.per_head);
        const int64_t hi = std::min(end - start, real);
        if (lo < hi) ++segments;
      }
      t.Read(kIo, kSplit, segments * g * d * 4);  // queries, per segment
      if (cluster > 0) {
        t.Write(kIo, kSplit, g * d * 4);  // outputs, merged in the cluster
        continue;
      }
      // Partials: each warp's output and (m, l) per segment, written and read back.
      const int64_t partials = segments * internal::kSplitWarpsPerBlock * g * (d + 2) * 4;
      t.Write(kPartials, kSplit, partials);
      t.Read(kPartials, kCombine, partials);
      t.Write(kIo, kCombine, g * d * 4);  // outputs
    }
  }
  return t.Take();
}

}  // namespace

int64_t DenseLogicalBytes(const DecodeShape& shape, const int32_t* seq_lens_host) {
  int64_t bytes = 0;
  for (int b = 0; b < shape.batch; ++b) {
    bytes += 2LL * seq_lens_host[b] * shape.heads_kv * shape.head_dim * 2;
  }
  return bytes;
}

int64_t Fp8LogicalBytes(const DecodeShape& shape, const int32_t* seq_lens_host) {
  return DenseLogicalBytes(shape, seq_lens_host) / 2;
}

TrafficBytes DenseDecodeTraffic(const DecodeShape& shape, const int32_t* seq_lens_host,
                                const SplitPlan& plan) {
  return SplitTraffic(shape, seq_lens_host, 2, false, 2, plan);
}

TrafficBytes Fp8DecodeTraffic(const DecodeShape& shape, const int32_t* seq_lens_host,
                              const SplitPlan& plan) {
  return SplitTraffic(shape, seq_lens_host, 1, true, 3, plan);
}

// The outlier lists' logical bytes of (b, h)'s `tiles` token tiles, both kinds: per tile its two
// tile_start halves (4 bytes) and its entries, 4 bytes each (ledger 2).
int64_t TileListReadBytes(const TileOutlierPages& lists, int b, int h, int64_t tiles) {
  int64_t bytes = 0;
  for (const bool keys : {true, false}) bytes += tiles * 4 + lists.Entries(keys, b, h, tiles) * 4;
  return bytes;
}

// Bytes of the 32-byte sectors that [begin, end) touches (0 when empty).
int64_t SectorBytes(int64_t begin, int64_t end) {
  return end > begin ? ((end - 1) / 32 - begin / 32 + 1) * 32 : 0;
}

// The sectors one kind's page blocks cost a TileLogits or TileValues launch over (b, h)'s `tiles`
// tiles: each warp share [lo, hi) of each chunk reads, per page it touches, the tile_start halves
// of its tiles there and the entries between, at their addresses in the pool.
int64_t TileListSectors(const TileOutlierPages& lists, bool keys, int b, int h, int64_t tiles,
                        const TilePlan& plan) {
  const int64_t chunk_tiles = plan.chunk_tokens / 16;
  int64_t bytes = 0;
  for (int64_t first = 0; first < tiles; first += chunk_tiles) {
    const int64_t end = std::min(tiles, first + chunk_tiles);
    for (int w = 0; w < internal::kTileBlockWarps; ++w) {
      const tile::WarpShare share =
          tile::ShareOfWarp(static_cast<int>(first), static_cast<int>(end), w);
      for (int64_t lo = share.lo; lo < share.hi;) {
        const int64_t hi = std::min<int64_t>(share.hi, (lo / tile::kPageTiles + 1) * tile::kPageTiles);
        const uint32_t* block = lists.BlockOfTile(keys, b, h, lo);
        const int64_t base = 4 * (block - lists.blocks(keys).data());
        const int s_lo = static_cast<int>(lo % tile::kPageTiles);
        const int s_hi = s_lo + static_cast<int>(hi - lo);
        bytes += SectorBytes(base + 2 * s_lo, base + 2 * (s_hi + 1));
        const int64_t entries = base + 4 * kPageOutlierHeaderWords;
        bytes += SectorBytes(entries + 4 * tile::PageTileStart(block, s_lo),
                             entries + 4 * tile::PageTileStart(block, s_hi));
        lo = hi;
      }
    }
  }
  return bytes;
}

int64_t TileCapacityBytes(const TileDecodeShape& shape, const int32_t* encoded_lens_host,
                          const int32_t* residual_lens_host, const TileOutlierPages* lists) {
  const int64_t d = shape.head_dim, heads = shape.heads_kv, w = shape.store_bits;
  const auto centroids = static_cast<int64_t>(sizeof(tile::TileCentroids));
  int64_t bytes = 6 * heads * d * 4 + (w - 1) * 8 + centroids;  // the codec's tables
  for (int b = 0; b < shape.batch; ++b) {
    // Key and value pools: whole pages of 16 token tiles (what a sequence holds allocated).
    const int64_t pages = Chunks(encoded_lens_host[b], kPageTokens);
    bytes += 2 * pages * tile::kPageTiles * (d / 16) * heads * w * 32;
    bytes += 2 * int64_t{residual_lens_host[b]} * heads * d * 2;  // BF16 window, K and V
    if (lists != nullptr) bytes += 2 * pages * heads * kPageOutlierBlockBytes;  // K and V blocks
  }
  return bytes;
}

int64_t TileLogicalBytes(const TileDecodeShape& shape, const int32_t* encoded_lens_host,
                         const uint8_t* key_depths_host, const uint8_t* value_depths_host,
                         const TileOutlierPages* lists) {
  const int groups = shape.groups();
  const int64_t max_tiles = shape.max_token_tiles();
  int64_t bytes = 0;
  for (int b = 0; b < shape.batch; ++b) {
    const int64_t tiles = Chunks(encoded_lens_host[b], 16);
    for (int h = 0; h < shape.heads_kv; ++h) {
      const int64_t row = int64_t{b} * shape.heads_kv + h;
      for (int g = 0; g < groups; ++g) bytes += key_depths_host[row * groups + g] * tiles * 32;
      for (int64_t r = 0; r < tiles; ++r) {
        bytes += int64_t{value_depths_host[row * max_tiles + r]} * groups * 32;
      }
      if (lists != nullptr) bytes += TileListReadBytes(*lists, b, h, tiles);
    }
  }
  return bytes;
}

TrafficBytes TileDecodeTraffic(const TileDecodeShape& shape, const TilePlan& plan,
                               const int32_t* encoded_lens_host,
                               const int32_t* residual_lens_host,
                               const uint8_t* key_depths_host, const uint8_t* value_depths_host,
                               const TileOutlierPages* lists) {
  // With a Value window launch 6 does the work of 3-5: their terms go to its entry. Byte keys
  // launch no TilePrepare: every TileLogits block folds its row's queries itself. One pass
  // (byte keys, a window) does it all in TileWindowPass, whose tiles' e values and statistics and
  // chunks' statistics never leave the chip.
  const bool windowed = plan.value_window_tokens > 0;
  const bool fold = shape.byte_keys;
  const bool one_pass = plan.one_pass;
  const int first = fold ? -1 : 0;  // TilePrepare's index, or -1
  const int kLogits = first + 1, kPrepare = fold ? kLogits : 0,
            kSelect = one_pass ? kLogits : first + 2,
            kValues = one_pass ? kLogits : first + (windowed ? 2 : 3),
            kCombine = one_pass ? kLogits : first + (windowed ? 2 : 4);
  Ledger t = one_pass ? Ledger({"TileWindowPass"})
             : windowed
                 ? (fold ? Ledger({"TileLogits", "TileWindowValues"})
                         : Ledger({"TilePrepare", "TileLogits", "TileWindowValues"}))
                 : (fold ? Ledger({"TileLogits", "TileSelect", "TileValues", "TileCombine"})
                         : Ledger({"TilePrepare", "TileLogits", "TileSelect", "TileValues",
                                   "TileCombine"}));
  const int64_t d = shape.head_dim, g = shape.group(), groups = shape.groups();
  const int64_t increments = (int64_t{shape.store_bits} - 1) * 8;
  const int64_t folded = groups * 32 * 8;  // the folded queries: a uint2 per (group, lane)
  const auto centroids = static_cast<int64_t>(sizeof(tile::TileCentroids));
  t.Read(kMetadata, kLogits, centroids);  // a kernel parameter: once per launch
  if (!one_pass) t.Read(kMetadata, kValues, centroids);
  const bool payload = key_depths_host != nullptr && value_depths_host != nullptr;
  if (payload) {
    // The planes: exactly the logical ledger's sectors, Keys by Logits and Values by Values.
    const int64_t max_tiles = shape.max_token_tiles();
    for (int b = 0; b < shape.batch; ++b) {
      const int64_t tiles = Chunks(encoded_lens_host[b], 16);
      for (int h = 0; h < shape.heads_kv; ++h) {
        const int64_t row = int64_t{b} * shape.heads_kv + h;
        for (int k = 0; k < groups; ++k) {
          t.Read(kPayload, kLogits, key_depths_host[row * groups + k] * tiles * 32);
        }
        for (int64_t r = 0; r < tiles; ++r) {
          t.Read(kPayload, kValues, int64_t{value_depths_host[row * max_tiles + r]} * groups * 32);
        }
      }
    }
  }
  for (int b = 0; b < shape.batch; ++b) {
    const int64_t encoded = encoded_lens_host[b], residual = residual_lens_host[b];
    const int64_t tiles = Chunks(encoded, 16);
    const int64_t chunks = Chunks(encoded, plan.chunk_tokens);  // Values blocks holding tokens
    for (int h = 0; h < shape.heads_kv; ++h) {
      const int64_t row = int64_t{b} * shape.heads_kv + h;
      int key_planes = 0;  // without the depths: every group at depth 1
      for (int k = 0; k < groups; ++k) key_planes += payload ? key_depths_host[row * groups + k] : 1;
      // 1. Prepare (byte keys: every Logits block reads the queries and the codec's vectors and
      // keeps what it folds on chip; the row's blocks share the residual window).
      const int64_t folders = fold ? plan.chunks : 1;
      t.Read(kIo, kPrepare, folders * g * d * 4);
      t.Read(kMetadata, kPrepare, folders * 3 * d * 4 + (fold ? 0 : increments));
      t.Read(kPayload, kPrepare, residual * d * 2);
      t.Write(kScores, kPrepare, g * residual * 4);
      if (!fold) {
        t.Write(kSchedule, kPrepare, groups);
        t.Write(kIo, kPrepare, folded);
      }
      // 2. Logits: every block of the plan reads the group depths, every warp stage the folded
      // queries (not with byte keys: on chip), every tile its page-table entry; per tile and head
      // 16 f16 e values and 3 statistics.
      t.Read(kMetadata, kLogits, tiles * 4);
      if (!fold) {
        t.Read(kSchedule, kLogits, groups * plan.chunks);
        t.Read(kIo, kLogits, internal::TileLogitsStages(plan, encoded, key_planes) * folded);
      }
      if (!one_pass) t.Write(kScores, kLogits, tiles * g * (16 * 2 + 3 * 4));
      if (one_pass) {
        // 6. WindowValues, its Select part, in the same blocks: every block reads the window's
        // logits twice and the increments; the statistics are on chip (the chunks' through the
        // cluster's shared memory), and so are the partials and their finish (no arrivals).
        t.Read(kMetadata, kSelect, plan.chunks * increments);
        t.Read(kPartials, kSelect, plan.chunks * g * 2 * residual * 4);
      } else if (windowed) {
        t.Write(kPartials, kLogits, plan.chunks * g * 2 * 4);  // every block's chunk statistics
        // 6. WindowValues, its Select part: every block of the plan reads the chunks'
        // statistics (those holding tokens) and the window's logits twice, the increments, and
        // M and sum e^2 of its tiles for their weights; the cut stays on chip; each counts
        // itself in the row's arrivals.
        t.Read(kMetadata, kSelect, plan.chunks * increments);
        t.Read(kPartials, kSelect, plan.chunks * (chunks * g * 2 * 4 + g * 2 * residual * 4));
        t.Read(kScores, kSelect, tiles * g * 2 * 4);
        t.Write(kSchedule, kSelect, plan.chunks * 4);
      } else {
        // 3. Select: the tiles' statistics (M for the maxima, M and sum e for the sums, M and
        // sum e^2 for the weights: 5 floats a tile and head), the window's logits twice.
        t.Read(kMetadata, kSelect, increments);
        t.Read(kScores, kSelect, tiles * g * 5 * 4 + g * 2 * residual * 4);
        t.Write(kPartials, kSelect, g * 4 * 4);
        t.Write(kScores, kSelect, tiles * 8);
        t.Read(kScores, kSelect, tiles * 8);
        t.Write(kSchedule, kSelect, tiles);
        // Values' heads' maxima and the depths, from memory.
        t.Read(kPartials, kValues, chunks * g * 4);
        t.Read(kSchedule, kValues, tiles);
      }
      // 4. Values: per tile its page-table entry, its e values and maxima (one pass: on chip).
      t.Read(kMetadata, kValues, tiles * 4);
      if (!one_pass) t.Read(kScores, kValues, tiles * g * (16 * 2 + 4));
      if (!one_pass) t.Write(kPartials, kValues, chunks * g * d * 4);
      // 5. Combine (with a window the statistics are on chip; in one pass the partials too).
      t.Read(kMetadata, kCombine, 3 * d * 4);
      t.Read(kPartials, kCombine,
             (windowed ? 0 : g * (residual > 0 ? 3 : 2) * 4) + (one_pass ? 0 : chunks * g * d * 4));
      t.Read(kScores, kCombine, g * residual * 4);
      t.Read(kPayload, kCombine, residual * d * 2);
      t.Write(kIo, kCombine, g * d * 4);
      if (lists != nullptr) {  // the outlier lists (tile_ledgers.h)
        if (!fold) t.Write(kIo, kPrepare, g * d * 4);  // the f32 scaled queries
        t.Read(kMetadata, kLogits, tiles * 4);  // each tile's page-table entry, again
        t.Read(kMetadata, kValues, tiles * 4);
        t.Read(kPayload, kLogits, TileListSectors(*lists, true, b, h, tiles, plan));
        t.Read(kPayload, kValues, TileListSectors(*lists, false, b, h, tiles, plan));
        const int64_t key_entries = lists->Entries(true, b, h, tiles);
        t.Read(kMetadata, kLogits, key_entries * 4);
        if (!fold) t.Read(kIo, kLogits, key_entries * g * 4);  // byte keys: on chip
      }
    }
  }
  return t.Take();
}

}  // namespace readkv::cuda
