// ReadKvLayerCache::DoAttend on the planes layout (the greedy, constrained and flexible
// readers; the tile reader is tile_attention.cc): the Key depth schedule and logits from keys
// read at those depths, the softmax, the Value depth schedule and the probability-weighted sum
// of values read at theirs, the residual window exactly, and the call's ledgers.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention_kernels.h"
#include "plane_checks.h"
#include "readkv/codec/plane_decode.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/tile_reader.h"

namespace readkv::codec {
namespace {

template <typename T>
int64_t Bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

}  // namespace

namespace {

// The sizes of one DoAttend call.
struct AttendShape {
  AttendShape(const LayerGeometry& geo, int64_t encoded, int64_t residual)
      : d(geo.head_dim),
        g(geo.group()),
        hkv(geo.heads_kv),
        heads_q(geo.heads_q),
        ud(static_cast<size_t>(geo.head_dim)),
        t_enc(encoded),
        t_res(residual),
        tokens(encoded + residual),
        stride((tokens + 7) / 8 * 8),
        blocks((encoded + kBlockTokens - 1) / kBlockTokens),
        scale(1.0f / std::sqrt(static_cast<float>(geo.head_dim))) {}
  int d, g, hkv, heads_q;
  size_t ud;
  int64_t t_enc, t_res, tokens;
  int64_t stride;  // logits rows padded for 8-lane tails
  int64_t blocks;
  float scale;
};

// Every scratch buffer of the call; all alive until it returns (the workspace ledger).
struct AttendScratch {
  explicit AttendScratch(const AttendShape& s)
      : transformed_queries(static_cast<size_t>(s.heads_q) * s.ud),
        key_importance(static_cast<size_t>(s.hkv) * s.ud),
        key_depths(key_importance.size()),
        probabilities(static_cast<size_t>(s.heads_q) * static_cast<size_t>(s.stride)),
        row(kBlockTokens),
        codes(kBlockTokens),
        table_offsets(s.ud),
        value_importance(static_cast<size_t>(s.hkv * s.t_enc)),
        value_depths(value_importance.size()),
        accumulators(static_cast<size_t>(s.g) * s.ud),
        head_out(static_cast<size_t>(s.g) * s.ud),
        value_codes(s.ud),
        channel_row(s.ud),
        per_query(static_cast<size_t>(s.g)) {}
  int64_t Bytes() const {
    return codec::Bytes(transformed_queries) + codec::Bytes(key_importance) +
           codec::Bytes(key_depths) + codec::Bytes(probabilities) + codec::Bytes(row) +
           codec::Bytes(codes) + codec::Bytes(table_offsets) + codec::Bytes(tables) +
           codec::Bytes(value_importance) + codec::Bytes(value_depths) +
           codec::Bytes(accumulators) + codec::Bytes(head_out) + codec::Bytes(value_codes) +
           codec::Bytes(channel_row) + codec::Bytes(scaled) + codec::Bytes(per_query) +
           scratch.Bytes();
  }
  std::vector<float> transformed_queries;
  std::vector<double> key_importance;
  std::vector<uint8_t> key_depths;
  std::vector<float> probabilities;
  std::vector<float> row;
  std::vector<uint8_t> codes;
  std::vector<int64_t> table_offsets;
  std::vector<float> tables;
  std::vector<double> value_importance;
  std::vector<uint8_t> value_depths;
  std::vector<float> accumulators;
  std::vector<float> head_out;
  std::vector<uint8_t> value_codes;
  std::vector<float> channel_row;
  std::vector<float> scaled;  // one head's queries times 1/sqrt(d)
  std::vector<float> per_query;
  AllocatorScratch scratch;
};

// What one KV head's stage reads: its codes, outlier lists, residual window and calibration.
struct HeadCodes {
  const BitPlaneStore& store;
  const OutlierStore& outliers;
  const std::vector<uint16_t>& residual;  // bfloat16, [t_res, d]
  std::span<const float> mean, sd;
};

// What the logits stage adds to the ledgers.
struct LogitCounts {
  int64_t table_entries = 0;
  int64_t outlier_read_bytes = 0;  // every block's lists, K and V, read once per call
};

// Stage 1b for one KV head: logits of its g queries from keys reconstructed at `depth`, then
// the softmax, into head_probs ([g, stride]).
void HeadLogits(const AttendShape& s, const LloydTree& codebook, const HeadCodes& head,
                const uint8_t* depth, size_t head_index, AttendScratch& w, float* head_probs,
                LogitCounts& counts) {
  const int d = s.d, g = s.g;
  const size_t ud = s.ud;
  const int64_t stride = s.stride, t_enc = s.t_enc;
  for (size_t i = 0; i < w.scaled.size(); ++i) {
    w.scaled[i] = w.transformed_queries[head_index * g * ud + i] * s.scale;
  }
  // A channel read to depth 0 reconstructs as mu_c for every token: a constant logit bias.
  std::fill(w.per_query.begin(), w.per_query.end(), 0.0f);
  float* bias_of = w.per_query.data();
  int64_t cursor = 0;
  for (int c = 0; c < d; ++c) {
    const int t = depth[c];
    if (t == 0) {
      for (int q = 0; q < g; ++q)
        bias_of[q] += w.scaled[static_cast<size_t>(q) * ud + c] * head.mean[c];
      continue;
    }
    w.table_offsets[static_cast<size_t>(c)] = cursor;
    const auto centroids = codebook.centroids(t);
    for (size_t m = 0; m < centroids.size(); ++m) {
      w.tables[static_cast<size_t>(cursor) + m] = head.mean[c] + head.sd[c] * centroids[m];
    }
    cursor += static_cast<int64_t>(centroids.size());
  }
  counts.table_entries += cursor;
  for (int q = 0; q < g; ++q) {
    std::fill(head_probs + q * stride, head_probs + q * stride + t_enc, bias_of[q]);
  }
  for (int64_t b = 0; b < s.blocks; ++b) {
    const int64_t first = b * kBlockTokens;
    const int64_t span = std::min<int64_t>(kBlockTokens, t_enc - first);
    const int64_t span8 = (span + 7) / 8 * 8;
    for (int c = 0; c < d; ++c) {
      const int t = depth[c];
      if (t == 0) continue;
      DecodeKeyBlockCodes(head.store, b, c, t, w.codes.data());
      const float* table = w.tables.data() + w.table_offsets[static_cast<size_t>(c)];
      for (int64_t j = 0; j < span8; ++j)
        w.row[static_cast<size_t>(j)] = table[w.codes[static_cast<size_t>(j)]];
      for (int q = 0; q < g; ++q) {
        internal::Axpy(w.scaled[static_cast<size_t>(q) * ud + c], w.row.data(),
                       head_probs + q * stride + first, span8);
      }
    }
    AddKeyOutlierLogits(head.outliers.KeyEntries(b), codebook, depth, head.sd, w.scaled.data(), g,
                        d, head_probs + first, stride);
    counts.outlier_read_bytes += head.outliers.BlockReadBytes(b);
  }
  const uint16_t* residual = head.residual.data();
  for (int64_t r = 0; r < s.t_res; ++r) {
    for (int c = 0; c < d; ++c)
      w.channel_row[static_cast<size_t>(c)] = internal::Bf16ToFloat(residual[r * d + c]);
    for (int q = 0; q < g; ++q) {
      head_probs[q * stride + t_enc + r] =
          internal::Dot(w.scaled.data() + static_cast<size_t>(q) * ud, w.channel_row.data(), d);
    }
  }
  for (int q = 0; q < g; ++q) internal::SoftmaxInPlace(head_probs + q * stride, s.tokens);
}

// Stage 2b for one KV head: sum_i p_i * (mu + sigma * centroid) at the value depths `depth`,
// the residual window exactly, into w.head_out ([g, d], before the inverse V transform).
void HeadValues(const AttendShape& s, const LloydTree& codebook, const HeadCodes& head,
                const uint8_t* depth, const float* head_probs, AttendScratch& w) {
  const int d = s.d, g = s.g;
  const size_t ud = s.ud;
  const int64_t stride = s.stride, t_enc = s.t_enc;
  std::fill(w.accumulators.begin(), w.accumulators.end(), 0.0f);
  // Probability mass on encoded tokens: the mu term of every reconstructed value.
  std::fill(w.per_query.begin(), w.per_query.end(), 0.0f);
  float* mass = w.per_query.data();
  for (int64_t i = 0; i < t_enc; ++i) {
    for (int q = 0; q < g; ++q) mass[q] += head_probs[q * stride + i];
    const int t = depth[i];
    if (t == 0) continue;  // reconstructs as mu: carried by the mass term
    DecodeValueCodes(head.store, i, t, w.value_codes.data());
    const float* centroids = codebook.centroids(t).data();
    for (size_t c = 0; c < ud; ++c) w.channel_row[c] = centroids[w.value_codes[c]];
    for (int q = 0; q < g; ++q) {
      internal::Axpy(head_probs[q * stride + i], w.channel_row.data(),
                     w.accumulators.data() + static_cast<size_t>(q) * ud, d);
    }
  }
  for (int64_t b = 0; b < s.blocks; ++b) {
    const int64_t first = b * kBlockTokens;
    AddValueOutlierSums(head.outliers.ValueEntries(b), codebook, depth + first,
                        head_probs + first, g, stride, d, w.accumulators.data());
  }
  for (int q = 0; q < g; ++q) {
    float* o = w.head_out.data() + static_cast<size_t>(q) * ud;
    const float* acc = w.accumulators.data() + static_cast<size_t>(q) * ud;
    for (size_t c = 0; c < ud; ++c) o[c] = head.mean[c] * mass[q] + head.sd[c] * acc[c];
  }
  const uint16_t* residual = head.residual.data();
  for (int64_t r = 0; r < s.t_res; ++r) {
    for (int c = 0; c < d; ++c)
      w.channel_row[static_cast<size_t>(c)] = internal::Bf16ToFloat(residual[r * d + c]);
    for (int q = 0; q < g; ++q) {
      internal::Axpy(head_probs[q * stride + t_enc + r], w.channel_row.data(),
                     w.head_out.data() + static_cast<size_t>(q) * ud, d);
    }
  }
}

// The call's ledgers (capacity and encode are the cache's, filled by the caller).
AttentionLedgers AttendLedgers(const AttendShape& s, const AttendScratch& w,
                               const LogitCounts& counts, int store_bits) {
  const int d = s.d, hkv = s.hkv;
  const int64_t t_enc = s.t_enc, t_res = s.t_res;
  AttentionLedgers ledgers;
  const int64_t key_depth_sum = DepthAllocator::Spent(w.key_depths);
  const int64_t value_depth_sum = DepthAllocator::Spent(w.value_depths);
  const int64_t channels = static_cast<int64_t>(hkv) * d;
  ledgers.logical.key_bits = key_depth_sum * t_enc;
  ledgers.logical.value_bits = value_depth_sum * d;
  ledgers.logical.residual_bits = t_res * channels * 16 * 2;
  ledgers.logical.outlier_bits = counts.outlier_read_bytes * 8;
  PhysicalTraffic& phys = ledgers.physical;
  phys.key_payload_bytes = key_depth_sum * s.blocks * kKeyPlaneBytes;
  phys.value_payload_bytes = value_depth_sum * (d / 8);
  phys.residual_bytes = t_res * channels * 2 * 2;
  phys.outlier_bytes = counts.outlier_read_bytes;
  const int64_t centroid_table_bytes = ((int64_t{2} << store_bits) - 1) * 4;
  phys.metadata_bytes =
      4 * channels * 4 + 2 * counts.table_entries * 4 + hkv * centroid_table_bytes;
  const int64_t query_floats = static_cast<int64_t>(s.heads_q) * d;
  phys.query_bytes = query_floats * 4 * 3 + 2 * channels * 8;
  // Logits written, read by the softmax; probabilities written, read for a_i and for the output.
  phys.score_bytes = 5 * static_cast<int64_t>(s.heads_q) * s.tokens * 4 + 2 * hkv * t_enc * 8;
  phys.schedule_bytes = 2 * (channels + hkv * t_enc);
  phys.output_bytes = query_floats * 4 * 3;
  ledgers.workspace_peak_bytes = w.Bytes();
  ReadDepthStats& stats = ledgers.depths;
  stats.encoded_tokens = t_enc;
  stats.residual_tokens = t_res;
  stats.mean_key_depth = static_cast<double>(key_depth_sum) / static_cast<double>(channels);
  stats.min_key_depth = *std::min_element(w.key_depths.begin(), w.key_depths.end());
  stats.max_key_depth = *std::max_element(w.key_depths.begin(), w.key_depths.end());
  if (t_enc > 0) {
    stats.mean_value_depth =
        static_cast<double>(value_depth_sum) / static_cast<double>(w.value_depths.size());
    stats.min_value_depth = *std::min_element(w.value_depths.begin(), w.value_depths.end());
    stats.max_value_depth = *std::max_element(w.value_depths.begin(), w.value_depths.end());
  }
  return ledgers;
}

}  // namespace

AttentionLedgers ReadKvLayerCache::DoAttend(std::span<const float> queries, std::span<float> out,
                                            const AttendOptions& options) const {
  CheckAttendShapes(queries, out);
  const ReaderPlan plan =
      options.policy ? MakeReaderPlan(*options.policy, options_.store_bits) : plan_;
  internal::RequireLayoutReads(options_.layout, plan.reader, "reader");
  if (plan.reader == ReaderKind::kTile) {
    AttentionLedgers ledgers = TileAttend(tile_view(), plan, queries, out);
    ledgers.capacity = Capacity();
    ledgers.encode = encode_;
    return ledgers;
  }
  const ReaderAllocators allocators(plan, codebook_->distortions());
  const AttendShape s(geometry(), encoded_tokens_, residual_tokens_);
  const int d = s.d, g = s.g, hkv = s.hkv;
  const size_t ud = s.ud;
  AttendScratch w(s);
  const auto head_codes = [&](int h, bool keys) {
    const auto head = static_cast<size_t>(h);
    return HeadCodes{stores_[head], outliers_[head],
                     keys ? residual_keys_[head] : residual_values_[head],
                     keys ? calibration_->KeyMean(layer_, h) : calibration_->ValueMean(layer_, h),
                     keys ? calibration_->KeyStd(layer_, h) : calibration_->ValueStd(layer_, h)};
  };

  // Stage 1a: transformed queries and Key channel importance, then the K depth schedule.
  for (int hq = 0; hq < s.heads_q; ++hq) {
    const auto kv = static_cast<size_t>(hq / g);
    key_transforms_[kv].Forward(queries.subspan(static_cast<size_t>(hq) * ud, ud),
                                std::span<float>(w.transformed_queries).subspan(hq * ud, ud));
  }
  for (int h = 0; h < hkv; ++h) {
    KeyChannelImportance(
        std::span<const float>(w.transformed_queries)
            .subspan(static_cast<size_t>(h) * g * ud, static_cast<size_t>(g) * ud),
        g, calibration_->KeyStd(layer_, h),
        std::span<double>(w.key_importance).subspan(static_cast<size_t>(h) * ud, ud));
  }
  ChooseKeyDepths(plan, allocators, w.key_importance, hkv, d, w.key_depths, w.scratch);

  // Stage 1b: logits from keys reconstructed at those depths, then the softmax.
  LogitCounts counts;
  size_t table_size = 0;
  for (int h = 0; h < hkv; ++h) {
    size_t size = 0;
    for (int c = 0; c < d; ++c) size += size_t{1} << w.key_depths[static_cast<size_t>(h) * ud + c];
    table_size = std::max(table_size, size);
  }
  w.tables.resize(table_size);
  w.scaled.resize(static_cast<size_t>(g) * ud);
  for (int h = 0; h < hkv; ++h) {
    const auto head = static_cast<size_t>(h);
    HeadLogits(s, *codebook_, head_codes(h, /*keys=*/true), w.key_depths.data() + head * ud, head,
               w, w.probabilities.data() + head * g * static_cast<size_t>(s.stride), counts);
  }

  // Stage 2a: Value token importance a_i = sum_h p_{h,i}^2, then the V depth schedule.
  for (int h = 0; h < hkv; ++h) {
    const auto head = static_cast<size_t>(h);
    ValueTokenImportance(
        std::span<const float>(w.probabilities)
            .subspan(head * g * static_cast<size_t>(s.stride), static_cast<size_t>(g * s.stride)),
        g, s.stride,
        std::span<double>(w.value_importance)
            .subspan(head * static_cast<size_t>(s.t_enc), static_cast<size_t>(s.t_enc)));
  }
  ChooseValueDepths(plan, allocators, w.value_importance, hkv, s.t_enc, w.value_depths, w.scratch);

  // Stage 2b: sum_i p_i * (mu + sigma * centroid), then the inverse V transform.
  for (int h = 0; h < hkv; ++h) {
    const auto head = static_cast<size_t>(h);
    HeadValues(s, *codebook_, head_codes(h, /*keys=*/false),
               w.value_depths.data() + head * static_cast<size_t>(s.t_enc),
               w.probabilities.data() + head * g * static_cast<size_t>(s.stride), w);
    for (int q = 0; q < g; ++q) {
      const size_t hq = head * g + static_cast<size_t>(q);
      value_transforms_[head].Inverse(
          std::span<const float>(w.head_out).subspan(static_cast<size_t>(q) * ud, ud),
          out.subspan(hq * ud, ud));
    }
  }

  AttentionLedgers ledgers = AttendLedgers(s, w, counts, options_.store_bits);
  ledgers.capacity = Capacity();
  ledgers.encode = encode_;
  return ledgers;
}

}  // namespace readkv::codec
