// The Llama-architecture decode runtime: implements engine::DecodeModel on libtorch for a model
// directory in the Hugging Face layout (config.json + model.safetensors [+ calibration.json]).
//
// Attention of every returned logit goes through the configured KV backend:
// - "dense": K/V kept as tensors of the compute dtype (fp32 on CPU), exact attention.
// - "fp8": e4m3 K/V with calibrated amax/448 scales per tensor (layer) or per KV head, attention
//   in fp32 after dequantisation (readkv::codec).
// - "readkv": ReadKV(W, R) bit-plane caches and the flexible/constrained readers (readkv::codec).
// Prefill (PrefillAttention::kDense, the default): the prompt's tokens except the last attend
// exactly within the prompt (as vLLM and KIVI do: the prompt's K/V are computed at full precision,
// then written into the cache); the last prompt token and every later token attend through the
// backend's decode path over the stored cache, so every logit the engine sees reflects the
// compression. kThroughCache feeds the prompt token by token through the backend instead (the
// prompt attends over its own compressed K/V; exact for dense, slow for readkv on CPU).
//
// Thread-safety: a model is driven by one thread (the engine's worker), as DecodeModel requires.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "readkv/codec/cache_object.h"
#include "readkv/codec/fp8.h"
#include "readkv/engine/decode_model.h"
#include "readkv/model/config.h"

namespace readkv::model {

enum class PrefillAttention { kDense, kThroughCache };

struct KvCacheOptions {
  std::string kind = "dense";  // "dense" | "fp8" | "readkv"
  PrefillAttention prefill = PrefillAttention::kDense;
  // FP8 baseline.
  codec::Fp8ScaleGranularity fp8_scale = codec::Fp8ScaleGranularity::kTensor;
  // ReadKV defaults of the server; a request's engine::ReadPolicy may override the read side.
  int store_bits = 8;               // W
  double read_bits = 4.0;           // R, average over K and V
  std::string reader = "flexible";  // "flexible" | "constrained"
  std::optional<double> key_bits;   // R_K of the K/V split (flexible); unset = R
  std::optional<double> value_bits; // R_V; unset = 2R - R_K
};

struct RuntimeOptions {
  std::string device = "cpu";     // "cpu", "cuda" or "cuda:N"
  std::string dtype = "float32";  // compute dtype of weights, activations and dense K/V
  KvCacheOptions kv;
  int64_t kv_capacity_bytes = int64_t{4} << 30;  // the limit kv_bytes_limit() reports
  int threads = 0;                // torch intra-op threads; 0 leaves torch's default
  std::string calibration_path;   // default <model_dir>/calibration.json (fp8 and readkv)
};

// Throws std::invalid_argument naming the field ("kv", "store_bits", "read_bits", "reader",
// "kv_split", "device", "dtype") for an invalid combination.
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
  // The storage identity of this model's ReadKV caches (spec/readkv.md, "Cache identity");
  // store_bits and calibration fields are empty/0 for dense and fp8.
  codec::CacheIdentity cache_identity() const;

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
