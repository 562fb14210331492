// The Llama-architecture decode runtime: implements engine::DecodeModel on libtorch for a model
// directory in the Hugging Face layout (config.json + model.safetensors [+ calibration.json]).
//
// Attention of every returned logit goes through the configured KV backend:
// - dense: K/V kept as tensors of the compute dtype (fp32 on CPU), exact attention.
// - fp8: e4m3 K/V with calibrated amax/448 scales per tensor (layer) or per KV head, attention
//   in fp32 after dequantisation (readkv::codec).
// - readkv: ReadKV(W, R) bit-plane caches and the flexible/constrained/tile readers
//   (readkv::codec); the tile reader's caches store the tile layout, and with a prefix cache a
//   request may name only a reader of the server's layout ("reader").
// On a CUDA device ("cuda", "cuda:N") fp8 and readkv run on readkv::cuda's kernels instead: every
// layer's cache is a paged pool on the GPU, appended and attended for all sequences of a step in
// one batched call per layer (src/gpu_kv_cache.h), with the CPU backends' codes bit for bit. ReadKV
// there reads with the tile reader only (--reader tile; any other reader is refused, "reader"),
// encodes every token at once (no residual window of unencoded newest tokens, which the CPU cache
// keeps) and has no prefix cache ("cache_dir" is refused). Dense stays on torch tensors.
// Prefill (PrefillAttention::kDense, the default): the prompt's tokens except the last attend
// exactly within the prompt (as vLLM and KIVI do: the prompt's K/V are computed at full precision,
// then written into the cache); the last prompt token and every later token attend through the
// backend's decode path over the stored cache, so every logit the engine sees reflects the
// compression. kThroughCache feeds the prompt token by token through the backend instead (the
// prompt attends over its own compressed K/V; exact for dense, slow for readkv on CPU).
// Chunked prefill (engine::SequenceStep::logits_wanted = false, `kvgate serve --prefill-chunk`):
// a prompt fed in chunks keeps the exact K/V of its positions so far beside the cache until its
// last chunk, and each chunk attends to them exactly: the same logits as the whole prompt in one
// step (to float rounding), for every backend; not with the persistent prefix cache below.
//
// Persistent prefix cache (RuntimeOptions::prefix_cache, `kvgate serve --cache-dir`; ReadKV with
// dense prefill only): the prefix blocks of a prompt are its full 256-token blocks among all but
// its last token. With the cache on, a prompt is prefilled block by block, like a chunked prefill
// that attends its quantised cache: the tokens of block b attend exactly within block b and to
// blocks 0..b-1 through their encoded form decoded at full depth W (code -> centroid -> mu + sigma
// z -> inverse transform); the rest of the prompt does the same over all prefix blocks. So the K/V
// of every block, its encoded bytes and every later logit depend only on the tokens and the
// encoded bytes of the blocks before it, never on whether a block was computed or loaded: a hit
// is bit-identical to a miss, and a server with a warm cache answers exactly as one started on an
// empty DIR (not as a server without --cache-dir, whose prompt attends its exact prefix). On a
// miss a block is computed, encoded, and stored as one object (prefix_cache_store.h) named by
// the digest of the token ids up to its end; on a hit the object is checked against this model's
// cache_identity(), its bytes are appended to the sequence's caches as they are
// (ReadKvLayerCache::AppendEncodedBlock) and the block's forward pass is skipped. Lookups and
// writes are counted in ledgers().prefix_cache_objects. A refused object (identity, damage) is
// counted in ledgers().cache_rejections by reason, quarantined, and recomputed; it is never
// decoded.
//
// Thread-safety: a model is driven by one thread (the engine's worker), as DecodeModel requires.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/cache_object.h"
#include "readkv/codec/fp8.h"
#include "readkv/codec/readers.h"
#include "readkv/engine/decode_model.h"
#include "readkv/model/config.h"
#include "readkv/model/prefix_cache_store.h"

