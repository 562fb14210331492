// The calibration of a model's KV cache (docs/readkv.md: FP8 amax scales and ReadKV mu/sigma),
// measured once on a seeded calibration set and stored as `calibration.json` beside the model,
// bound to the model by its weights digest and identity. Plain data; immutable after load.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "readkv/codec/calibration.h"
#include "readkv/codec/outliers.h"

namespace readkv::model {

struct ModelCalibration {
  std::string model_id;
  std::string weights_digest;  // codec::ContentDigest of model.safetensors
  int layers = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  double rope_theta = 0.0;
  uint64_t seed = 0;     // of the calibration set
  int samples = 0;       // documents in it
  int64_t tokens = 0;    // tokens observed (per layer and KV head)
  codec::Calibration calibration;

  // Canonical JSON; Parse throws ModelFormatError naming the field.
  std::string ToJson() const;
  static ModelCalibration Parse(const std::string& text);
  static ModelCalibration Load(const std::string& path);
};

struct CalibrateOptions {
  std::string model_dir;
  int samples = 16;                 // documents of the training mix
  int max_bytes = 4096;             // per document
  uint64_t seed = 0xca11b2a7e5eedULL;  // distinct from training and evaluation seeds
  std::string output_path;          // default <model_dir>/calibration.json
  int threads = 0;
};

// Runs the model (dense cache, CPU) over the calibration set, feeds every post-RoPE key and value
// to codec::Calibrator, writes the JSON and returns it.
ModelCalibration CalibrateModel(const CalibrateOptions& options);

// How well a frozen calibration codes the K/V of a set of documents, per layer and kind (keys or
// values), for the two caches the gates compare: FP8 e4m3 with the per-tensor scales
// (amax / 448 over the layer's heads) and ReadKV's W-bit code read in full (transform,
// standardize, Gaussian Lloyd tree, back). Errors are measured in the model's domain, on every
// post-RoPE key and value of every position.
struct CodecFidelityRow {
  int layer = 0;
  std::string kind;                    // "key" | "value"
  int64_t values = 0;                  // scalars observed
  double fp8_relative_rms = 0.0;       // sqrt(sum (x - fp8(x))^2 / sum x^2)
  double fp8_saturated = 0.0;          // share of |x| beyond the scale's 448 (clipped)
  double readkv_relative_rms = 0.0;    // the same for the W-bit code
  double readkv_beyond_outer = 0.0;    // share of |z| past the tree's outermost threshold
  double readkv_outer_error_share = 0.0;  // their share of the W-bit code's squared error
  double readkv_outer_first_token = 0.0;  // their share in a document's first token (BOS)
  // The tokens whose values pass the outer threshold: (token id, share of those values), the
  // largest share first. A layer-0 value depends on its token alone.
  std::vector<std::pair<int, double>> outer_by_token;
  double z_mean = 0.0, z_std = 0.0;    // of the standardized values (0 and 1 if calibrated here)
  double z_max_abs = 0.0;
  // With the capped outlier lists of CodecFidelityOptions (codec/outliers.h), per-token cap and
  // per-block budget as an OutlierStore applies them, read in full:
  double readkv_clipped_after = 0.0;       // share of values still clipped (past cap or budget)
  double readkv_relative_rms_after = 0.0;  // relative RMS error with the lists' fp16 values
  double outlier_entries_per_vector = 0.0; // mean entries per (token, KV head)
  // The lists' bytes (4 per entry, 2 per 256-token block and KV head for this kind's count)
  // over the W-bit payload of the same values.
  double outlier_capacity_share = 0.0;
  // The most entries any (KV head, 256-token block of a document) selected for this kind, with
  // no per-block budget applied: what OutlierOptions::block_cap is chosen against.
  int64_t outlier_max_block_entries = 0;
  // Entries the per-token cap selected that the block budget then dropped (OutlierStats'
  // over_budget), over the values.
  double outlier_over_budget = 0.0;
};

struct CodecFidelityOptions {
  CalibrateOptions documents;          // model_dir, samples, max_bytes, seed (use a fresh seed), threads
  std::string calibration_path;        // default <model_dir>/calibration.json
  int store_bits = 8;                  // W
  codec::OutlierOptions outliers{2, 0.0f};  // the lists measured in the "after" columns
};

// Throws std::invalid_argument naming the field, ModelFormatError for a bad calibration, and
// codec::IdentityMismatch when the calibration belongs to other weights.
std::vector<CodecFidelityRow> MeasureCodecFidelity(const CodecFidelityOptions& options);

}  // namespace readkv::model
