// Batched decode attention over a paged KV cache on the GPU: dense BF16 and FP8 e4m3 (per-tensor
// or per-KV-head scales), and what ReadKV's reader on the GPU, the tile reader
// (tile_attention.h), shares with them: the page geometry, the codec's tables and the read
// policy. Framework-free: raw device pointers, host launchers that return cudaError_t and never
// synchronise. Shapes and pointers are checked once by the caller (the
// binding layer or the bench); a launcher only rejects what would make a kernel unsafe
// (cudaErrorInvalidValue).
//
// Geometry (docs/readkv.md, "Geometry"): B sequences, H_q query heads, H_kv KV heads, head dim
// d in {64, 128}, GQA group g = H_q / H_kv in {1, 2, 4, 8}. Query head h reads KV head h / g.
// Scores use the scale 1/sqrt(d) and an exact softmax over all of a sequence's tokens.
//
// The paged cache: pages of kPageTokens = 256 tokens (one ReadKV block). Sequence b holds
// seq_lens[b] >= 1 tokens; token i of it lives in page page_table[b * max_pages + i / 256], slot
// i % 256. Pages are shared by nothing; a sequence's last page may be partly filled (ragged).
//
// The dense and FP8 kernels split the tokens over thread blocks (flash-decoding) and combine the
// blocks' partial results; the workspace holds partials that cross launches. They have two
// schedules. The persistent one runs as many blocks as the device holds at once, gives
// every block an equal share of the call's 64-token tiles, and merges their partials in a second
// launch. The cluster one, taken when the sequences are about equally long (min_tokens) and one
// block cluster of 1-8 blocks per (sequence, KV head) fills the device, splits each head's tiles
// among its cluster and merges them in distributed shared memory: one launch, no workspace
// traffic (a SplitPlan below overrides the choice, for benches and tests). All launches of one
// call go to `stream`, in order, so a call can be captured in a CUDA graph.
//
// Thread-safety: launchers are reentrant; two calls that share a workspace must be ordered.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(KVGATE_HAVE_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#else
using cudaError_t = int;
using cudaStream_t = struct CUstream_st*;
#endif

namespace readkv::cuda {

inline constexpr int kPageTokens = 256;
inline constexpr int kMaxStoreBits = 8;

// How the dense and FP8 launchers schedule a call (the persistent or the cluster schedule,
// above), chosen by the caller and passed explicitly (FlashInfer's plan/run split: no launcher
// reads the environment; the tile reader's is tile_attention.h's TilePlan). cluster: -1 automatic (the cluster schedule when the sequences are
// about equally long and a cluster of 1, 2, 4 or 8 blocks per head fills one wave, else the
// persistent one), 0 the persistent schedule, 1, 2, 4 or 8 the cluster schedule with that many
// blocks per head, whatever the shape. Outputs are the same up to summation order.
struct SplitPlan {
  int cluster = -1;
  bool valid() const {
    return cluster == -1 || cluster == 0 || cluster == 1 || cluster == 2 || cluster == 4 ||
           cluster == 8;
  }
};
// "auto" (-1), "off" (0), "1", "2", "4" or "8"; false for anything else (*plan untouched).
inline bool ParseSplitPlan(std::string_view text, SplitPlan* plan) {
  int cluster = 0;
  if (text == "auto") {
    cluster = -1;
  } else if (text == "off") {
    cluster = 0;
  } else if (text == "1" || text == "2" || text == "4" || text == "8") {
    cluster = text[0] - '0';
  } else {
    return false;
  }
  plan->cluster = cluster;
  return true;
}

struct DecodeShape {
  int batch = 1;
  int heads_q = 32;
  int heads_kv = 8;
  int head_dim = 128;
  int max_pages = 1;       // columns of page_table
  int max_tokens = 256;    // an upper bound of every seq_lens[b] (sizes the workspace)
  int min_tokens = 0;      // a lower bound of every seq_lens[b] when the caller knows one (0:
                           // unknown); the dense and FP8 kernels take the cluster schedule only
                           // when it is within 10% of max_tokens. A hint: outputs do not depend
                           // on it, and a wrong one costs time, not correctness.

