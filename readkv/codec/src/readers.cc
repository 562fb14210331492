#include "readkv/codec/readers.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

// Budgets are products of a fractional R and an integer count; the epsilon keeps e.g.
// 2.3 * 1000 from flooring to 2299 because 2.3 is not representable.
int64_t FloorBudget(double bits, double count) {
  return static_cast<int64_t>(std::floor(bits * count + 1e-9));
}

std::string Num(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

std::string_view ReaderName(ReaderKind reader) {
  switch (reader) {
    case ReaderKind::kFlexible:
      return "flexible";
    case ReaderKind::kConstrained:
      return "constrained";
    case ReaderKind::kFull:
      return "full";
    case ReaderKind::kTile:
      return "tile";
  }
  return "unknown";
}

ReaderKind ParseReaderKind(std::string_view name) {
  for (const ReaderKind reader : kReaderKinds) {
    if (name == ReaderName(reader)) return reader;
  }
  throw InvalidArgument(
      "reader", "must be flexible, constrained, full or tile, got '" + std::string(name) + "'");
}

int64_t ReaderPlan::KeyBudget(int head_dim, int heads) const {
  return FloorBudget(key_bits, static_cast<double>(head_dim) * heads);
}

int64_t ReaderPlan::ValueBudget(int64_t encoded_tokens, int heads) const {
  return FloorBudget(value_bits, static_cast<double>(encoded_tokens) * heads);
}

ReaderPlan MakeReaderPlan(const ReadPolicy& policy, int store_bits) {
  if (store_bits < 1 || store_bits > kMaxStoreBits) {
    throw InvalidArgument("store_bits", "must be in [1, " + std::to_string(kMaxStoreBits) +
                                            "], got " + std::to_string(store_bits));
  }
  const double r = policy.read_bits;
  if (!std::isfinite(r) || r <= 0.0 || r > store_bits) {
    throw InvalidArgument("read_bits",
                          "must be in (0, W=" + std::to_string(store_bits) + "], got " + Num(r));
  }
  const bool split_given = policy.key_bits != 0.0 || policy.value_bits != 0.0;
  ReaderPlan plan;
  plan.reader = policy.reader;
  plan.store_bits = store_bits;
  plan.key_bits = split_given ? policy.key_bits : r;
  plan.value_bits = split_given ? policy.value_bits : r;
  if (split_given && std::abs(plan.key_bits - r) + std::abs(plan.value_bits - r) > 1e-9 &&
      policy.reader == ReaderKind::kFull) {
    throw InvalidArgument("kv_split", "the full reader reads every plane of K and V; got " +
                                          Num(plan.key_bits) + ":" + Num(plan.value_bits));
  }
  switch (policy.reader) {
    case ReaderKind::kFlexible:
      plan.min_depth = 0;
      plan.value_step = 1;
      plan.pooled = true;
      break;
    case ReaderKind::kConstrained:
    case ReaderKind::kTile:
      plan.min_depth = 1;
      // Tile depths cost whole 32-byte sectors already, so they move one plane at a time.
      plan.value_step = policy.reader == ReaderKind::kTile ? 1 : 2;
      plan.pooled = false;
      if (r < 1.0) {
        throw InvalidArgument("read_bits", "the " + std::string(ReaderName(policy.reader)) +
                                               " reader reads at least 1 bit (t_min = 1), got " +
                                               Num(r));
      }
      break;
    case ReaderKind::kFull:
      plan.min_depth = store_bits;
      plan.value_step = 1;
      plan.pooled = false;
      if (r != store_bits) {
        throw InvalidArgument("read_bits", "the full reader reads every plane: R must equal W=" +
                                               std::to_string(store_bits) + ", got " + Num(r));
      }
      break;
  }
  for (double part : {plan.key_bits, plan.value_bits}) {
    if (!std::isfinite(part) || part < plan.min_depth || part > store_bits) {
      throw InvalidArgument("kv_split", "R_K and R_V must be in [" +
                                            std::to_string(plan.min_depth) + ", " +
                                            std::to_string(store_bits) + "], got " +
                                            Num(plan.key_bits) + ":" + Num(plan.value_bits));
    }
  }
  if (std::abs(0.5 * (plan.key_bits + plan.value_bits) - r) > 1e-9) {
    throw InvalidArgument("kv_split", "(R_K + R_V) / 2 must equal R=" + Num(r) + ", got " +
                                          Num(plan.key_bits) + ":" + Num(plan.value_bits));
  }
  const int window = policy.value_window_tokens;
  if (window < 0 || window % 16 != 0) {
    throw InvalidArgument("value_window", "must be 0 (the row) or a positive multiple of 16 "
                                          "tokens, got " + std::to_string(window));
  }
  if (window != 0 && policy.reader != ReaderKind::kTile) {
    throw InvalidArgument("value_window", "only the tile reader allocates Value depths per "
                                          "window; the " + std::string(ReaderName(policy.reader)) +
                                          " reader was asked for windows of " +
                                          std::to_string(window));
  }
  if (policy.value_window_local && window == 0) {
    throw InvalidArgument("value_window", "Value weights normalised per window need a window");
  }
  plan.value_window_tokens = window;
  plan.value_window_local = policy.value_window_local;
  return plan;
}

void KeyChannelImportance(std::span<const float> queries_transformed, int group,
                          std::span<const float> key_std, std::span<double> out) {
  const size_t d = key_std.size();
  std::fill(out.begin(), out.end(), 0.0);
  for (int h = 0; h < group; ++h) {
    const float* q = queries_transformed.data() + static_cast<size_t>(h) * d;
    for (size_t c = 0; c < d; ++c) {
      const double scaled = static_cast<double>(q[c]) * key_std[c];
      out[c] += scaled * scaled;
    }
  }
}

void ValueTokenImportance(std::span<const float> probabilities, int group, int64_t stride,
                          std::span<double> out) {
  std::fill(out.begin(), out.end(), 0.0);
  // Squares in double: a probability of 1e-23 squared still counts instead of flushing to 0.
  for (int h = 0; h < group; ++h) {
    const float* p = probabilities.data() + static_cast<size_t>(h) * static_cast<size_t>(stride);
    for (size_t i = 0; i < out.size(); ++i) {
      const double pi = p[i];
      out[i] += pi * pi;
    }
  }
}

void ValueTokenImportancePerWindow(std::span<const float> probabilities, int group,
                                   int64_t stride, int window_tokens, std::span<double> out) {
  if (window_tokens <= 0) throw InvalidArgument("value_window", "must be positive");
  std::fill(out.begin(), out.end(), 0.0);
  const auto per = static_cast<size_t>(window_tokens);
  for (int h = 0; h < group; ++h) {
    const float* p = probabilities.data() + static_cast<size_t>(h) * static_cast<size_t>(stride);
    for (size_t first = 0; first < out.size(); first += per) {
      const size_t end = std::min(out.size(), first + per);
      double mass = 0.0;
      for (size_t i = first; i < end; ++i) mass += p[i];
      if (mass <= 0.0) continue;
      for (size_t i = first; i < end; ++i) {
        const double pi = p[i] / mass;
        out[i] += pi * pi;
      }
    }
  }
}

ReaderAllocators::ReaderAllocators(const ReaderPlan& plan, std::span<const double> distortion)
    : key(distortion, plan.min_depth, 1), value(distortion, plan.min_depth, plan.value_step) {}

namespace {

void ChooseDepths(const ReaderPlan& plan, const DepthAllocator& allocator,
                  std::span<const double> importance, int heads, int64_t per_head,
                  int64_t scope_budget_one_head, int64_t scope_budget_all_heads,
                  std::span<uint8_t> depths, AllocatorScratch& scratch) {
  if (plan.reader == ReaderKind::kFull) {
    std::fill(depths.begin(), depths.end(), static_cast<uint8_t>(plan.store_bits));
    return;
  }
  if (plan.reader == ReaderKind::kTile) {
    throw InvalidArgument("reader",
                          "the tile reader chooses depths per group and block "
                          "(ChooseKeyGroupDepths, ChooseValueBlockDepths)");
  }
  if (plan.pooled) {
    allocator.Threshold(importance, scope_budget_all_heads, depths, scratch);
    return;
  }
  for (int h = 0; h < heads; ++h) {
    const auto offset = static_cast<size_t>(h * per_head);
    const auto count = static_cast<size_t>(per_head);
    allocator.Threshold(importance.subspan(offset, count), scope_budget_one_head,
                        depths.subspan(offset, count), scratch);
  }
}

}  // namespace

void ChooseKeyDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                     std::span<const double> importance, int heads, int head_dim,
                     std::span<uint8_t> depths, AllocatorScratch& scratch) {
  ChooseDepths(plan, allocators.key, importance, heads, head_dim, plan.KeyBudget(head_dim, 1),
               plan.KeyBudget(head_dim, heads), depths, scratch);
}

void ChooseValueDepths(const ReaderPlan& plan, const ReaderAllocators& allocators,
                       std::span<const double> importance, int heads, int64_t encoded_tokens,
                       std::span<uint8_t> depths, AllocatorScratch& scratch) {
  ChooseDepths(plan, allocators.value, importance, heads, encoded_tokens,
               plan.ValueBudget(encoded_tokens, 1), plan.ValueBudget(encoded_tokens, heads), depths,
               scratch);
}

}  // namespace readkv::codec
