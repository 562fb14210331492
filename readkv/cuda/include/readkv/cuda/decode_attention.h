// Batched decode attention over a paged KV cache on the GPU, for the three KV backends of
// docs/readkv.md: dense BF16, FP8 e4m3 (per-tensor or per-KV-head scales) and ReadKV with the
// constrained reader. Framework-free: raw device pointers, host launchers that return
// cudaError_t and never synchronise. Shapes and pointers are checked once by the caller (the
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
// Every kernel splits the tokens over thread blocks (flash-decoding) and combines the blocks'
// partial results; the workspace holds partials that cross launches. The dense and FP8 kernels
// have two schedules. The persistent one runs as many blocks as the device holds at once, gives
// every block an equal share of the call's 64-token tiles, and merges their partials in a second
// launch. The cluster one, taken when the sequences are about equally long (min_tokens) and one
// block cluster of 1-8 blocks per (sequence, KV head) fills the device, splits each head's tiles
// among its cluster and merges them in distributed shared memory: one launch, no workspace
// traffic (a SplitPlan below overrides the choice, for benches and tests). The
// ReadKV kernels split each sequence into chunks of `chunk_tokens` (a multiple of 256). All
// launches of one call go to `stream`, in order, so a call can be captured in a CUDA graph.
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

// The environment variables the constrained ReadKV launchers read on every call to pick among
// equivalent kernels (same outputs up to summation order), for same-process comparisons in
// benches and tests: KVGATE_READKV_LOGITS, _VALUES, _PDL and _SELECT (readkv_attention.cu says
// what each value picks). A bench records the ones set with its results. They go with those
// readers (issue 37); the kernels that stay take their choices as an explicit plan (SplitPlan,
// tile_attention.h's TilePlan).
inline constexpr std::array<const char*, 4> kKernelSwitches = {
    "KVGATE_READKV_LOGITS", "KVGATE_READKV_VALUES", "KVGATE_READKV_PDL", "KVGATE_READKV_SELECT"};

// How the dense and FP8 launchers schedule a call (the persistent or the cluster schedule,
// above), chosen by the caller and passed explicitly (FlashInfer's plan/run split: no launcher
// reads the environment). cluster: -1 automatic (the cluster schedule when the sequences are
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
  int chunk_tokens = 1024; // ReadKV: tokens per thread block, a multiple of 256 (0: automatic,
                           // ReadKvChunkTokens)
  int min_tokens = 0;      // a lower bound of every seq_lens[b] when the caller knows one (0:
                           // unknown); the dense and FP8 kernels take the cluster schedule only
                           // when it is within 10% of max_tokens. A hint: outputs do not depend
                           // on it, and a wrong one costs time, not correctness.

  int group() const { return heads_q / heads_kv; }
  int max_chunks() const { return (max_tokens + chunk_tokens - 1) / chunk_tokens; }
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

// ---- ReadKV ----------------------------------------------------------------------------------
// Bit planes of W-bit codes, in the layout of readkv::codec::BitPlaneStore per page:
// key_planes:   [num_pages][H_kv][d][W][32 bytes]  channel-major; token j of the page is bit
//               (j % 64) of little-endian 64-bit word (j / 64) of a 32-byte plane.
// value_planes: [num_pages][H_kv][256][W][d / 8] token-major; channel c is bit (c % 8) of byte
//               (c / 8) of a plane.
// Plane p holds bit p of each code counted from the most significant bit.
struct ReadKvCache {
  uint8_t* key_planes = nullptr;
  uint8_t* value_planes = nullptr;
};

// The frozen codec of one layer: calibration (transformed domain), transform signs and the
// Gaussian Lloyd tree (readkv::codec::LloydTree tables).
struct ReadKvCodec {
  int store_bits = 8;                  // W
  const float* key_mean = nullptr;     // [H_kv][d]
  const float* key_std = nullptr;      // [H_kv][d]
  const float* value_mean = nullptr;   // [H_kv][d]
  const float* value_std = nullptr;    // [H_kv][d]
  const float* key_signs = nullptr;    // [H_kv][d], +1 or -1 (keys and queries)
  const float* value_signs = nullptr;  // [H_kv][d], +1 or -1
  const float* centroids = nullptr;    // depth-major: depth t at [2^t - 1, 2^(t+1) - 1), t <= W
  const float* boundaries = nullptr;   // [2^W - 1] sorted leaf boundaries (for encoding)
};

