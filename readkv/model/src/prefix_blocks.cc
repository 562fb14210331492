// LlamaDecodeModel's persistent prefix cache (runtime.h): a prompt's 256-token prefix blocks
// loaded from the store (restored into the ReadKV caches as they were encoded) or computed and
// stored, and every block decoded at full depth for the exact prefill of the blocks after it,
// so that a hit is bit-identical to a miss.
#include <algorithm>
#include <optional>

#include "readkv/codec/bitplanes.h"
#include "readkv/codec/key_bytes.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/tile_planes.h"
#include "runtime_impl.h"

namespace readkv::model {

const codec::ReadKvLayerCache& LlamaDecodeModel::Impl::ReadKvCache(const Sequence& s,
                                                                   int layer) const {
  return dynamic_cast<const codec::ReadKvLayerCache&>(*s.caches[static_cast<size_t>(layer)]);
}

codec::ReadKvLayerCache& LlamaDecodeModel::Impl::ReadKvCache(Sequence& s, int layer) const {
  return dynamic_cast<codec::ReadKvLayerCache&>(*s.caches[static_cast<size_t>(layer)]);
}

void LlamaDecodeModel::Impl::AppendDecoded(const codec::CacheObject& object,
                                           std::vector<torch::Tensor>& decoded_past) {
  const int w = options.kv.store_bits, d = hd();
  const int64_t n = object.tokens;
  std::vector<float> z(static_cast<size_t>(d)), x(static_cast<size_t>(d));
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    torch::Tensor k = torch::empty({n, hkv(), d}, torch::kFloat);
    torch::Tensor v = torch::empty({n, hkv(), d}, torch::kFloat);
    for (int h = 0; h < hkv(); ++h) {
      const size_t index = static_cast<size_t>(l) * hkv() + h;
      // The object's layout is the server's (its identity says so); codes read the same, but
      // byte keys (tiles16-kbytes) read back from their bytes (codec key_bytes.h).
      const codec::PlaneLayout layout = codec::ParsePlaneLayout(identity.layout);
      const bool tiles = codec::IsTileLayout(layout);
      const bool byte_keys = layout == codec::PlaneLayout::kTilesByteKeys;
      std::optional<codec::BitPlaneStore> planes;
      std::optional<codec::TilePlaneStore> tile_planes;
      if (tiles) {
        tile_planes.emplace(d, w, layout).AppendBlockBytes(object.blocks[index], object.tokens);
      } else {
        planes.emplace(d, w).AppendBlockBytes(object.blocks[index], object.tokens);
      }
      const auto code = [&](int kind, int64_t i, int c) {
        if (tiles) {
          return kind == 0 ? tile_planes->KeyCode(i, c, w) : tile_planes->ValueCode(i, c, w);
        }
        return kind == 0 ? planes->KeyCode(i, c, w) : planes->ValueCode(i, c, w);
      };
      const bool has_outliers = !object.outliers.empty();
      codec::OutlierStore outliers(
          d, {identity.outlier_cap, static_cast<float>(identity.outlier_threshold),
              identity.outlier_block_cap});
      if (has_outliers) outliers.AppendBlockBytes(object.outliers[index], object.tokens);
      for (int kind = 0; kind < 2; ++kind) {
        const auto mean = kind == 0 ? calibration->KeyMean(l, h) : calibration->ValueMean(l, h);
        const auto sd = kind == 0 ? calibration->KeyStd(l, h) : calibration->ValueStd(l, h);
        const codec::HadamardTransform& t =
            kind == 0 ? key_transforms[index] : value_transforms[index];
        float* out = (kind == 0 ? k : v).data_ptr<float>();
        for (int64_t i = 0; i < n; ++i) {
          for (int c = 0; c < d; ++c) {
            const auto ch = static_cast<size_t>(c);
            const uint8_t stored = code(kind, i, c);
            z[ch] = mean[ch] + sd[ch] * (kind == 0 && byte_keys ? codec::KeyByteValue(stored)
                                                                : codebook->Decode(stored, w));
          }
          // Outliers at full depth: their fp16 z replaces the clipped centroid.
          if (has_outliers) {
            for (const auto& e : kind == 0 ? outliers.KeyEntries(0) : outliers.ValueEntries(0)) {
              if (e.token != i) continue;
              z[e.channel] += sd[e.channel] *
                              (kind == 0 && byte_keys
                                   ? codec::ByteKeyOutlierCorrection(e.z_half)
                                   : codec::OutlierCorrection(*codebook, e.z_half, w));
            }
          }
          t.Inverse(z, x);
          std::copy(x.begin(), x.end(), out + (i * hkv() + h) * d);
        }
      }
    }
    for (int kind = 0; kind < 2; ++kind) {
      torch::Tensor part = (kind == 0 ? k : v).to(device, dtype);
      torch::Tensor& slot = decoded_past[2 * static_cast<size_t>(l) + kind];
      slot = slot.defined() ? torch::cat({slot, part}, 0) : part;
    }
  }
}

void LlamaDecodeModel::Impl::RestoreBlock(Sequence& s, const codec::CacheObject& object) {
  const auto heads = static_cast<size_t>(hkv());
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const auto first = object.blocks.begin() + static_cast<std::ptrdiff_t>(l * heads);
    std::span<const std::vector<uint8_t>> outliers;
    if (!object.outliers.empty()) outliers = {&object.outliers[l * heads], heads};
    ReadKvCache(s, l).AppendEncodedBlock(std::span<const std::vector<uint8_t>>(&*first, heads),
                                         outliers);
  }
  s.length += object.tokens;
}

void LlamaDecodeModel::Impl::PrefillThroughPrefixCache(uint64_t sequence_id, Sequence& s,
                                                       std::span<const int32_t> tokens) {
  const int64_t blocks = static_cast<int64_t>(tokens.size()) / codec::kBlockTokens;
  std::vector<torch::Tensor> decoded_past(2 * static_cast<size_t>(config.num_hidden_layers));
  int64_t hits = 0, stored = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * codec::kBlockTokens;
    const std::string digest =
        PrefixDigest(tokens.first(static_cast<size_t>(first + codec::kBlockTokens)));
    std::optional<codec::CacheObject> object =
        prefix_store->Load(digest, first, codec::kBlockTokens);
    if (object) {
      RestoreBlock(s, *object);
      ++hits;
    } else {
      Prefill(s, tokens.subspan(static_cast<size_t>(first), codec::kBlockTokens),
              &decoded_past);
      object = codec::CacheObject{identity, digest, first, codec::kBlockTokens, {}, {}};
      for (int l = 0; l < config.num_hidden_layers; ++l) {
        for (int h = 0; h < hkv(); ++h) {
          object->blocks.push_back(ReadKvCache(s, l).HeadBlockBytes(h, b));
          if (identity.outlier_cap > 0) {
            object->outliers.push_back(ReadKvCache(s, l).outliers(h).BlockBytes(b));
          }
        }
      }
      if (prefix_store->Store(*object)) ++stored;
    }
    AppendDecoded(*object, decoded_past);
  }
  const auto rest = tokens.subspan(static_cast<size_t>(blocks * codec::kBlockTokens));
  if (!rest.empty()) Prefill(s, rest, &decoded_past);
  if (options.prefix_cache.info) {
    options.prefix_cache.info("prefix cache: sequence " + std::to_string(sequence_id) + ": " +
                              std::to_string(blocks) + " prefix blocks, " +
                              std::to_string(hits) + " loaded, " +
                              std::to_string(blocks - hits) + " computed, " +
                              std::to_string(stored) + " stored");
  }
}

}  // namespace readkv::model