  int group() const { return heads_q / heads_kv; }
};

// What every decode call reads besides the cache itself.
struct DecodeInputs {
  const float* queries = nullptr;  // [B][H_q][d], keys' domain (post-RoPE)
  const int32_t* page_table = nullptr;  // [B][max_pages]
  const int32_t* seq_lens = nullptr;    // [B]
  float* out = nullptr;                 // [B][H_q][d]
};

// ---- Dense BF16 ------------------------------------------------------------------------------
// k_pages, v_pages: [num_pages][H_kv][256][d] bfloat16 bit patterns.
struct DenseCache {
  const uint16_t* k_pages = nullptr;
  const uint16_t* v_pages = nullptr;
};

// ---- FP8 e4m3 (vLLM's kv_cache_dtype=fp8_e4m3) ------------------------------------------------
// k_pages, v_pages: [num_pages][H_kv][256][d] e4m3 codes (readkv::codec::Fp8E4m3Encode of
// x / scale, saturating). k_scales, v_scales: [H_kv] floats; a per-tensor cache repeats one value.
struct Fp8Cache {
  const uint8_t* k_pages = nullptr;
  const uint8_t* v_pages = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
};

// The write side of an FP8 cache (same layout and scales as Fp8Cache).
struct Fp8CacheWrite {
  uint8_t* k_pages = nullptr;
  uint8_t* v_pages = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
};

// Encodes and appends tokens: keys and values [n][H_kv][d] float (keys post-RoPE); token k goes
// to position positions[k] of sequence seq_ids[k] (a row of page_table). Codes are bit-identical
// to readkv::codec::Fp8LayerCache (e4m3 of x / scale: IEEE division, round to nearest even,
// saturating).
cudaError_t Fp8Append(const DecodeShape& shape, int tokens, const float* keys, const float* values,
                      const int32_t* seq_ids, const int32_t* positions, const int32_t* page_table,
                      const Fp8CacheWrite& cache, cudaStream_t stream);

// Workspace of the dense and FP8 kernels: partial outputs and softmax statistics per (block,
// head, warp); independent of the device and of the plan.
size_t SplitDecodeWorkspaceBytes(const DecodeShape& shape);

// cudaErrorInvalidValue for a plan that is not valid().
cudaError_t DenseDecodeAttention(const DecodeShape& shape, const DecodeInputs& inputs,
                                 const DenseCache& cache, void* workspace, cudaStream_t stream,
                                 const SplitPlan& plan = {});
cudaError_t Fp8DecodeAttention(const DecodeShape& shape, const DecodeInputs& inputs,
                               const Fp8Cache& cache, void* workspace, cudaStream_t stream,
                               const SplitPlan& plan = {});

// ---- ReadKV: the codec's tables and the read policy -------------------------------------------
// What the tile reader (tile_attention.h: TileAppend, TileDecodeAttention) takes of the codec.

// The frozen codec of one layer: calibration (transformed domain), transform signs and the
// Gaussian Lloyd tree's leaf boundaries (readkv::codec::LloydTree tables, codec_tables.h).
struct ReadKvCodec {
  int store_bits = 8;                  // W
  const float* key_mean = nullptr;     // [H_kv][d]
  const float* key_std = nullptr;      // [H_kv][d]
  const float* value_mean = nullptr;   // [H_kv][d]
  const float* value_std = nullptr;    // [H_kv][d]
  const float* key_signs = nullptr;    // [H_kv][d], +1 or -1 (keys and queries)
  const float* value_signs = nullptr;  // [H_kv][d], +1 or -1
  const float* boundaries = nullptr;   // [2^W - 1] sorted leaf boundaries (for encoding)
};

// A read policy (docs/readkv.md, "Readers"): per-head budgets R_K and R_V, and the Threshold
// allocators' step increments, in device memory: D(t) - D(t + s) in double, exactly
// readkv::codec::DepthAllocator::increment(k). The tile reader takes the step-1 table (t_min 1,
// step 1: W - 1 steps) for both. Every pointer of ReadKvCodec is device memory too.
struct ReadKvReadPolicy {
  double key_bits = 4.0;    // R_K, in [1, W]
  double value_bits = 4.0;  // R_V, in [1, W]
  const double* key_increments = nullptr;
  int key_steps = 7;
  const double* value_increments = nullptr;
  int value_steps = 7;
};

// ---- Traffic model ---------------------------------------------------------------------------
// The bytes each call moves through device memory by the kernels' own buffers (physical-traffic
// ledger, docs/ledgers.md): cache payload in 32-byte sectors as the kernels touch
// them, codec metadata, scores/logits written and read back, depth schedules, chunk partials, and
// queries/outputs. Host functions over host copies of seq_lens; they compile without CUDA. The
// tile reader's model (TileDecodeTraffic) is in tile_ledgers.h, which says what each of its
// launches moves.
// The same bytes by launch: what the model has one kernel read and write. `kernel` is the
// kernel's name up to its template arguments, so a profiler's name for the launch starts with it
// ("TileLogits" for TileLogits<64, 4, false>); a static string, null in unused entries.
struct KernelTraffic {
  const char* kernel = nullptr;
  int64_t read = 0;
  int64_t write = 0;
};
struct TrafficBytes {
  int64_t payload = 0;    // K/V bytes (dense, FP8) or bit-plane sectors (the tile reader)
  int64_t metadata = 0;   // scales, calibration, signs, centroid tables, page table
  int64_t scores = 0;     // logits / probabilities / a_i written and read back
  int64_t schedule = 0;   // depth schedules and selection histograms
  int64_t partials = 0;   // per-chunk partial outputs and softmax statistics, written and read
  int64_t io = 0;         // queries read, outputs written
  // In launch order: dense and FP8 SplitDecodeKernel, CombineSplits; the tile reader's five
  // launches (tile_ledgers.h). Their reads and writes add up to Total().
  std::array<KernelTraffic, 5> kernels{};
  int64_t Total() const { return payload + metadata + scores + schedule + partials + io; }
};
// Logical payload: what the readers chose (dense/FP8: every K/V byte; the tile reader's:
// tile_ledgers.h, TileLogicalBytes).
int64_t DenseLogicalBytes(const DecodeShape& shape, const int32_t* seq_lens_host);
int64_t Fp8LogicalBytes(const DecodeShape& shape, const int32_t* seq_lens_host);
// The dense and FP8 models take the schedule the launcher would under `plan` on an H100/H200
// (an invalid plan: the persistent schedule's terms; the launcher refuses such a call).
TrafficBytes DenseDecodeTraffic(const DecodeShape& shape, const int32_t* seq_lens_host,
                                const SplitPlan& plan = {});
TrafficBytes Fp8DecodeTraffic(const DecodeShape& shape, const int32_t* seq_lens_host,
                              const SplitPlan& plan = {});

}  // namespace readkv::cuda