// The constrained reader's policy (docs/readkv.md, "Readers"): per-head budgets
// B_K = floor(R_K d), B_V = floor(R_V T), t_min = 1, Value packets of 2 planes. Its definition
// has R_K = R_V = R; a policy may split R unequally (readkv/codec/readers.h), the same two budgets
// moved, nothing else.
// key_increments / value_increments, in device memory: the allocators' step increments
// D(t) - D(t + s) in double, exactly readkv::codec::DepthAllocator::increment(k) (W - 1 key
// steps, (W - 1) / 2 value steps). Every pointer of ReadKvCodec is device memory too.
struct ReadKvReadPolicy {
  double key_bits = 4.0;    // R_K, in [1, W]
  double value_bits = 4.0;  // R_V, in [1, W]
  const double* key_increments = nullptr;
  int key_steps = 7;
  const double* value_increments = nullptr;
  int value_steps = 3;
};

// Optional outputs for tests and ledgers (any may be null): the depths the allocators chose, the
// Value token importance they allocated from, and the call's ledgers summed on the device where
// the depths are chosen and read (Prepare, Values), so a server keeps exact ledgers without a
// launch of its own or a copy of the schedules: totals[0] += logical bits read
// (ReadKvLogicalBytes * 8), totals[1] += bit-plane payload bytes in 32-byte sectors (the payload
// term of ReadKvDecodeTraffic).
struct ReadKvDebug {
  uint8_t* key_depths = nullptr;          // [B][H_kv][d]
  uint8_t* value_depths = nullptr;        // [B][H_kv][max_tokens]
  double* value_importance = nullptr;     // [B][H_kv][max_tokens], a_i = sum_h p_{h,i}^2
  unsigned long long* totals = nullptr;   // [2], device memory, added to (never reset)
  // [1], device memory, added to: Select blocks that listed their last gains (only with
  // KVGATE_READKV_SELECT=list; a block lists once its share of a radix pass's bin is small
  // enough and another pass follows, so whether any does depends on the data).
  unsigned* select_listed = nullptr;
};

size_t ReadKvDecodeWorkspaceBytes(const DecodeShape& shape);

// One decode step with the constrained reader. Stage 1: transformed queries, Key channel
// importance and the threshold allocation of Key depths (bit-identical to the CPU allocator for
// the same weights); logits from keys reconstructed at those depths. Stage 2: a_i from the exact
// softmax, the threshold allocation of Value depths over all of the sequence's tokens (radix
// selection of the cut gain), values reconstructed at those depths, sum p v, inverse transform.
cudaError_t ReadKvDecodeAttention(const DecodeShape& shape, const DecodeInputs& inputs,
                                  const ReadKvCache& cache, const ReadKvCodec& codec,
                                  const ReadKvReadPolicy& policy, void* workspace,
                                  cudaStream_t stream, const ReadKvDebug& debug = {});

// Encodes and appends tokens: keys and values [n][H_kv][d] float (keys post-RoPE); token k goes
// to sequence-relative position positions[k] of sequence seq_ids[k] (page through page_table).
// The planes of a slot must be zero before its token is appended (zero pages when allocating).
// Codes are bit-identical to readkv::codec (same transform order, same boundaries).
cudaError_t ReadKvAppend(const DecodeShape& shape, int tokens, const float* keys,
                         const float* values, const int32_t* seq_ids, const int32_t* positions,
                         const int32_t* page_table, const ReadKvCodec& codec,
                         const ReadKvCache& cache, cudaStream_t stream);