namespace readkv::model {

enum class PrefillAttention { kDense, kThroughCache };

// Typed: the flags (cli.h) and any other front end parse names once, with codec::ParseKvBackend
// and codec::ParseReaderKind; reports and logs write them back with KvBackendName/ReaderName.
struct KvCacheOptions {
  codec::KvBackend kind = codec::KvBackend::kDense;
  PrefillAttention prefill = PrefillAttention::kDense;
  // FP8 baseline.
  codec::Fp8ScaleGranularity fp8_scale = codec::Fp8ScaleGranularity::kTensor;
  // ReadKV defaults of the server; a request's engine::ReadPolicy may override the read side.
  int store_bits = 8;               // W
  double read_bits = 4.0;           // R, average over K and V
  // The served readers are flexible, constrained and tile (on a CUDA device the tile reader
  // only); kFull (every plane) runs on the CPU only with read_bits == store_bits, as
  // codec::MakeReaderPlan checks.
  codec::ReaderKind reader = codec::ReaderKind::kFlexible;
  std::optional<double> key_bits;   // R_K of the K/V split; unset = R
  std::optional<double> value_bits; // R_V; unset = 2R - R_K
  // ReadKV's capped outlier lists (codec/outliers.h), part of the cache identity: entries per
  // (token, KV head) for K and for V (0 = off) and |z| past which a value is one (0 = the tree's
  // outermost threshold). On a CUDA device the tile reader's TileAppend writes the page blocks
  // and TileDecodeAttention applies them.
  int outlier_cap = 0;
  float outlier_threshold = 0.0f;
  // The tile reader's Value budget per window of this many tokens instead of the row (codec
  // ReadPolicy::value_window_tokens; 0 = the row). On CUDA only the kernels' chunks (512, 1024,
  // 1536, 2048), else refused ("value_window").
  int value_window_tokens = 0;
  // ReadPolicy::value_window_local: Value weights normalised per window. CPU only ("value_window"
  // on a CUDA server).
  bool value_window_local = false;
  // The CUDA tile reader's kernel shape for byte keys in Value windows, a name of
  // readkv::cuda::OnePassMode (the attention bench's --one-pass): "auto", one launch (a row's
  // windows in one thread-block cluster) wherever the device holds every row's cluster at once
  // (readkv::cuda::ChooseTileOnePass), else two; "off", always the two launches. The same
  // outputs either way: for A/B runs and as an escape hatch. "off" only for ReadKV on CUDA
  // (refused elsewhere, and any other value, "on" included, "one_pass").
  std::string one_pass = "auto";
  // The tile reader's keys stored as uniform bytes (codec key_bytes.h, layout tiles16-kbytes):
  // W = 8 and every request's key bits 8 (a request asking fewer is refused, "kv_split"). On the
  // CPU and on a CUDA device (the GPU tile reader's byte path); prefix-cache objects are
  // tiles16-kbytes.
  bool byte_keys = false;
  // ReadKV with these layers kept as FP8 caches instead (vLLM's kv_cache_dtype_skip_layers
  // idea; the alternative to outlier lists measured for issue 36). CPU only, no prefix cache.
  std::vector<int> fp8_layers;
};

// The persistent prefix cache (see above). Off while `directory` is empty.
struct PrefixCacheOptions {
  std::string directory;  // DIR of prefix_cache_store.h; created if missing
  int64_t max_bytes = 0;  // LRU bound on DIR's objects; 0 = unbounded
  // Refusals, failed writes, removed leftovers (one line each); and, when set, one line per
  // prompt with its prefix blocks' hits/misses. Called on the Forward thread; may be empty.
  std::function<void(std::string_view)> warn;
  std::function<void(std::string_view)> info;
};

struct RuntimeOptions {
  std::string device = "cpu";     // "cpu", "cuda" or "cuda:N"
  std::string dtype = "float32";  // compute dtype of weights, activations and dense K/V
  KvCacheOptions kv;
  int64_t kv_capacity_bytes = int64_t{4} << 30;  // the limit kv_bytes_limit() reports
  int threads = 0;                // torch intra-op threads; 0 leaves torch's default
  // Decode steps of fp8/readkv on a CUDA device with their dense ops (norms, projections, RoPE,
  // MLP, logits) replayed as CUDA graphs, one set per batch size, captured at its first step;
  // the KV backend's append and attention launch between them as always. "auto": where this
  // build's libtorch has CUDA graphs; "on": required (the model refuses to load without them);
  // "off": every op launched on its own. Not used while a KvObserver is set (calibration).
  std::string cuda_graphs = "auto";
  std::string calibration_path;   // default <model_dir>/calibration.json (fp8 and readkv)
  PrefixCacheOptions prefix_cache;
};

// Throws std::invalid_argument naming the field ("store_bits", "read_bits", "reader" (any reader
// but the tile reader on a CUDA device too), "kv_split", "outlier_cap" (outside [0, 16]),
// "outlier_threshold", "device", "dtype",
// "cache_dir" (set for dense/fp8,
// with kThroughCache prefill or on a CUDA device), "cache_max_bytes", "cuda_graphs" (not
// auto/on/off, or "on" without fp8/readkv on a CUDA device) for an invalid combination.
void ValidateRuntimeOptions(const RuntimeOptions& options);

class LlamaDecodeModel final : public engine::DecodeModel {
 public:
  // Loads and checks config, weights (every tensor's name, shape and dtype against the config:
  // ModelFormatError naming the tensor) and, for fp8/readkv, the calibration (its weights digest
  // must be this model's: codec::IdentityMismatch("weights_digest") otherwise).
  LlamaDecodeModel(const std::string& model_dir, const RuntimeOptions& options);
  ~LlamaDecodeModel() override;
  LlamaDecodeModel(const LlamaDecodeModel&) = delete;
  LlamaDecodeModel& operator=(const LlamaDecodeModel&) = delete;

