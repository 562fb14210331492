// One decode step of attention over one layer's cached tokens of one sequence, behind the
// interface a model runtime uses per (sequence, layer): Append one token's K/V, Attend with the
// step's queries. Backends: dense (exact), FP8 (the production baseline), ReadKV (the codec with
// its readers). Every Attend returns the four ledgers of ledgers.h for that call.
//
// Shapes: keys/values of one token are [H_kv][d] (keys after RoPE); queries and outputs are
// [H_q][d]; query head h uses KV head h / g (g = H_q / H_kv). Scores use the scale 1/sqrt(d) and
// an exact softmax over all cached tokens.
// Thread-safety: Append mutates; Attend is const and keeps all scratch local, so any number of
// threads may Attend concurrently while nobody Appends.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "readkv/codec/calibration.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/fp8.h"
#include "readkv/codec/ledgers.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/readers.h"

namespace readkv::codec {

struct LayerGeometry {
  int heads_q = 32;
  int heads_kv = 8;
  int head_dim = 128;

  int group() const { return heads_q / heads_kv; }
  // Throws InvalidArgument: "head_dim" (not a power of two in [8, 1024]), "heads_kv" (< 1),
  // "heads_q" (< 1 or not a multiple of heads_kv).
  void Validate() const;
};

// Per-call options of Attend.
struct AttendOptions {
  // Overrides the cache's read policy for this call only (the server's per-request
  // `readkv.read_bits`); nothing is re-encoded. Ignored by dense and FP8.
  std::optional<ReadPolicy> policy;
};

class LayerKvCache {
 public:
  virtual ~LayerKvCache() = default;
  LayerKvCache(const LayerKvCache&) = delete;
  LayerKvCache& operator=(const LayerKvCache&) = delete;

  const LayerGeometry& geometry() const { return geometry_; }

  // Appends one token: keys and values [H_kv][d]. Throws InvalidArgument("keys"/"values") on a
  // size mismatch.
  virtual void Append(std::span<const float> keys, std::span<const float> values) = 0;
  // Appends tokens.size() / (H_kv d) tokens given token-major [T][H_kv][d].
  void AppendTokens(std::span<const float> keys, std::span<const float> values);

  // One decode step: out[h] = sum_i softmax_i(q_h . k_i / sqrt(d)) v_i for every query head.
  // queries, out: [H_q][d]. Throws InvalidArgument("queries"/"out") on a size mismatch,
  // InvalidArgument("tokens") on an empty cache, and the policy's InvalidArgument for a bad
  // override.
  AttentionLedgers Attend(std::span<const float> queries, std::span<float> out) const {
    return DoAttend(queries, out, AttendOptions{});
  }
  AttentionLedgers Attend(std::span<const float> queries, std::span<float> out,
                          const AttendOptions& options) const {
    return DoAttend(queries, out, options);
  }

  virtual int64_t tokens() const = 0;
  // Capacity ledger of the cache as it stands (also returned by every Attend).
  virtual CapacityLedger Capacity() const = 0;
  int64_t CapacityBytes() const { return Capacity().Total(); }
  virtual EncodeCost encode_cost() const = 0;

 protected:
  explicit LayerKvCache(const LayerGeometry& geometry);
  void CheckAppendShapes(std::span<const float> keys, std::span<const float> values) const;
  void CheckAttendShapes(std::span<const float> queries, std::span<const float> out) const;

 private:
  virtual AttentionLedgers DoAttend(std::span<const float> queries, std::span<float> out,
                                    const AttendOptions& options) const = 0;
  LayerGeometry geometry_;
};

// The KV backends, one type for the whole server (runtime options, kernels' benchmarks, the
// attention experiment). Text appears only at the edges: ParseKvBackend reads a flag or a
// config value, KvBackendName writes the persisted/wire name ("dense" | "fp8" | "readkv", as in
// reports, metrics labels and the history), so the two round-trip.
enum class KvBackend { kDense, kFp8, kReadKv };
inline constexpr std::array<KvBackend, 3> kKvBackends = {KvBackend::kDense, KvBackend::kFp8,
                                                         KvBackend::kReadKv};
std::string_view KvBackendName(KvBackend backend);
// "dense" | "fp8" | "readkv"; throws InvalidArgument("kv") otherwise.
KvBackend ParseKvBackend(std::string_view name);

// How the dense backend stores K/V: FP32 (the CPU reference) or BF16 (what a GPU dense cache
// holds; values are rounded to nearest even on Append).
enum class DenseStorage { kFp32, kBf16 };

struct LayerCacheConfig {
  KvBackend backend = KvBackend::kDense;
  LayerGeometry geometry;
  // FP8 and ReadKV: the frozen calibration and which of its layers this cache is.
  std::shared_ptr<const Calibration> calibration;
  int layer = 0;
  // Dense.
  DenseStorage dense_storage = DenseStorage::kFp32;
  // FP8.
  Fp8ScaleGranularity fp8_scale = Fp8ScaleGranularity::kTensor;
  // ReadKV.
  int store_bits = 8;
  ReadPolicy policy;            // the default read policy (per-call override: AttendOptions)
  bool residual_window = true;  // keep the newest incomplete block unencoded (BF16)
  std::shared_ptr<const LloydTree> codebook;  // optional; built for store_bits when null
  OutlierOptions outliers;  // the capped outlier lists (outliers.h); off by default
  // The tile reader only: keys stored as uniform bytes (PlaneLayout::kTilesByteKeys,
  // key_bytes.h), W = 8 and the policy's key bits 8 ("layout", "store_bits", "kv_split").
  bool byte_keys = false;
};

// Builds a cache. Throws InvalidArgument naming the field: geometry fields, "calibration"
// (missing for FP8/ReadKV, or its geometry does not match), "layer", "store_bits", the policy's
// fields ("read_bits", "kv_split") and, for ReadKV, "outlier_cap" / "outlier_threshold".
std::unique_ptr<LayerKvCache> MakeLayerKvCache(const LayerCacheConfig& config);

// Exact attention in double precision, the yardstick of every backend's error.
// keys, values: [T][H_kv][d] token-major; queries: [H_q][d]; returns [H_q][d].
std::vector<double> ReferenceAttention(const LayerGeometry& geometry, std::span<const float> keys,
                                       std::span<const float> values,
                                       std::span<const float> queries);

// ||out - reference|| / ||reference|| over all elements.
double RelativeL2Error(std::span<const float> out, std::span<const double> reference);

}  // namespace readkv::codec
