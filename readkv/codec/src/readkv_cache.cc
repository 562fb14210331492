#include "readkv/codec/readkv_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention_kernels.h"
#include "calibration_checks.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/plane_decode.h"

namespace readkv::codec {
namespace {

template <typename T>
int64_t Bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

void RequireLayoutReads(PlaneLayout layout, ReaderKind reader, const char* field) {
  if (LayoutForReader(reader) != layout) {
    throw InvalidArgument(field, "the " + std::string(ReaderName(reader)) + " reader reads the " +
                                     std::string(PlaneLayoutName(LayoutForReader(reader))) +
                                     " layout; this cache stores " +
                                     std::string(PlaneLayoutName(layout)));
  }
}

}  // namespace

PlaneLayout LayoutForReader(ReaderKind reader) {
  return reader == ReaderKind::kTile ? PlaneLayout::kTiles : PlaneLayout::kPlanes;
}

ReadKvLayerCache::ReadKvLayerCache(const LayerGeometry& geometry,
                                   std::shared_ptr<const Calibration> calibration, int layer,
                                   std::shared_ptr<const LloydTree> codebook,
                                   const ReadKvCacheOptions& options)
    : LayerKvCache(geometry),
      calibration_(std::move(calibration)),
      layer_(layer),
      codebook_(std::move(codebook)),
      options_(options) {
  if (!calibration_) throw InvalidArgument("calibration", "is required");
  internal::RequireCalibrationFor(*calibration_, geometry, layer);
  if (!codebook_ || codebook_->store_bits() != options.store_bits) {
    throw InvalidArgument("codebook", "must be a LloydTree with W = store_bits = " +
                                          std::to_string(options.store_bits));
  }
  plan_ = MakeReaderPlan(options.policy, options.store_bits);
  options_.outliers = ResolveOutlierOptions(options.outliers, *codebook_, geometry.head_dim);
  RequireLayoutReads(options.layout, plan_.reader, "layout");
  const bool tiles = options.layout == PlaneLayout::kTiles;
  for (int h = 0; h < geometry.heads_kv; ++h) {
    outliers_.emplace_back(geometry.head_dim, options_.outliers);
    key_transforms_.emplace_back(geometry.head_dim, calibration_->seeds.KeySeed(layer, h));
    value_transforms_.emplace_back(geometry.head_dim, calibration_->seeds.ValueSeed(layer, h));
    if (tiles) {
      tile_stores_.emplace_back(geometry.head_dim, options.store_bits);
    } else {
      stores_.emplace_back(geometry.head_dim, options.store_bits);
    }
  }
  residual_keys_.resize(static_cast<size_t>(geometry.heads_kv));
  residual_values_.resize(static_cast<size_t>(geometry.heads_kv));
}

void ReadKvLayerCache::EncodeToken(int head, const float* key_transformed,
                                   const float* value_transformed) {
  const int d = geometry().head_dim;
  const auto k_mean = calibration_->KeyMean(layer_, head);
  const auto k_std = calibration_->KeyStd(layer_, head);
  const auto v_mean = calibration_->ValueMean(layer_, head);
  const auto v_std = calibration_->ValueStd(layer_, head);
  uint8_t key_codes[1024];
  uint8_t value_codes[1024];
  float key_z[1024];
  float value_z[1024];
  for (int c = 0; c < d; ++c) {
    const auto ch = static_cast<size_t>(c);
    key_z[c] = (key_transformed[c] - k_mean[ch]) / k_std[ch];
    value_z[c] = (value_transformed[c] - v_mean[ch]) / v_std[ch];
    key_codes[c] = codebook_->Encode(key_z[c]);
    value_codes[c] = codebook_->Encode(value_z[c]);
  }
  const std::span<const uint8_t> k(key_codes, static_cast<size_t>(d));
  const std::span<const uint8_t> v(value_codes, static_cast<size_t>(d));
  if (options_.layout == PlaneLayout::kTiles) {
    tile_stores_[static_cast<size_t>(head)].Append(k, v);
  } else {
    stores_[static_cast<size_t>(head)].Append(k, v);
  }
  outliers_[static_cast<size_t>(head)].AppendToken(
      std::span<const float>(key_z, static_cast<size_t>(d)),
      std::span<const float>(value_z, static_cast<size_t>(d)));
  // Payload bits of one token of one head, K and V.
  encode_.bytes_written += 2LL * d * options_.store_bits / 8;
}

void ReadKvLayerCache::FlushResidual() {
  const int d = geometry().head_dim;
  std::vector<float> key(static_cast<size_t>(d)), value(static_cast<size_t>(d));
  for (int h = 0; h < geometry().heads_kv; ++h) {
    const auto& keys = residual_keys_[static_cast<size_t>(h)];
    const auto& values = residual_values_[static_cast<size_t>(h)];
    for (int64_t r = 0; r < residual_tokens_; ++r) {
      for (int c = 0; c < d; ++c) {
        key[static_cast<size_t>(c)] = internal::Bf16ToFloat(keys[static_cast<size_t>(r * d + c)]);
        value[static_cast<size_t>(c)] =
            internal::Bf16ToFloat(values[static_cast<size_t>(r * d + c)]);
      }
      EncodeToken(h, key.data(), value.data());
    }
    residual_keys_[static_cast<size_t>(h)].clear();
    residual_values_[static_cast<size_t>(h)].clear();
  }
  encoded_tokens_ += residual_tokens_;
  residual_tokens_ = 0;
}

void ReadKvLayerCache::Append(std::span<const float> keys, std::span<const float> values) {
  CheckAppendShapes(keys, values);
  const auto start = std::chrono::steady_clock::now();
  const int d = geometry().head_dim;
  std::vector<float> key(static_cast<size_t>(d)), value(static_cast<size_t>(d));
  for (int h = 0; h < geometry().heads_kv; ++h) {
    const auto head = static_cast<size_t>(h);
    key_transforms_[head].Forward(keys.subspan(head * d, static_cast<size_t>(d)), key);
    value_transforms_[head].Forward(values.subspan(head * d, static_cast<size_t>(d)), value);
    if (options_.residual_window) {
      for (int c = 0; c < d; ++c) {
        residual_keys_[head].push_back(internal::FloatToBf16(key[static_cast<size_t>(c)]));
        residual_values_[head].push_back(internal::FloatToBf16(value[static_cast<size_t>(c)]));
      }
      encode_.bytes_written += 2LL * d * 2;
    } else {
      EncodeToken(h, key.data(), value.data());
    }
  }
  if (options_.residual_window) {
    if (++residual_tokens_ == kBlockTokens) FlushResidual();
  } else {
    ++encoded_tokens_;
  }
  encode_.tokens_appended += 1;
  encode_.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ReadKvLayerCache::AppendEncodedBlock(std::span<const std::vector<uint8_t>> head_blocks,
                                          std::span<const std::vector<uint8_t>> outlier_blocks) {
  const int heads = geometry().heads_kv;
  const size_t expected_outliers = options_.outliers.enabled() ? static_cast<size_t>(heads) : 0;
  if (outlier_blocks.size() != expected_outliers) {
    throw InvalidArgument("outlier_blocks",
                          std::string("this cache ") + (expected_outliers ? "keeps" : "has no") +
                              " outlier lists: expected " + std::to_string(expected_outliers) +
                              " blocks, got " + std::to_string(outlier_blocks.size()));
  }
  if (static_cast<int>(head_blocks.size()) != heads) {
    throw InvalidArgument("head_blocks", "must hold one block per KV head (" +
                                             std::to_string(heads) + "), got " +
                                             std::to_string(head_blocks.size()));
  }
  for (int h = 0; h < heads; ++h) {
    const size_t size = head_blocks[static_cast<size_t>(h)].size();
    const int64_t expected = BlockByteSize();
    if (static_cast<int64_t>(size) != expected) {
      throw InvalidArgument("head_blocks", "block of KV head " + std::to_string(h) + " has " +
                                               std::to_string(size) + " bytes, a block has " +
                                               std::to_string(expected));
    }
  }
  if (residual_tokens_ != 0 || encoded_tokens_ % kBlockTokens != 0) {
    throw InvalidArgument("tokens", "an encoded block can only follow whole blocks (the cache "
                                    "holds " + std::to_string(tokens()) + " tokens)");
  }
  // Parse every outlier section into copies first: a damaged one changes nothing.
  std::vector<OutlierStore> parsed = outliers_;
  for (size_t h = 0; h < expected_outliers; ++h) {
    parsed[h].AppendBlockBytes(outlier_blocks[h], kBlockTokens);
  }
  for (int h = 0; h < heads; ++h) {
    const auto& bytes = head_blocks[static_cast<size_t>(h)];
    if (options_.layout == PlaneLayout::kTiles) {
      tile_stores_[static_cast<size_t>(h)].AppendBlockBytes(bytes, kBlockTokens);
    } else {
      stores_[static_cast<size_t>(h)].AppendBlockBytes(bytes, kBlockTokens);
    }
    if (expected_outliers == 0) {  // an empty section keeps the lists' blocks in step
      static constexpr uint8_t kEmpty[kOutlierBlockHeaderBytes] = {};
      outliers_[static_cast<size_t>(h)].AppendBlockBytes(kEmpty, kBlockTokens);
    }
  }
  if (expected_outliers != 0) outliers_ = std::move(parsed);
  encoded_tokens_ += kBlockTokens;
}

const BitPlaneStore& ReadKvLayerCache::store(int head) const {
  if (options_.layout != PlaneLayout::kPlanes) {
    throw InvalidArgument("layout", "this cache stores the tiles16 layout");
  }
  return stores_.at(static_cast<size_t>(head));
}

const TilePlaneStore& ReadKvLayerCache::tile_store(int head) const {
  if (options_.layout != PlaneLayout::kTiles) {
    throw InvalidArgument("layout", "this cache stores the planes layout");
  }
  return tile_stores_.at(static_cast<size_t>(head));
}

std::vector<uint8_t> ReadKvLayerCache::HeadBlockBytes(int head, int64_t block) const {
  return options_.layout == PlaneLayout::kTiles ? tile_store(head).BlockBytes(block)
                                                : store(head).BlockBytes(block);
}

int64_t ReadKvLayerCache::BlockByteSize() const {
  return options_.layout == PlaneLayout::kTiles
             ? TilePlaneStore::BlockByteSize(geometry().head_dim, options_.store_bits, kBlockTokens)
             : stores_.front().BlockByteSize();
}

TileLayerView ReadKvLayerCache::tile_view() const {
  if (options_.layout != PlaneLayout::kTiles) {
    throw InvalidArgument("layout", "this cache stores the planes layout");
  }
  TileLayerView view{geometry(),       calibration_.get(), layer_,           codebook_.get(),
                     tile_stores_,     key_transforms_,    value_transforms_, residual_keys_,
                     residual_values_, encoded_tokens_,    residual_tokens_,  {}};
  if (options_.outliers.enabled()) view.outliers = outliers_;
  return view;
}

CapacityLedger ReadKvLayerCache::Capacity() const {
  CapacityLedger c;
  for (const auto& store : stores_) c.payload_bytes += store.PayloadBytes();
  for (const auto& store : tile_stores_) c.payload_bytes += store.PayloadBytes();
  const int64_t channels = static_cast<int64_t>(geometry().heads_kv) * geometry().head_dim;
  c.metadata_bytes = 4 * channels * 4;  // mu and sigma of K and V, float
  c.residual_bytes = residual_tokens_ * channels * 2 * 2;
  for (const auto& list : outliers_) c.outlier_bytes += list.Bytes();
  return c;
}

AttentionLedgers ReadKvLayerCache::DoAttend(std::span<const float> queries, std::span<float> out,
                                            const AttendOptions& options) const {
  CheckAttendShapes(queries, out);
  const ReaderPlan plan =
      options.policy ? MakeReaderPlan(*options.policy, options_.store_bits) : plan_;
  RequireLayoutReads(options_.layout, plan.reader, "reader");
  if (plan.reader == ReaderKind::kTile) {
    AttentionLedgers ledgers = TileAttend(tile_view(), plan, queries, out);
    ledgers.capacity = Capacity();
    ledgers.encode = encode_;
    return ledgers;
  }
  const ReaderAllocators allocators(plan, codebook_->distortions());
  const LayerGeometry& geo = geometry();
  const int d = geo.head_dim;
  const int g = geo.group();
  const int hkv = geo.heads_kv;
  const int64_t t_enc = encoded_tokens_;
  const int64_t t_res = residual_tokens_;
  const int64_t tokens = t_enc + t_res;
  const int64_t stride = (tokens + 7) / 8 * 8;  // logits rows padded for 8-lane tails
  const int64_t blocks = (t_enc + kBlockTokens - 1) / kBlockTokens;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto ud = static_cast<size_t>(d);

  // Every scratch buffer of the call; all alive until it returns (the workspace ledger).
  std::vector<float> transformed_queries(static_cast<size_t>(geo.heads_q) * ud);
  std::vector<double> key_importance(static_cast<size_t>(hkv) * ud);
  std::vector<uint8_t> key_depths(key_importance.size());
  std::vector<float> probabilities(static_cast<size_t>(geo.heads_q) * static_cast<size_t>(stride));
  std::vector<float> row(kBlockTokens);
  std::vector<uint8_t> codes(kBlockTokens);
  std::vector<int64_t> table_offsets(ud);
  std::vector<float> tables;
  std::vector<double> value_importance(static_cast<size_t>(hkv * t_enc));
  std::vector<uint8_t> value_depths(value_importance.size());
  std::vector<float> accumulators(static_cast<size_t>(g) * ud);
  std::vector<float> head_out(static_cast<size_t>(g) * ud);
  std::vector<uint8_t> value_codes(ud);
  std::vector<float> channel_row(ud);
  std::vector<float> per_query(static_cast<size_t>(g));
  AllocatorScratch scratch;

  // Stage 1a: transformed queries and Key channel importance, then the K depth schedule.
  for (int hq = 0; hq < geo.heads_q; ++hq) {
    const auto kv = static_cast<size_t>(hq / g);
    key_transforms_[kv].Forward(queries.subspan(static_cast<size_t>(hq) * ud, ud),
                                std::span<float>(transformed_queries).subspan(hq * ud, ud));
  }
  for (int h = 0; h < hkv; ++h) {
    KeyChannelImportance(
        std::span<const float>(transformed_queries)
            .subspan(static_cast<size_t>(h) * g * ud, static_cast<size_t>(g) * ud),
        g, calibration_->KeyStd(layer_, h),
        std::span<double>(key_importance).subspan(static_cast<size_t>(h) * ud, ud));
  }
  ChooseKeyDepths(plan, allocators, key_importance, hkv, d, key_depths, scratch);

  // Stage 1b: logits from keys reconstructed at those depths, then the softmax.
  int64_t table_entries = 0;
  int64_t outlier_read_bytes = 0;  // every block's lists, K and V, read once per call
  size_t table_size = 0;
  for (int h = 0; h < hkv; ++h) {
    size_t size = 0;
    for (int c = 0; c < d; ++c) size += size_t{1} << key_depths[static_cast<size_t>(h) * ud + c];
    table_size = std::max(table_size, size);
  }
  tables.resize(table_size);
  std::vector<float> scaled(static_cast<size_t>(g) * ud);
  for (int h = 0; h < hkv; ++h) {
    const auto head = static_cast<size_t>(h);
    const BitPlaneStore& store = stores_[head];
    const auto mean = calibration_->KeyMean(layer_, h);
    const auto sd = calibration_->KeyStd(layer_, h);
    const uint8_t* depth = key_depths.data() + head * ud;
    for (size_t i = 0; i < scaled.size(); ++i) {
      scaled[i] = transformed_queries[head * g * ud + i] * scale;
    }
    // A channel read to depth 0 reconstructs as mu_c for every token: a constant logit bias.
    std::fill(per_query.begin(), per_query.end(), 0.0f);
    float* bias_of = per_query.data();
    int64_t cursor = 0;
    for (int c = 0; c < d; ++c) {
      const int t = depth[c];
      if (t == 0) {
        for (int q = 0; q < g; ++q) bias_of[q] += scaled[static_cast<size_t>(q) * ud + c] * mean[c];
        continue;
      }
      table_offsets[static_cast<size_t>(c)] = cursor;
      const auto centroids = codebook_->centroids(t);
      for (size_t m = 0; m < centroids.size(); ++m) {
        tables[static_cast<size_t>(cursor) + m] = mean[c] + sd[c] * centroids[m];
      }
      cursor += static_cast<int64_t>(centroids.size());
    }
    table_entries += cursor;
    float* head_probs = probabilities.data() + head * g * static_cast<size_t>(stride);
    for (int q = 0; q < g; ++q) {
      std::fill(head_probs + q * stride, head_probs + q * stride + t_enc, bias_of[q]);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * kBlockTokens;
      const int64_t span = std::min<int64_t>(kBlockTokens, t_enc - first);
      const int64_t span8 = (span + 7) / 8 * 8;
      for (int c = 0; c < d; ++c) {
        const int t = depth[c];
        if (t == 0) continue;
        DecodeKeyBlockCodes(store, b, c, t, codes.data());
        const float* table = tables.data() + table_offsets[static_cast<size_t>(c)];
        for (int64_t j = 0; j < span8; ++j)
          row[static_cast<size_t>(j)] = table[codes[static_cast<size_t>(j)]];
        for (int q = 0; q < g; ++q) {
          internal::Axpy(scaled[static_cast<size_t>(q) * ud + c], row.data(),
                         head_probs + q * stride + first, span8);
        }
      }
      AddKeyOutlierLogits(outliers_[head].KeyEntries(b), *codebook_, depth, sd, scaled.data(), g,
                          d, head_probs + first, stride);
      outlier_read_bytes += outliers_[head].BlockReadBytes(b);
    }
    const uint16_t* residual = residual_keys_[head].data();
    for (int64_t r = 0; r < t_res; ++r) {
      for (int c = 0; c < d; ++c)
        channel_row[static_cast<size_t>(c)] = internal::Bf16ToFloat(residual[r * d + c]);
      for (int q = 0; q < g; ++q) {
        head_probs[q * stride + t_enc + r] =
            internal::Dot(scaled.data() + static_cast<size_t>(q) * ud, channel_row.data(), d);
      }
    }
    for (int q = 0; q < g; ++q) internal::SoftmaxInPlace(head_probs + q * stride, tokens);
  }

  // Stage 2a: Value token importance a_i = sum_h p_{h,i}^2, then the V depth schedule.
  for (int h = 0; h < hkv; ++h) {
    const auto head = static_cast<size_t>(h);
    ValueTokenImportance(
        std::span<const float>(probabilities)
            .subspan(head * g * static_cast<size_t>(stride), static_cast<size_t>(g * stride)),
        g, stride,
        std::span<double>(value_importance)
            .subspan(head * static_cast<size_t>(t_enc), static_cast<size_t>(t_enc)));
  }
  ChooseValueDepths(plan, allocators, value_importance, hkv, t_enc, value_depths, scratch);

  // Stage 2b: sum_i p_i * (mu + sigma * centroid), then the inverse V transform.
  for (int h = 0; h < hkv; ++h) {
    const auto head = static_cast<size_t>(h);
    const BitPlaneStore& store = stores_[head];
    const float* head_probs = probabilities.data() + head * g * static_cast<size_t>(stride);
    const uint8_t* depth = value_depths.data() + head * static_cast<size_t>(t_enc);
    std::fill(accumulators.begin(), accumulators.end(), 0.0f);
    // Probability mass on encoded tokens: the mu term of every reconstructed value.
    std::fill(per_query.begin(), per_query.end(), 0.0f);
    float* mass = per_query.data();
    for (int64_t i = 0; i < t_enc; ++i) {
      for (int q = 0; q < g; ++q) mass[q] += head_probs[q * stride + i];
      const int t = depth[i];
      if (t == 0) continue;  // reconstructs as mu: carried by the mass term
      DecodeValueCodes(store, i, t, value_codes.data());
      const float* centroids = codebook_->centroids(t).data();
      for (size_t c = 0; c < ud; ++c) channel_row[c] = centroids[value_codes[c]];
      for (int q = 0; q < g; ++q) {
        internal::Axpy(head_probs[q * stride + i], channel_row.data(),
                       accumulators.data() + static_cast<size_t>(q) * ud, d);
      }
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * kBlockTokens;
      AddValueOutlierSums(outliers_[head].ValueEntries(b), *codebook_, depth + first,
                          head_probs + first, g, stride, d, accumulators.data());
    }
    const auto mean = calibration_->ValueMean(layer_, h);
    const auto sd = calibration_->ValueStd(layer_, h);
    for (int q = 0; q < g; ++q) {
      float* o = head_out.data() + static_cast<size_t>(q) * ud;
      const float* acc = accumulators.data() + static_cast<size_t>(q) * ud;
      for (size_t c = 0; c < ud; ++c) o[c] = mean[c] * mass[q] + sd[c] * acc[c];
    }
    const uint16_t* residual = residual_values_[head].data();
    for (int64_t r = 0; r < t_res; ++r) {
      for (int c = 0; c < d; ++c)
        channel_row[static_cast<size_t>(c)] = internal::Bf16ToFloat(residual[r * d + c]);
      for (int q = 0; q < g; ++q) {
        internal::Axpy(head_probs[q * stride + t_enc + r], channel_row.data(),
                       head_out.data() + static_cast<size_t>(q) * ud, d);
      }
    }
    for (int q = 0; q < g; ++q) {
      const size_t hq = head * g + static_cast<size_t>(q);
      value_transforms_[head].Inverse(
          std::span<const float>(head_out).subspan(static_cast<size_t>(q) * ud, ud),
          out.subspan(hq * ud, ud));
    }
  }

  // Ledgers.
  AttentionLedgers ledgers;
  ledgers.capacity = Capacity();
  const int64_t key_depth_sum = DepthAllocator::Spent(key_depths);
  const int64_t value_depth_sum = DepthAllocator::Spent(value_depths);
  const int64_t channels = static_cast<int64_t>(hkv) * d;
  ledgers.logical.key_bits = key_depth_sum * t_enc;
  ledgers.logical.value_bits = value_depth_sum * d;
  ledgers.logical.residual_bits = t_res * channels * 16 * 2;
  ledgers.logical.outlier_bits = outlier_read_bytes * 8;
  PhysicalTraffic& phys = ledgers.physical;
  phys.key_payload_bytes = key_depth_sum * blocks * kKeyPlaneBytes;
  phys.value_payload_bytes = value_depth_sum * (d / 8);
  phys.residual_bytes = t_res * channels * 2 * 2;
  phys.outlier_bytes = outlier_read_bytes;
  const int64_t centroid_table_bytes = ((int64_t{2} << options_.store_bits) - 1) * 4;
  phys.metadata_bytes = 4 * channels * 4 + 2 * table_entries * 4 + hkv * centroid_table_bytes;
  const int64_t query_floats = static_cast<int64_t>(geo.heads_q) * d;
  phys.query_bytes = query_floats * 4 * 3 + 2 * channels * 8;
  // Logits written, read by the softmax; probabilities written, read for a_i and for the output.
  phys.score_bytes = 5 * static_cast<int64_t>(geo.heads_q) * tokens * 4 + 2 * hkv * t_enc * 8;
  phys.schedule_bytes = 2 * (channels + hkv * t_enc);
  phys.output_bytes = query_floats * 4 * 3;
  ledgers.workspace_peak_bytes =
      Bytes(transformed_queries) + Bytes(key_importance) + Bytes(key_depths) +
      Bytes(probabilities) + Bytes(row) + Bytes(codes) + Bytes(table_offsets) + Bytes(tables) +
      Bytes(value_importance) + Bytes(value_depths) + Bytes(accumulators) + Bytes(head_out) +
      Bytes(value_codes) + Bytes(channel_row) + Bytes(scaled) + Bytes(per_query) + scratch.Bytes();
  ledgers.encode = encode_;
  ReadDepthStats& stats = ledgers.depths;
  stats.encoded_tokens = t_enc;
  stats.residual_tokens = t_res;
  stats.mean_key_depth = static_cast<double>(key_depth_sum) / static_cast<double>(channels);
  stats.min_key_depth = *std::min_element(key_depths.begin(), key_depths.end());
  stats.max_key_depth = *std::max_element(key_depths.begin(), key_depths.end());
  if (t_enc > 0) {
    stats.mean_value_depth =
        static_cast<double>(value_depth_sum) / static_cast<double>(value_depths.size());
    stats.min_value_depth = *std::min_element(value_depths.begin(), value_depths.end());
    stats.max_value_depth = *std::max_element(value_depths.begin(), value_depths.end());
  }
  return ledgers;
}

}  // namespace readkv::codec
