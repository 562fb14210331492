// One seeded single-layer attention experiment (what `kvgate codec attention` runs): synthetic
// K/V/Q, a calibration from a separate sample of the same distribution, one cache of the chosen
// backend filled with every token, one Attend, and its error against exact FP64 attention.
// Pure apart from wall-clock timings; thread-safe.
#pragma once

#include <cstdint>
#include <optional>

#include "readkv/codec/attention.h"
#include "readkv/codec/ledgers.h"
#include "readkv/codec/synthetic.h"

namespace readkv::codec {

struct AttentionExperimentConfig {
  SyntheticConfig data;
  // The backend and its options; geometry is taken from `data`, calibration is made here.
  LayerCacheConfig cache;
  int64_t calibration_samples = 4096;
  std::optional<ReadPolicy> policy_override;  // passed to Attend (per-call read policy)
};

struct AttentionExperimentResult {
  double rel_l2_error = 0.0;  // ||out - exact|| / ||exact|| over all query heads
  AttentionLedgers ledgers;
  int64_t dense_payload_bytes = 0;  // 2 * T * H_kv * d * 2: BF16 K and V
  double attend_seconds = 0.0;
  int64_t planted_token = -1;
};

// Throws InvalidArgument naming the field for any bad configuration.
AttentionExperimentResult RunAttentionExperiment(const AttentionExperimentConfig& config);

}  // namespace readkv::codec
