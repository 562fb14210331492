// TileAttend: one decode step of the tile reader over a layer (tile_reader.h), with its ledgers.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention_kernels.h"
#include "readkv/codec/bitplanes.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/tile_reader.h"

namespace readkv::codec {
namespace {

template <typename T>
int64_t Bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

// The ledgers of one call, from the depths it chose (key_depths [H_kv, groups], value_depths
// [H_kv, blocks]) and its scratch bytes.
AttentionLedgers TileLedgers(const LayerGeometry& geo, int64_t t_enc, int64_t t_res, int store_bits,
                             const std::vector<uint8_t>& key_depths,
                             const std::vector<uint8_t>& value_depths, int64_t workspace_bytes) {
  const int d = geo.head_dim;
  const int hkv = geo.heads_kv;
  const int groups = d / kTileChannels;
  const int64_t tokens = t_enc + t_res;
  const int64_t blocks = (t_enc + kTileTokens - 1) / kTileTokens;
  AttentionLedgers ledgers;
  const int64_t channels = static_cast<int64_t>(hkv) * d;
  const int64_t token_tiles = blocks;  // token tiles of the encoded tokens
  int64_t key_depth_sum = 0, value_scalar_depths = 0, value_depth_sum = 0;
  for (uint8_t t : key_depths) key_depth_sum += t;
  for (int h = 0; h < hkv; ++h) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int t = value_depths[static_cast<size_t>(h * blocks + b)];
      value_depth_sum += t;
      value_scalar_depths += t * std::min<int64_t>(kTileTokens, t_enc - b * kTileTokens);
    }
  }
  ledgers.logical.key_bits = key_depth_sum * kTileChannels * t_enc;
  ledgers.logical.value_bits = value_scalar_depths * d;
  ledgers.logical.residual_bits = t_res * channels * 16 * 2;
  PhysicalTraffic& phys = ledgers.physical;
  phys.key_payload_bytes = key_depth_sum * token_tiles * kTilePlaneBytes;
  phys.value_payload_bytes = value_depth_sum * groups * kTilePlaneBytes;
  phys.residual_bytes = t_res * channels * 2 * 2;
  // mu/sigma of K and V; one standard centroid table per KV head for K and one for V.
  const int64_t centroid_table_bytes = ((int64_t{2} << store_bits) - 1) * 4;
  phys.metadata_bytes = 4 * channels * 4 + 2 * hkv * centroid_table_bytes;
  const int64_t query_floats = static_cast<int64_t>(geo.heads_q) * d;
  // Queries read; transformed and folded queries written and read; importance, group weights.
  phys.query_bytes = query_floats * 4 * 5 + 2 * channels * 8 + 2 * hkv * groups * 8;
  phys.score_bytes = 5 * static_cast<int64_t>(geo.heads_q) * tokens * 4 + 2 * hkv * t_enc * 8 +
                     2 * hkv * blocks * 8;
  phys.schedule_bytes = 2 * (hkv * groups + hkv * blocks);
  phys.output_bytes = query_floats * 4 * 3;
  ledgers.workspace_peak_bytes = workspace_bytes;
  ReadDepthStats& stats = ledgers.depths;
  stats.encoded_tokens = t_enc;
  stats.residual_tokens = t_res;
  stats.mean_key_depth =
      static_cast<double>(key_depth_sum * kTileChannels) / static_cast<double>(channels);
  stats.min_key_depth = *std::min_element(key_depths.begin(), key_depths.end());
  stats.max_key_depth = *std::max_element(key_depths.begin(), key_depths.end());
  if (t_enc > 0) {
    stats.mean_value_depth =
        static_cast<double>(value_scalar_depths) / static_cast<double>(hkv * t_enc);
    stats.min_value_depth = *std::min_element(value_depths.begin(), value_depths.end());
    stats.max_value_depth = *std::max_element(value_depths.begin(), value_depths.end());
  }
  return ledgers;
}

// The residual window's exact logits, columns [t_enc, t_enc + t_res) of the g rows of `probs`:
// keys BF16, centred on mu (the shift the folded query's logits take), times the scaled query.
void ResidualKeyLogits(const uint16_t* residual, int64_t t_enc, int64_t t_res,
                       std::span<const float> k_mean, const float* scaled, int g, int d,
                       float* row, float* probs, int64_t stride) {
  const auto ud = static_cast<size_t>(d);
  for (int64_t r = 0; r < t_res; ++r) {
    for (size_t c = 0; c < ud; ++c) {
      row[c] = internal::Bf16ToFloat(residual[static_cast<size_t>(r) * ud + c]) - k_mean[c];
    }
    for (size_t h2 = 0; h2 < static_cast<size_t>(g); ++h2) {
      probs[h2 * static_cast<size_t>(stride) + static_cast<size_t>(t_enc + r)] =
          internal::Dot(scaled + h2 * ud, row, d);
    }
  }
}

