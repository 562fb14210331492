// The ReadKV readers (docs/readkv.md, "Read path" and "Readers"): how one decode step turns a
// read policy into Key channel depths (stage 1) and Value token depths (stage 2).
//
// | reader      | K/V split              | budget scope                | t_min | V step |
// |-------------|------------------------|-----------------------------|-------|--------|
// | flexible    | R_K, R_V from policy   | pooled over a layer's heads | 0     | 1      |
// | constrained | R_K, R_V from policy   | per KV head                 | 1     | 2      |
// | tile        | R_K, R_V from policy   | per KV head                 | 1     | 1      |
// | full        | none: every scalar at W (requires R = W), no allocation            |
// The tile reader allocates over objects of 16 members (tile_reader.h): Key depths per group of
// 16 channels, Value depths per block of 16 tokens, with the same budgets counted in those units.
// Budgets in depth units: B_K = floor(R_K * d) channel-bits per KV head, B_V = floor(R_V * T_enc)
// token-bits per KV head (T_enc = encoded tokens); a pooled budget is floor(R * d * H_kv) or
// floor(R_V * T_enc * H_kv). With V packets of 2 and t_min = 1 the V depths are 1, 3, 5, 7
// (for W = 8), see allocator.h. The read policy is per request and never part of the storage
// identity. Everything here is pure; functions are thread-safe.
//
// The constrained reader's split defaults to R_K = R_V = R, its definition in docs/readkv.md
// ("Readers"). A policy may give it an unequal split too: the per-head budgets, t_min = 1 and the V
// packets that make it the GPU kernel's reader are unchanged, only the two budgets move. Measured
// on the built-in 8K model (BENCHMARKS.md, "Quality scans", 2026-11-30), 6:2 at R = 4 found 38/40
// passkeys where 4:4 found 12/40: retrieval needs the keys' precision.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "readkv/codec/allocator.h"

namespace readkv::codec {

enum class ReaderKind { kFlexible, kConstrained, kFull, kTile };
inline constexpr std::array<ReaderKind, 4> kReaderKinds = {
    ReaderKind::kFlexible, ReaderKind::kConstrained, ReaderKind::kFull, ReaderKind::kTile};

// The reader's name at the edges (flags, requests, reports); ParseReaderKind reads it back.
std::string_view ReaderName(ReaderKind reader);
// "flexible" | "constrained" | "full" | "tile"; throws InvalidArgument("reader") otherwise.
ReaderKind ParseReaderKind(std::string_view name);

// A read policy as a request or a policy file states it.
struct ReadPolicy {
  ReaderKind reader = ReaderKind::kConstrained;
  double read_bits = 4.0;  // R: average read depth over K and V, in bits per scalar
  // R_K and R_V (flexible and constrained). Both 0 means the equal split R_K = R_V = R.
  double key_bits = 0.0;
  double value_bits = 0.0;
  // The tile reader only: Value depths allocated per window of this many encoded tokens (a
  // multiple of 16), each window with the budget R_V x its blocks, instead of over the whole row
  // (0). A reader that decides its Value cut without a pass over the whole row would read this
  // way (the GPU tile reader's TileWindowValues does, with windows that are its chunks);
  // `kvgate codec attention --value-window` and `kvgate serve --value-window` set it. Requests
  // cannot set it.
  int value_window_tokens = 0;
  // With a window: the Value weights normalised per window (each head's probabilities divided by
  // its mass in the window, so that a window's cut needs no statistics of the rest of the row)
  // instead of the row's softmax. A design under measurement (docs/performance-notes.md, "Value
  // windows on the GPU"), CPU only: `--value-window-local`.
  bool value_window_local = false;
};

// A validated policy with everything the readers derive from it for a codec of W store bits.
struct ReaderPlan {
  ReaderKind reader = ReaderKind::kConstrained;
  int store_bits = 8;
  double key_bits = 4.0;    // R_K
  double value_bits = 4.0;  // R_V
  int min_depth = 1;
  int value_step = 2;
  bool pooled = false;  // budget shared by all KV heads of the layer
  int value_window_tokens = 0;  // ReadPolicy's; 0: the Value budget is the row's
  bool value_window_local = false;  // ReadPolicy's

  // Depth-unit budgets of one allocation scope (`heads` KV heads: 1, or H_kv when pooled).
  int64_t KeyBudget(int head_dim, int heads) const;
  int64_t ValueBudget(int64_t encoded_tokens, int heads) const;
};

// Throws InvalidArgument naming the field: "store_bits" (W not in [1, 8]), "read_bits" (R not in
// (0, W], below t_min for the constrained and tile readers, or != W for the full reader), "kv_split" (R_K or
// R_V outside [t_min, W], (R_K + R_V) / 2 != R, or an unequal split for the full reader),
// "value_window" (negative, not a multiple of 16, or nonzero for a reader other than the tile
// reader; value_window_local without a window).
ReaderPlan MakeReaderPlan(const ReadPolicy& policy, int store_bits);

// Stage 1 weights of one KV head. queries_transformed: [group][d] transformed queries of the g
// query heads that share the KV head (transformed with the KEY sign vector); key_std: [d] sigma_c
// of the KV head. out[c] = sum_h (q~_{h,c} * sigma_c)^2.
void KeyChannelImportance(std::span<const float> queries_transformed, int group,
                          std::span<const float> key_std, std::span<double> out);

// Stage 2 weights of one KV head. probabilities: [group][stride] approximate attention of the g
// query heads, the first `out.size()` columns being the tokens to weigh. out[i] = sum_h p_{h,i}^2.
void ValueTokenImportance(std::span<const float> probabilities, int group, int64_t stride,
                          std::span<double> out);
// The same with each head's probabilities normalised per window of `window_tokens` tokens (a
// partial last window too): out[i] = sum_h (p_{h,i} / m_{h,w})^2, m_{h,w} the sum of head h's
// probabilities over the window w holding i (in double; a window without mass weighs 0).
void ValueTokenImportancePerWindow(std::span<const float> probabilities, int group,
                                   int64_t stride, int window_tokens, std::span<double> out);

// The allocators of a plan over a codebook's distortions D(0..W).
struct ReaderAllocators {
  ReaderAllocators(const ReaderPlan& plan, std::span<const double> distortion);
  DepthAllocator key;
  DepthAllocator value;
};

// Chooses depths for all KV heads of a layer with the threshold allocator.
// importance / depths: [heads][per_head] (per_head = d for keys, T_enc for values). Pooled plans
// allocate once over all heads; per-head plans allocate each head with its own budget; the full
// reader writes W everywhere. The tile reader's depths are per group and block instead
// (tile_reader.h): these throw InvalidArgument("reader") for it.
void ChooseKeyDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                     std::span<const double> importance, int heads, int head_dim,
                     std::span<uint8_t> depths, AllocatorScratch& scratch);
void ChooseValueDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                       std::span<const double> importance, int heads, int64_t encoded_tokens,
                       std::span<uint8_t> depths, AllocatorScratch& scratch);

}  // namespace readkv::codec
