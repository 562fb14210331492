// The ReadKV layer cache: the codec's write path and both readers for one layer of one sequence
// (docs/readkv.md). Append: transform (Hadamard with the layer/head sign vectors) -> standardise
// with the frozen calibration -> LloydTree::Encode -> BitPlaneStore per KV head. With the residual
// window on, the tokens of the newest incomplete 256-token block are kept unencoded as BF16 values
// in the transformed domain and encoded when the block fills; off, every token goes straight into
// the planes. Attend: stage 1 picks Key channel depths from the queries, reconstructs keys from
// those planes, and takes the softmax over encoded and residual tokens; stage 2 picks Value token
// depths from a_i = sum_h p_{h,i}^2, reconstructs values, sums p v, and applies the inverse V
// transform. The read policy can be overridden per call without re-encoding. With outliers on
// (ReadKvCacheOptions::outliers, outliers.h) every encoded token also gets its capped lists of
// values past the tree's clipping point, and every reader adds their exact correction: K before
// the softmax, V before sigma, mu and the inverse transform.
// The plane layout is fixed at construction and belongs to the stored bytes: the planes layout
// (bitplanes.h) is read by the flexible, constrained and full readers, the tile layout
// (tile_planes.h) by the tile reader (tile_reader.h); a policy naming a reader of the other
// layout is refused with InvalidArgument("reader").
// See attention.h for shapes and thread-safety.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/bitplanes.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/readers.h"
#include "readkv/codec/tile_planes.h"
#include "readkv/codec/tile_reader.h"
#include "readkv/codec/transform.h"

namespace readkv::codec {

// The layout a reader reads: kTiles for the tile reader, kPlanes for the others.
PlaneLayout LayoutForReader(ReaderKind reader);

struct ReadKvCacheOptions {
  int store_bits = 8;
  ReadPolicy policy;
  bool residual_window = true;
  OutlierOptions outliers;  // off by default; resolved against the codebook by the cache
  PlaneLayout layout = PlaneLayout::kPlanes;  // must be LayoutForReader(policy.reader)
};

class ReadKvLayerCache final : public LayerKvCache {
 public:
  // `codebook` must have W = options.store_bits (InvalidArgument("codebook") otherwise); the
  // calibration must match the geometry ("calibration") and hold `layer` ("layer"); the default
  // policy is validated ("read_bits", "kv_split") and must read the layout ("layout").
  ReadKvLayerCache(const LayerGeometry& geometry, std::shared_ptr<const Calibration> calibration,
                   int layer, std::shared_ptr<const LloydTree> codebook,
                   const ReadKvCacheOptions& options);

  void Append(std::span<const float> keys, std::span<const float> values) override;
  // Appends one whole block of already-encoded tokens (a cache object's blocks, as
  // HeadBlockBytes wrote them): head_blocks[h] holds KV head h's bytes. Nothing is
  // decoded or re-encoded, so the stores hold exactly those bytes afterwards. All or nothing:
  // throws InvalidArgument("head_blocks") unless there is one block of BlockByteSize() bytes per
  // KV head, and InvalidArgument("tokens") unless the cache ends on a block boundary with an
  // empty residual window. With outliers on, outlier_blocks[h] holds KV head h's
  // OutlierStore::BlockBytes (InvalidArgument("outlier_blocks") unless one per KV head; off, it
  // must be empty); a damaged section throws CorruptObject("outliers") before anything is added.
  void AppendEncodedBlock(std::span<const std::vector<uint8_t>> head_blocks,
                          std::span<const std::vector<uint8_t>> outlier_blocks = {});
  int64_t tokens() const override { return encoded_tokens_ + residual_tokens_; }
  CapacityLedger Capacity() const override;
  EncodeCost encode_cost() const override { return encode_; }

  int64_t encoded_tokens() const { return encoded_tokens_; }
  int64_t residual_tokens() const { return residual_tokens_; }
  const ReaderPlan& plan() const { return plan_; }
  PlaneLayout layout() const { return options_.layout; }
  // The planes-layout store of a head (InvalidArgument("layout") for a tile-layout cache) and
  // the tile-layout store (InvalidArgument("layout") for a planes-layout cache).
  const BitPlaneStore& store(int head) const;
  const TilePlaneStore& tile_store(int head) const;
  // One KV head's bytes of one 256-token block in the cache's layout (a cache object's block);
  // BlockByteSize() is a full block's size.
  std::vector<uint8_t> HeadBlockBytes(int head, int64_t block) const;
  int64_t BlockByteSize() const;
  // What the tile reader reads (tile_reader.h), valid while the cache is alive and unchanged.
  // Throws InvalidArgument("layout") for a planes-layout cache.
  TileLayerView tile_view() const;
  const OutlierStore& outliers(int head) const { return outliers_[static_cast<size_t>(head)]; }
  // The resolved options (threshold filled in); cap 0 when off.
  const OutlierOptions& outlier_options() const { return options_.outliers; }

 private:
  AttentionLedgers DoAttend(std::span<const float> queries, std::span<float> out,
                            const AttendOptions& options) const override;
  // Encodes one token of one head given its transformed key and value.
  void EncodeToken(int head, const float* key_transformed, const float* value_transformed);
  void FlushResidual();

  std::shared_ptr<const Calibration> calibration_;
  int layer_;
  std::shared_ptr<const LloydTree> codebook_;
  ReadKvCacheOptions options_;
  ReaderPlan plan_;
  std::vector<HadamardTransform> key_transforms_, value_transforms_;  // [H_kv]
  std::vector<BitPlaneStore> stores_;                                 // [H_kv], planes layout
  std::vector<TilePlaneStore> tile_stores_;                           // [H_kv], tile layout
  std::vector<OutlierStore> outliers_;                                // [H_kv]
  // Residual window per head, [residual_tokens][d] BF16 bits, transformed domain.
  std::vector<std::vector<uint16_t>> residual_keys_, residual_values_;
  int64_t encoded_tokens_ = 0;
  int64_t residual_tokens_ = 0;
  EncodeCost encode_;
};

}  // namespace readkv::codec