// head_out[h2] += sum over the residual window of p * v (values BF16, exact).
void AddResidualValueSums(const uint16_t* residual, int64_t t_enc, int64_t t_res,
                          const float* probs, int64_t stride, int g, int d, float* row,
                          float* head_out) {
  const auto ud = static_cast<size_t>(d);
  for (int64_t r = 0; r < t_res; ++r) {
    for (size_t c = 0; c < ud; ++c) {
      row[c] = internal::Bf16ToFloat(residual[static_cast<size_t>(r) * ud + c]);
    }
    for (size_t h2 = 0; h2 < static_cast<size_t>(g); ++h2) {
      internal::Axpy(probs[h2 * static_cast<size_t>(stride) + static_cast<size_t>(t_enc + r)],
                     row, head_out + h2 * ud, d);
    }
  }
}

}  // namespace

AttentionLedgers TileAttend(const TileLayerView& view, const ReaderPlan& plan,
                            std::span<const float> queries, std::span<float> out,
                            TileDepths* chosen) {
  const ReaderAllocators allocators(plan, view.codebook->distortions());
  const LayerGeometry& geo = view.geometry;
  const int d = geo.head_dim;
  const int g = geo.group();
  const int hkv = geo.heads_kv;
  const int groups = d / kTileChannels;
  const int64_t t_enc = view.encoded_tokens;
  const int64_t t_res = view.residual_tokens;
  const int64_t tokens = t_enc + t_res;
  const int64_t blocks = (t_enc + kTileTokens - 1) / kTileTokens;
  const int64_t stride = (tokens + 7) / 8 * 8;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto ud = static_cast<size_t>(d);
  const auto ug = static_cast<size_t>(g);

  // Every scratch buffer of the call; all alive until it returns (the workspace ledger).
  std::vector<float> transformed(static_cast<size_t>(geo.heads_q) * ud);
  std::vector<double> channel_importance(ud);
  std::vector<double> group_weights(static_cast<size_t>(hkv * groups));
  std::vector<uint8_t> key_depths(group_weights.size());
  std::vector<float> folded(ug * ud), scaled(ug * ud);
  std::vector<float> probabilities(static_cast<size_t>(geo.heads_q) * static_cast<size_t>(stride));
  std::vector<float> residual_row(ud);
  std::vector<double> token_importance(static_cast<size_t>(t_enc));
  std::vector<double> block_weights(static_cast<size_t>(hkv * blocks));
  std::vector<uint8_t> value_depths(block_weights.size());
  std::vector<float> acc(ug * ud), head_out(ug * ud), mass(ug);
  // The outlier lists' corrections take per-channel and per-token depths (outliers.h): the
  // group and block depths spread over their members. Empty when the cache keeps no lists.
  const bool lists = !view.outliers.empty();
  std::vector<uint8_t> channel_depths(lists ? ud : 0);
  std::vector<uint8_t> token_depths(lists ? static_cast<size_t>(t_enc) : 0);
  const int64_t list_blocks = (t_enc + kBlockTokens - 1) / kBlockTokens;
  int64_t outlier_read_bytes = 0;  // every block's lists, K and V, read once per call
  AllocatorScratch scratch;

  if (!view.stores.empty() && view.stores.front().byte_keys()) RequireWholeKeys(plan);
  for (int hq = 0; hq < geo.heads_q; ++hq) {
    view.key_transforms[static_cast<size_t>(hq / g)].Forward(
        queries.subspan(static_cast<size_t>(hq) * ud, ud),
        std::span<float>(transformed).subspan(static_cast<size_t>(hq) * ud, ud));
  }
  for (int h = 0; h < hkv; ++h) {
    const auto head = static_cast<size_t>(h);
    const TilePlaneStore& store = view.stores[head];
    const auto k_mean = view.calibration->KeyMean(view.layer, h);
    const auto k_std = view.calibration->KeyStd(view.layer, h);
    const float* q = transformed.data() + head * ug * ud;

    // Stage 1: group depths from the summed channel importance, shared by the g query heads
    // (byte keys: every group whole, RequireWholeKeys).
    const auto depths = std::span<uint8_t>(key_depths).subspan(head * groups, groups);
    if (store.byte_keys()) {
      std::fill(depths.begin(), depths.end(), static_cast<uint8_t>(store.store_bits()));
    } else {
      const auto weights = std::span<double>(group_weights).subspan(head * groups, groups);
      KeyChannelImportance(std::span<const float>(q, ug * ud), g, k_std, channel_importance);
      SumPerTile(channel_importance, weights);
      ChooseKeyGroupDepths(plan, allocators, weights, depths, scratch);
    }

    // Logits: sigma and the scale folded into the query; q~ . mu cancels in the softmax, so the
    // residual window's exact logits take the same shift (keys centred on mu).
    for (size_t i = 0; i < ug * ud; ++i) {
      scaled[i] = q[i] * scale;
      folded[i] = scaled[i] * k_std[i % ud];
    }
    float* probs = probabilities.data() + head * ug * static_cast<size_t>(stride);
    TileKeyLogits(store, t_enc, depths, folded, g, *view.codebook, probs, stride);
    if (lists) {
      for (size_t c = 0; c < ud; ++c) channel_depths[c] = depths[c / kTileChannels];
      for (int64_t b = 0; b < list_blocks; ++b) {
        if (store.byte_keys()) {
          AddByteKeyOutlierLogits(view.outliers[head].KeyEntries(b), k_std, scaled.data(), g, d,
                                  probs + b * kBlockTokens, stride);
        } else {
          AddKeyOutlierLogits(view.outliers[head].KeyEntries(b), *view.codebook,
                              channel_depths.data(), k_std, scaled.data(), g, d,
                              probs + b * kBlockTokens, stride);
        }
        outlier_read_bytes += view.outliers[head].BlockReadBytes(b);
      }
    }
    ResidualKeyLogits(view.residual_keys[head].data(), t_enc, t_res, k_mean, scaled.data(), g, d,
                      residual_row.data(), probs, stride);
    for (size_t h2 = 0; h2 < ug; ++h2) {
      internal::SoftmaxInPlace(probs + h2 * static_cast<size_t>(stride), tokens);
    }

    // Stage 2: block depths from the summed a_i.
    if (plan.value_window_local) {
      ValueTokenImportancePerWindow(std::span<const float>(probs, ug * static_cast<size_t>(stride)),
                                    g, stride, plan.value_window_tokens, token_importance);
    } else {
      ValueTokenImportance(std::span<const float>(probs, ug * static_cast<size_t>(stride)), g,
                           stride, token_importance);
    }
    const auto bweights = std::span<double>(block_weights).subspan(head * blocks, blocks);
    const auto bdepths = std::span<uint8_t>(value_depths).subspan(head * blocks, blocks);
    SumPerTile(token_importance, bweights);
    ChooseValueBlockDepths(plan, allocators, bweights, bdepths, scratch);

    // sum_i p_i C(code_i) on the tiles; mu and sigma once per row after the sum.
    TileValueSums(store, t_enc, bdepths, probs, stride, g, *view.codebook, acc.data());
    if (lists) {
      for (int64_t i = 0; i < t_enc; ++i) {
        token_depths[static_cast<size_t>(i)] = bdepths[static_cast<size_t>(i / kTileTokens)];
      }
      for (int64_t b = 0; b < list_blocks; ++b) {
        AddValueOutlierSums(view.outliers[head].ValueEntries(b), *view.codebook,
                            token_depths.data() + b * kBlockTokens, probs + b * kBlockTokens, g,
                            stride, d, acc.data());
      }
    }
    const auto v_mean = view.calibration->ValueMean(view.layer, h);
    const auto v_std = view.calibration->ValueStd(view.layer, h);
    for (size_t h2 = 0; h2 < ug; ++h2) {
      const float* p = probs + h2 * static_cast<size_t>(stride);
      float m = 0.0f;
      for (int64_t i = 0; i < t_enc; ++i) m += p[i];
      mass[h2] = m;
      for (size_t c = 0; c < ud; ++c) {
        head_out[h2 * ud + c] = v_mean[c] * m + v_std[c] * acc[h2 * ud + c];
      }
    }
    AddResidualValueSums(view.residual_values[head].data(), t_enc, t_res, probs, stride, g, d,
                         residual_row.data(), head_out.data());
    for (size_t h2 = 0; h2 < ug; ++h2) {
      view.value_transforms[head].Inverse(std::span<const float>(head_out).subspan(h2 * ud, ud),
                                          out.subspan((head * ug + h2) * ud, ud));
    }
  }

  const int64_t workspace_bytes =
      Bytes(transformed) + Bytes(channel_importance) + Bytes(group_weights) + Bytes(key_depths) +
      Bytes(folded) + Bytes(scaled) + Bytes(probabilities) + Bytes(residual_row) +
      Bytes(token_importance) + Bytes(block_weights) + Bytes(value_depths) + Bytes(acc) +
      Bytes(head_out) + Bytes(mass) + Bytes(channel_depths) + Bytes(token_depths) +
      scratch.Bytes();
  AttentionLedgers ledgers =
      TileLedgers(geo, t_enc, t_res, plan.store_bits, key_depths, value_depths, workspace_bytes);
  ledgers.logical.outlier_bits = outlier_read_bytes * 8;
  ledgers.physical.outlier_bytes = outlier_read_bytes;
  if (chosen) {
    chosen->key_groups = key_depths;
    chosen->value_blocks = value_depths;
  }
  return ledgers;
}

}  // namespace readkv::codec
