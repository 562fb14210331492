#include "readkv/codec/readkv_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention_kernels.h"
#include "calibration_checks.h"
#include "plane_checks.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/key_bytes.h"
#include "readkv/codec/plane_decode.h"

namespace readkv::codec {

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
  internal::RequireLayoutReads(options.layout, plan_.reader, "layout");
  const bool tiles = IsTileLayout(options.layout);
  if (options.layout == PlaneLayout::kTilesByteKeys) RequireWholeKeys(plan_);
  for (int h = 0; h < geometry.heads_kv; ++h) {
    outliers_.emplace_back(geometry.head_dim, options_.outliers);
    key_transforms_.emplace_back(geometry.head_dim, calibration_->seeds.KeySeed(layer, h));
    value_transforms_.emplace_back(geometry.head_dim, calibration_->seeds.ValueSeed(layer, h));
    if (tiles) {
      tile_stores_.emplace_back(geometry.head_dim, options.store_bits, options.layout);
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
  const bool byte_keys = options_.layout == PlaneLayout::kTilesByteKeys;
  uint8_t key_codes[1024];
  uint8_t value_codes[1024];
  float key_z[1024];
  float value_z[1024];
  for (int c = 0; c < d; ++c) {
    const auto ch = static_cast<size_t>(c);
    key_z[c] = (key_transformed[c] - k_mean[ch]) / k_std[ch];
    value_z[c] = (value_transformed[c] - v_mean[ch]) / v_std[ch];
    key_codes[c] = byte_keys ? EncodeKeyByte(key_z[c]) : codebook_->Encode(key_z[c]);
    value_codes[c] = codebook_->Encode(value_z[c]);
  }
  const std::span<const uint8_t> k(key_codes, static_cast<size_t>(d));
  const std::span<const uint8_t> v(value_codes, static_cast<size_t>(d));
  if (IsTileLayout(options_.layout)) {
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
    if (IsTileLayout(options_.layout)) {
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
    throw InvalidArgument("layout", "this cache stores a tile layout");
  }
  return stores_.at(static_cast<size_t>(head));
}

const TilePlaneStore& ReadKvLayerCache::tile_store(int head) const {
  if (!IsTileLayout(options_.layout)) {
    throw InvalidArgument("layout", "this cache stores the planes layout");
  }
  return tile_stores_.at(static_cast<size_t>(head));
}

std::vector<uint8_t> ReadKvLayerCache::HeadBlockBytes(int head, int64_t block) const {
  return IsTileLayout(options_.layout) ? tile_store(head).BlockBytes(block)
                                       : store(head).BlockBytes(block);
}

int64_t ReadKvLayerCache::BlockByteSize() const {
  return IsTileLayout(options_.layout)
             ? TilePlaneStore::BlockByteSize(geometry().head_dim, options_.store_bits, kBlockTokens)
             : stores_.front().BlockByteSize();
}

TileLayerView ReadKvLayerCache::tile_view() const {
  if (!IsTileLayout(options_.layout)) {
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

}  // namespace readkv::codec
