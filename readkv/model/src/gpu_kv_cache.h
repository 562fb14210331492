// Internal to readkv/model (includes torch): the fp8 and readkv KV backends on a CUDA device
// (runtime.h, `kvgate serve --device cuda`). Every layer's K/V lives in one paged pool on the GPU
// in readkv::cuda's layouts (decode_attention.h, tile_attention.h), written by its append kernels
// and read by its batched decode-attention kernels: one append and one attention launch sequence
// per layer for all sequences of a step, nothing copied back to the host on the way.
//
// - "fp8": e4m3 codes with the calibrated amax/448 scales of codec::Fp8LayerCache (per tensor or
//   per KV head), bit-identical codes.
// - "readkv": the tile reader (issue 37; ReadKV's one GPU reader): the codec's codes bit for bit,
//   written by TileAppend into tile pools (tile_attention.h: [P][H_kv][16][d / 16][W][32] per K
//   and V, 256-token pages) and read by TileDecodeAttention, planned once per call by
//   PlanTileDecode for the device's SM count (queried once, at construction), in one launch
//   where ChooseTileOnePass says the device holds every row's cluster at once, each sequence's
//   R_K, R_V as its ReadKvReadPolicy with the step-1 increment table for both K and V, the
//   TileCentroids of the store's LloydTree; keys as byte keys with GpuKvConfig::byte_keys. With
//   outlier lists (GpuKvConfig::outliers, issue 36) each layer also has two page outlier pools
//   ([P][H_kv][kPageOutlierBlockWords] u32, K and V, the same page ids), written by TileAppend
//   (the codec's OutlierStore bytes, within the block budget) and read by TileDecodeAttention.
// The pools hold the tile reader's layout, so every sequence is read by it (the runtime refuses a
// request asking for another reader, and a server configured with another one on CUDA). No
// residual window is kept here: every token is encoded when appended (the tile reader is called
// with max_residual_tokens 0), unlike the CPU caches, whose newest incomplete 256-token block
// stays BF16 until it fills.
//
// Pages hold 256 tokens of every layer: a sequence owns one list of page ids, shared by all
// layers' pools. The pools grow (doubling, old pages copied) when a step needs more pages than
// they have; freed pages are reused (ReadKV pages are zeroed when handed out again, as the append
// kernels require). Ledgers are counted per call as the CPU backends count theirs: logical bytes
// and the physical-traffic model of readkv/cuda (traffic.cc, tile_ledgers.h); ReadKV's
// depth-dependent terms are summed on the device by the attention kernels themselves
// (TileDecodeDebug::totals) and read back only when asked for; the tile reader's logical bytes in
// the codec's TileAttend terms (a partial token tile counts its tokens, as on the CPU;
// tile_ledgers.h's TileLogicalBytes would count it whole), physical traffic tile_ledgers.h's (the
// planes' whole 32-byte sectors, plus TileDecodeTraffic's other terms without depths, which stage
// the folded queries as if every Key group were at depth 1).
//
// All work goes to the current device's legacy default stream, the one torch uses unless told
// otherwise, so it is ordered with the model's own torch ops. Not thread-safe (the runtime is
// driven by one thread).
#pragma once

#include <torch/torch.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/fp8.h"
#include "readkv/codec/outliers.h"
#include "readkv/cuda/one_pass_mode.h"

namespace readkv::cuda {
class StreamTimer;  // readkv/cuda/device.h
}  // namespace readkv::cuda

namespace readkv::model::internal {

struct GpuKvConfig {
  codec::KvBackend kind = codec::KvBackend::kFp8;  // kFp8 | kReadKv
  int layers = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;  // 64 or 128 (the kernels' head dims)
  torch::Device device = torch::kCUDA;
  std::shared_ptr<const codec::Calibration> calibration;
  codec::Fp8ScaleGranularity fp8_scale = codec::Fp8ScaleGranularity::kTensor;
  int store_bits = 8;  // W (readkv)
  // Resolved (codec::ResolveOutlierOptions); cap > 0 only with readkv, whose page blocks hold the
  // codec's default block budget (block_cap must be kPageOutlierEntries).
  codec::OutlierOptions outliers;
  // The tile reader's Value window (codec::ReaderPlan::value_window_tokens; 0: the row's
  // budget): its kernels' chunk, so 512, 1024, 1536 or 2048 (PlanTileDecode refuses others).
  int value_window_tokens = 0;
  // The tile reader's keys as byte keys (tile_attention.h, "Byte keys"): W = 8, read whole.
  bool byte_keys = false;
  // RuntimeOptions' one_pass: kAuto, one launch where ChooseTileOnePass allows it; kOff, the
  // two launches always (RuntimeOptions refuses kOn).
  readkv::cuda::OnePassMode one_pass = readkv::cuda::OnePassMode::kAuto;
};

// The ledgers of every attention call so far, in the codec's accounting terms.
// encode_seconds: GPU time of the append (encode) launches, by CUDA events; attention_seconds:
// the same of the attention calls (the queries' conversion and the backend's launches).
// outlier_read_bytes: of logical_read_bytes, the outlier lists (4 bytes a token tile, KV head and
// kind for its two tile_start halves, 4 an entry), counted in physical traffic too. The
// outlier_* counts: TileAppend's (values past the cap, entries past the block budget, tokens
// refused as out of order: always 0 from this cache's Begin order).
struct GpuKvLedgers {
  int64_t logical_read_bytes = 0;
  int64_t outlier_read_bytes = 0;
  int64_t outlier_past_cap = 0, outlier_over_budget = 0, outlier_out_of_order = 0;
  int64_t physical_traffic_bytes = 0;
  int64_t workspace_peak_bytes = 0;
  double encode_seconds = 0.0;
  double attention_seconds = 0.0;
};

// A sequence's ReadKV budgets: R_K and R_V of the tile reader (equal unless the policy splits R).
// Sequences with equal budgets share one launch sequence.
struct GpuReadBits {
  double key = 4.0;
  double value = 4.0;
  auto operator<=>(const GpuReadBits&) const = default;
};

class GpuKvCache {
 public:
  // Throws std::invalid_argument naming the field ("head_dim", "heads", "kv", "outlier_cap",
  // "outlier_block_cap", "byte_keys") for a geometry, kind, outlier lists or key format the
  // kernels do not run.
  explicit GpuKvCache(const GpuKvConfig& config);
  ~GpuKvCache();
  GpuKvCache(const GpuKvCache&) = delete;
  GpuKvCache& operator=(const GpuKvCache&) = delete;