// ---- Traffic model ---------------------------------------------------------------------------
// The bytes each call moves through device memory by the kernels' own buffers (physical-traffic
// ledger, docs/ledgers.md): cache payload in 32-byte sectors as the kernels touch
// them, codec metadata, scores/logits written and read back, depth schedules, chunk partials, and
// queries/outputs. Host functions over host copies of seq_lens (and, for ReadKV, of the depths
// the call chose: ReadKvDebug); they compile without CUDA. The tile reader's model
// (TileDecodeTraffic) is in tile_ledgers.h, which says what each of its launches moves.
// The same bytes by launch: what the model has one kernel read and write. `kernel` is the
// kernel's name up to its template arguments, so a profiler's name for the launch starts with it
// ("Logits" for LogitsTransposed<4, 4>); a static string, null in unused entries.
struct KernelTraffic {
  const char* kernel = nullptr;
  int64_t read = 0;
  int64_t write = 0;
};
struct TrafficBytes {
  int64_t payload = 0;    // K/V bytes (dense, FP8) or bit-plane sectors (ReadKV)
  int64_t metadata = 0;   // scales, calibration, signs, centroid tables, page table
  int64_t scores = 0;     // logits / probabilities / a_i written and read back
  int64_t schedule = 0;   // depth schedules and selection histograms
  int64_t partials = 0;   // per-chunk partial outputs and softmax statistics, written and read
  int64_t io = 0;         // queries read, outputs written
  // In launch order: dense and FP8 SplitDecodeKernel, CombineSplits; ReadKV Prepare, Logits,
  // Select, Values (with the row's finish); the tile reader's five launches (tile_ledgers.h).
  // Their reads and writes add up to Total().
  std::array<KernelTraffic, 5> kernels{};
  int64_t Total() const { return payload + metadata + scores + schedule + partials + io; }
};
// Logical payload: what the readers chose (dense/FP8: every K/V byte).
int64_t DenseLogicalBytes(const DecodeShape& shape, const int32_t* seq_lens_host);
int64_t Fp8LogicalBytes(const DecodeShape& shape, const int32_t* seq_lens_host);
int64_t ReadKvLogicalBytes(const DecodeShape& shape, const int32_t* seq_lens_host,
                           const uint8_t* key_depths_host, const uint8_t* value_depths_host);
// The dense and FP8 models take the schedule the launcher would under `plan` on an H100/H200
// (an invalid plan: the persistent schedule's terms; the launcher refuses such a call).
TrafficBytes DenseDecodeTraffic(const DecodeShape& shape, const int32_t* seq_lens_host,
                                const SplitPlan& plan = {});
TrafficBytes Fp8DecodeTraffic(const DecodeShape& shape, const int32_t* seq_lens_host,
                              const SplitPlan& plan = {});
// key_depths_host [B][H_kv][d], value_depths_host [B][H_kv][max_tokens] as ReadKvDebug wrote them;
// both null: every term but the payload (which ReadKvDebug::totals sums on the device). key_bits:
// the policy's R_K, which picks the Logits reader (ReadKvUsesMmaLogits) and so what it re-reads.
TrafficBytes ReadKvDecodeTraffic(const DecodeShape& shape, const int32_t* seq_lens_host,
                                 int store_bits, double key_bits,
                                 const uint8_t* key_depths_host,
                                 const uint8_t* value_depths_host);
// Whether ReadKvDecodeAttention reads Keys with the tensor-core Logits reader (LogitsMma) for a
// Key budget of key_bits per channel and a call's chunk (ReadKvChunkTokens), unless
// KVGATE_READKV_LOGITS picks a reader: at R_K <= 2, or when a chunk is one or two pages.
bool ReadKvUsesMmaLogits(double key_bits, int chunk_tokens);
// The chunk a ReadKV call uses (tokens per thread block): shape.chunk_tokens when positive, else
// the automatic choice, the largest of 2048, 1024, 512, 256 that still gives at least ~2 thread
// blocks per SM of an H100/H200 (132 SMs), raised (up to 2048) until a row has at most 32 chunks.
// Host code in both builds.
int ReadKvChunkTokens(const DecodeShape& shape);

}  // namespace readkv::cuda