  std::string model_id() const override;
  int vocab_size() const override;
  int max_context() const override;
  int32_t bos_token() const override;
  int32_t eos_token() const override;
  std::string kv_backend() const override;

  // Throws std::invalid_argument: "sequence_id" (already live) or the policy field (ReadKV
  // only; the policy is ignored by dense and fp8, as DecodeModel says).
  void StartSequence(uint64_t sequence_id, const engine::ReadPolicy& policy) override;
  // Validates every step (known sequence, 1+ tokens in range, context not exceeded) before any
  // state changes; throws std::invalid_argument naming the field ("sequence_id", "tokens").
  void Forward(std::span<engine::SequenceStep> steps) override;
  // Unknown ids are ignored (a cancelled request may end before it started).
  void EndSequence(uint64_t sequence_id) override;

  int64_t kv_bytes_in_use() const override;
  // RuntimeOptions::kv_capacity_bytes.
  int64_t kv_bytes_limit() const override;
  engine::KvLedgers ledgers() const override;

  const ModelConfig& config() const;
  // XXH3-128 (codec::ContentDigest) of model.safetensors.
  const std::string& weights_digest() const;
  // Tokens held by a live sequence; throws std::invalid_argument("sequence_id") if unknown.
  int64_t sequence_length(uint64_t sequence_id) const;
  // The storage identity of this model's ReadKV caches (docs/cache-identity.md);
  // store_bits and calibration fields are empty/0 for dense and fp8.
  codec::CacheIdentity cache_identity() const;
  // Counters of the persistent prefix cache since load (all zero when it is off).
  PrefixCacheCounters prefix_cache_counters() const;

  // Called for every token appended to a cache: layer, KV head, post-RoPE key and value (d floats
  // each). For calibration; unset by default.
  using KvObserver = std::function<void(int layer, int head, std::span<const float> key,
                                        std::span<const float> value)>;
  void set_kv_observer(KvObserver observer);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The factory the server uses.
std::unique_ptr<engine::DecodeModel> LoadDecodeModel(const std::string& model_dir,
                                                     const RuntimeOptions& options);

// The committed built-in model's directory: $KVGATE_MODEL_DIR if set, else <source>/models.
std::string DefaultModelDirectory();

// XXH3-128 hex digest of a file's bytes (the weights digest of calibrations and cache identity).
std::string FileDigest(const std::string& path);

}  // namespace readkv::model