  // A new empty sequence; bits are its ReadKV budgets (ignored by fp8). Throws
  // std::invalid_argument("sequence_id") if it is live.
  void AddSequence(uint64_t id, GpuReadBits bits);
  // Frees its pages; unknown ids are ignored.
  void RemoveSequence(uint64_t id);

  // One batched call over some sequences: sequence i (in this order) appends counts[i] tokens at
  // positions [starts[i], starts[i] + counts[i]) and then holds starts[i] + counts[i] tokens.
  // Maps the pages the appends need and uploads the page table, lengths and token positions once
  // for every layer of the call.
  struct Step {
    int batch = 0;
    int tokens = 0;           // appended tokens, sum of counts
    int max_pages = 1;
    int max_tokens = 1;
    std::vector<int32_t> lengths;        // host copy of seq_lens
    std::vector<GpuReadBits> read_bits;  // per sequence
    torch::Tensor page_table;            // int32 [B][max_pages] on the device
    torch::Tensor seq_lens;              // int32 [B]
    torch::Tensor token_rows;            // int32 [tokens]: the token's sequence, as a step index
    torch::Tensor token_positions;       // int32 [tokens]
  };
  Step Begin(std::span<const uint64_t> ids, std::span<const int64_t> starts,
             std::span<const int64_t> counts);

  // Appends the step's tokens to `layer`: k, v [tokens, H_kv, d] on the device (any float dtype),
  // sequence by sequence in the step's order.
  void Append(const Step& step, int layer, const torch::Tensor& k, const torch::Tensor& v);
  // Decode attention of one query row per sequence over all of its tokens: q [B, H_q, d] on the
  // device -> [B, H_q, d] float32.
  torch::Tensor Attend(const Step& step, int layer, const torch::Tensor& q);

  // Bytes of the pages a sequence holds, over all layers (0 if unknown).
  int64_t SequenceBytes(uint64_t id) const;
  // Synchronises the device to read the ReadKV counters and the encode time.
  GpuKvLedgers ledgers() const;

 private:
  struct Pools;
  struct Sequence {
    GpuReadBits read_bits;
    std::vector<int32_t> pages;
  };
  int64_t PageBytes() const;  // one page of one layer
  void Reserve(Sequence& s, int64_t tokens);
  void Grow(int64_t pages);
  torch::Tensor Workspace(size_t bytes);
  torch::Tensor AttendTimed(const Step& step, int layer, const torch::Tensor& q);  // Attend's work
  torch::Tensor AttendGroup(const Step& step, int layer, const torch::Tensor& q,
                            std::span<const int> rows, GpuReadBits bits);
  // The tile reader over one group's rows (q, table, lens already gathered; lengths on the host).
  torch::Tensor AttendTile(int layer, const torch::Tensor& q, const torch::Tensor& table,
                           const torch::Tensor& lens, std::span<const int32_t> lengths,
                           int max_pages, GpuReadBits bits);
  bool Tile() const { return config_.kind == codec::KvBackend::kReadKv; }
  bool Lists() const { return Tile() && config_.outliers.enabled(); }
  // The tile_start halves one call reads, on the host (the entries are summed by the kernels).
  void CountListHeaderReads(std::span<const int32_t> lengths);

  GpuKvConfig config_;
  std::unique_ptr<Pools> pools_;
  std::map<uint64_t, Sequence> sequences_;
  std::vector<int32_t> free_pages_;
  int64_t pool_pages_ = 0;
  torch::Tensor workspace_;
  GpuKvLedgers host_ledgers_;       // fp8 terms, and ReadKV's depth-independent terms
  torch::Tensor device_totals_;     // int64 [2]: ReadKV logical bits, payload bytes
  int sm_count_ = 0;                // the tile reader's PlanTileDecode
  torch::Tensor zero_lens_;         // int32 zeros: the tile reader's residual_lens
  torch::Tensor append_workspace_;  // TileAppend's outlier staging
  torch::Tensor outlier_counters_;  // int64 [4]: TileAppend's 3 counters, entries read
  std::unique_ptr<readkv::cuda::StreamTimer> encode_timer_;  // around every append launch
  std::unique_ptr<readkv::cuda::StreamTimer> attend_timer_;  // around every attention call
};

}  // namespace readkv::model::internal
