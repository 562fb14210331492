// The seam between the scheduler (readkv/engine) and a model runtime (readkv/model).
//
// The engine owns requests, queues, batching and streaming; the model owns weights and the KV
// state of every live sequence. The engine calls a DecodeModel from its single worker thread
// only, so implementations need no locking. Token ids are the model's own (byte-level for the
// built-in model: 0..255 bytes, then BOS and EOS).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace readkv::engine {

// The read policy of one request: a ReadKV server's defaults, possibly overridden per request by
// the `readkv` object of the completions API. Ignored by dense and FP8 caches. Not part of the
// cache's storage identity; it is recorded with every request.
struct ReadPolicy {
  std::optional<double> read_bits;    // R; unset = the server's default
  std::optional<std::string> reader;  // "flexible" | "constrained" | "tile"
  std::optional<double> key_bits;     // R_K of the K/V split (flexible reader)
  std::optional<double> value_bits;   // R_V of the K/V split (flexible reader)
};

// Cumulative resource ledgers of a KV backend (docs/ledgers.md): bytes, never mixed.
struct KvLedgers {
  int64_t capacity_bytes = 0;              // persistent payload + metadata + residual, now
  int64_t logical_read_bytes = 0;          // payload the readers chose, summed over steps
  int64_t outlier_read_bytes = 0;          // of them, ReadKV outlier lists (codec/outliers.h)
  int64_t physical_traffic_bytes = 0;      // all buffers moved, summed over steps
  int64_t workspace_peak_bytes = 0;        // max temporary bytes of one attention call
  double encode_seconds = 0.0;             // time spent encoding K/V, summed
  double attention_seconds = 0.0;          // time spent in decode attention calls, summed
  std::vector<int64_t> read_depth_counts;  // histogram of chosen depths 0..W (ReadKV only)
  // Cache objects or policies the backend refused, by reason (e.g. "identity_mismatch"),
  // cumulative. Exported as readkv_cache_rejections_total{reason}.
  std::map<std::string, int64_t> cache_rejections;
  // A persistent prefix cache's objects by outcome ("hit": loaded and accepted, "miss": none
  // stored, "stored", "evicted", "write_failed"), cumulative; empty without a prefix cache.
  // Refused objects are in cache_rejections. Exported as readkv_prefix_cache_objects_total{result}.
  std::map<std::string, int64_t> prefix_cache_objects;
};

// One sequence's work in a Forward call: feed `tokens` -- its prompt, whole or in consecutive
// chunks, then one token per step -- and receive the logits of the last position. A chunk that
// does not end the prompt has logits_wanted = false: its tokens are prompt positions like the
// others (they attend to the prompt before them as the whole prompt would), and no logits come
// back. The prompt's last chunk has logits_wanted = true.
struct SequenceStep {
  uint64_t sequence_id = 0;
  std::span<const int32_t> tokens;
  bool logits_wanted = true;
  std::vector<float> logits;  // out: vocab_size() values for the last fed position, if wanted
};

class DecodeModel {
 public:
  virtual ~DecodeModel() = default;

  virtual std::string model_id() const = 0;
  virtual int vocab_size() const = 0;
  virtual int max_context() const = 0;  // prompt + generated tokens a sequence may hold
  virtual int32_t bos_token() const = 0;
  virtual int32_t eos_token() const = 0;
  virtual std::string kv_backend() const = 0;  // "dense" | "fp8" | "readkv"

  // Creates the (empty) KV state of a sequence that will be read under `policy`. Throws
  // std::invalid_argument naming the field if the policy is not valid for this backend.
  virtual void StartSequence(uint64_t sequence_id, const ReadPolicy& policy) = 0;
  // Runs every step in one batched call where the runtime can; fills each step's logits.
  virtual void Forward(std::span<SequenceStep> steps) = 0;
  // Frees the KV state of a finished or cancelled sequence.
  virtual void EndSequence(uint64_t sequence_id) = 0;

  // Bytes of KV state held now over all live sequences, and the configured limit (for the
  // kv_cache_usage metric and admission). A limit of 0 means "no limit known": the engine then
  // admits by max_batch alone and reports usage 0.
  virtual int64_t kv_bytes_in_use() const = 0;
  virtual int64_t kv_bytes_limit() const { return 0; }
  virtual KvLedgers ledgers() const = 0;
};

}  // namespace readkv::engine
