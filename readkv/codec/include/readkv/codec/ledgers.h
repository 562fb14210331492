// The four ledgers of docs/ledgers.md, kept apart and never substituted for one
// another, plus the encode cost. Every LayerKvCache::Attend returns one AttentionLedgers for that
// call: one decode step of one layer of one sequence, all KV heads. All sizes are bytes unless the
// name says bits. Plain values; no thread-safety concerns.
#pragma once

#include <cstdint>

namespace readkv::codec {

// 1. Capacity: persistent bytes held by the cache at the time of the call. A KV head is counted
// once, however many query heads share it.
struct CapacityLedger {
  // Stored codes: dense values (4 B FP32 or 2 B BF16 per scalar), FP8 codes (1 B), or ReadKV bit
  // planes as allocated (a partly filled 256-token block counts whole 32-byte key planes).
  int64_t payload_bytes = 0;
  // Per-cache side data: ReadKV mu and sigma of K and V (4 floats per channel per KV head); FP8
  // scales (2 floats per tensor, or per KV head). The codebook tables (shared by every cache of
  // one W, 4 * (2^(W+1) - 1) bytes) are not counted here.
  int64_t metadata_bytes = 0;
  // ReadKV residual window: the newest tokens of an incomplete block kept as BF16 K and V.
  int64_t residual_bytes = 0;
  // ReadKV outlier lists (outliers.h): 4 bytes per 256-token block and KV head, 4 per entry.
  int64_t outlier_bytes = 0;
  int64_t Total() const { return payload_bytes + metadata_bytes + residual_bytes + outlier_bytes; }
};

// 2. Logical reads: the payload bits the reader chose to read in this call (what R describes).
// ReadKV: K = sum over (KV head, channel) of t_c * T_enc bits; V = sum over (KV head, token) of
// t_i * d bits; residual window tokens at 16 bits per scalar (K and V). Dense and FP8 read all
// their payload (bits per scalar * T * H_kv * d, K and V).
struct LogicalReads {
  int64_t key_bits = 0;
  int64_t value_bits = 0;
  int64_t residual_bits = 0;
  // ReadKV outlier lists: every entry (and block header) of every block read, K and V.
  int64_t outlier_bits = 0;
  int64_t TotalBits() const { return key_bits + value_bits + residual_bits + outlier_bits; }
  // Whole bytes, rounded up.
  int64_t Bytes() const { return (TotalBits() + 7) / 8; }
};

// 3. Physical traffic: a model of the bytes this implementation's buffers move through memory
// in the call, as a kernel with the same buffers would move them through device memory.
struct PhysicalTraffic {
  // K payload. ReadKV: t_c planes of 32 bytes (one DRAM sector) per 256-token block per channel,
  // a partial block still costing whole sectors. Dense/FP8: every stored K byte.
  int64_t key_payload_bytes = 0;
  // V payload. ReadKV: t_i planes of d / 8 bytes per token. Dense/FP8: every stored V byte.
  int64_t value_payload_bytes = 0;
  // ReadKV residual window read (BF16 K and V).
  int64_t residual_bytes = 0;
  // Side data: ReadKV mu/sigma of K and V read, per-channel K reconstruction tables
  // (mu + sigma * centroid at the chosen depth) written and read once, the V centroid tables
  // read; FP8 scales read.
  int64_t metadata_bytes = 0;
  // Queries read; ReadKV also writes and reads the transformed queries and the per-channel key
  // importance.
  int64_t query_bytes = 0;
  // Logits written and read (softmax), probabilities written and read (ReadKV reads them twice:
  // value importance and output); ReadKV value importance a_i written and read.
  int64_t score_bytes = 0;
  // ReadKV depth schedules (1 byte per channel and per token) written and read.
  int64_t schedule_bytes = 0;
  // Output written; ReadKV also writes and reads the transformed-domain output before the
  // inverse value transform.
  int64_t output_bytes = 0;
  // ReadKV outlier lists read (the same bytes as their logical reads: whole 4-byte entries).
  int64_t outlier_bytes = 0;
  int64_t Total() const {
    return key_payload_bytes + value_payload_bytes + residual_bytes + metadata_bytes + query_bytes +
           score_bytes + schedule_bytes + output_bytes + outlier_bytes;
  }
};

// Encode cost of a cache, accumulated over its life (not per call): wall seconds spent in
// Append (transform, standardise, quantise, plane writes) and the bytes it wrote (payload bits of
// encoded tokens / 8, plus BF16 residual-window writes; dense/FP8: their stored bytes).
struct EncodeCost {
  double seconds = 0.0;
  int64_t bytes_written = 0;
  int64_t tokens_appended = 0;
};

// What the reader chose in the call (diagnostics; not a ledger).
struct ReadDepthStats {
  int64_t encoded_tokens = 0;
  int64_t residual_tokens = 0;
  double mean_key_depth = 0.0;    // over (KV head, channel)
  double mean_value_depth = 0.0;  // over (KV head, encoded token)
  int min_key_depth = 0, max_key_depth = 0;
  int min_value_depth = 0, max_value_depth = 0;
};

struct AttentionLedgers {
  CapacityLedger capacity;
  LogicalReads logical;
  PhysicalTraffic physical;
  // 4. Workspace: peak temporary bytes alive during the call (every scratch buffer of the call
  // is alive until it returns, so this is their sum).
  int64_t workspace_peak_bytes = 0;
  EncodeCost encode;  // the cache's cumulative encode cost at the time of the call
  ReadDepthStats depths;
};

// The payload-only write/read model of the paper (docs/ledgers.md), per scalar
// lane: N prompt tokens, L decode steps, every step reads the whole history.
struct PayloadWriteReadModel {
  int64_t prompt_tokens = 0;                 // N
  int64_t decode_steps = 0;                  // L
  int store_bits = 8;                        // W of the candidate
  double read_bits = 4.0;                    // R, the same for both
  int baseline_bits = 4;                     // store = read bits of the baseline
  int64_t history_reads = 0;                 // S = L * N + L (L - 1) / 2 token reads
  double read_bits_per_lane = 0;             // R * S, the same for both
  int64_t write_bits_per_lane = 0;           // W * (N + L)
  int64_t baseline_write_bits_per_lane = 0;  // baseline * (N + L)
  int64_t extra_write_bits_per_lane = 0;     // (W - baseline) * (N + L)
  double extra_write_ratio = 0;              // extra / (R * S)
  double capacity_ratio = 0;                 // W / baseline
};

// Throws InvalidArgument naming the field for N < 0, L < 1, W or baseline outside [1, 32],
// R outside (0, W].
PayloadWriteReadModel ComputePayloadWriteReadModel(int64_t prompt_tokens, int64_t decode_steps,
                                                   int store_bits, double read_bits,
                                                   int baseline_bits);

// What ReadKV's outlier lists (outliers.h) cost per ledger, as a share of the ReadKV payload of
// the same scalars, for a measured rate: `entries_per_scalar` list entries (K and V together) per
// stored scalar, e.g. 0.002 when 0.2% of the values are listed (`kvgate calibrate --check`,
// column ent/vec divided by d). Per (256-token block, KV head): 4 header bytes over its 2 * 256 * d
// scalars; per entry 4 bytes. Every step reads every list of the blocks it reads.
struct OutlierListModel {
  double entries_per_scalar = 0;
  int head_dim = 128;
  int store_bits = 8;
  double read_bits = 4.0;
  double bytes_per_scalar = 0;         // entries * 4 + header share
  double capacity_share = 0;           // of the W-bit payload: bytes / (W / 8)
  double logical_read_share = 0;       // of the payload read: 8 * bytes / R
  double physical_traffic_share = 0;   // of the payload's bytes moved: bytes / (R / 8), the same
                                       // as logical (whole entries, no sector rounding modelled)
  int64_t workspace_bytes = 0;         // 0: the readers apply the entries in place
};

// Throws InvalidArgument naming the field: "entries_per_scalar" (outside [0, 1]), "head_dim"
// (< 8), "store_bits" (outside [1, 8]), "read_bits" (outside (0, W]).
OutlierListModel ComputeOutlierListModel(double entries_per_scalar, int head_dim, int store_bits,
                                         double read_bits);

}  // namespace readkv::codec
