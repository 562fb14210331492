#include "readkv/codec/ledgers.h"

#include <cmath>
#include <sstream>
#include <string>

#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

std::string Num(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

PayloadWriteReadModel ComputePayloadWriteReadModel(int64_t prompt_tokens, int64_t decode_steps,
                                                   int store_bits, double read_bits,
                                                   int baseline_bits) {
  if (prompt_tokens < 0) {
    throw InvalidArgument("prompt_tokens", "must be >= 0, got " + std::to_string(prompt_tokens));
  }
  if (decode_steps < 1) {
    throw InvalidArgument("decode_steps", "must be >= 1, got " + std::to_string(decode_steps));
  }
  if (store_bits < 1 || store_bits > 32) {
    throw InvalidArgument("store_bits", "must be in [1, 32], got " + std::to_string(store_bits));
  }
  if (baseline_bits < 1 || baseline_bits > 32) {
    throw InvalidArgument("baseline_bits",
                          "must be in [1, 32], got " + std::to_string(baseline_bits));
  }
  if (!std::isfinite(read_bits) || read_bits <= 0.0 || read_bits > store_bits) {
    throw InvalidArgument("read_bits", "must be in (0, store_bits=" + std::to_string(store_bits) +
                                           "], got " + Num(read_bits));
  }
  PayloadWriteReadModel m;
  m.prompt_tokens = prompt_tokens;
  m.decode_steps = decode_steps;
  m.store_bits = store_bits;
  m.read_bits = read_bits;
  m.baseline_bits = baseline_bits;
  // Step l (0-based) attends over the N prompt tokens and the l tokens decoded before it.
  m.history_reads = decode_steps * prompt_tokens + decode_steps * (decode_steps - 1) / 2;
  m.read_bits_per_lane = read_bits * static_cast<double>(m.history_reads);
  const int64_t written_tokens = prompt_tokens + decode_steps;
  m.write_bits_per_lane = store_bits * written_tokens;
  m.baseline_write_bits_per_lane = baseline_bits * written_tokens;
  m.extra_write_bits_per_lane = m.write_bits_per_lane - m.baseline_write_bits_per_lane;
  m.extra_write_ratio =
      m.read_bits_per_lane > 0.0
          ? static_cast<double>(m.extra_write_bits_per_lane) / m.read_bits_per_lane
          : 0.0;
  m.capacity_ratio = static_cast<double>(store_bits) / baseline_bits;
  return m;
}

OutlierListModel ComputeOutlierListModel(double entries_per_scalar, int head_dim, int store_bits,
                                         double read_bits) {
  if (!std::isfinite(entries_per_scalar) || entries_per_scalar < 0.0 || entries_per_scalar > 1.0) {
    throw InvalidArgument("entries_per_scalar",
                          "must be in [0, 1], got " + Num(entries_per_scalar));
  }
  if (head_dim < 8) throw InvalidArgument("head_dim", "must be >= 8");
  if (store_bits < 1 || store_bits > 8) throw InvalidArgument("store_bits", "must be in [1, 8]");
  if (!std::isfinite(read_bits) || read_bits <= 0.0 || read_bits > store_bits) {
    throw InvalidArgument("read_bits", "must be in (0, W], got " + Num(read_bits));
  }
  OutlierListModel m;
  m.entries_per_scalar = entries_per_scalar;
  m.head_dim = head_dim;
  m.store_bits = store_bits;
  m.read_bits = read_bits;
  m.bytes_per_scalar = 4.0 * entries_per_scalar + 4.0 / (2.0 * 256.0 * head_dim);
  m.capacity_share = m.bytes_per_scalar / (store_bits / 8.0);
  m.logical_read_share = 8.0 * m.bytes_per_scalar / read_bits;
  m.physical_traffic_share = m.logical_read_share;
  return m;
}

}  // namespace readkv::codec
