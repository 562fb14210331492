// GpuKvCache's tile reader (gpu_kv_cache.h, issue 37): one TileDecodeAttention call over a group
// of sequences with equal budgets, with the outlier page blocks when on (issue 36), and its
// ledgers (no torch op of their own: the kernels add the device-side terms).
#include <algorithm>
#include <span>
#include <vector>

#include "gpu_kv_cache.h"
#include "gpu_kv_pools.h"
#include "readkv/cuda/tile_attention.h"
#include "readkv/cuda/tile_ledgers.h"

namespace readkv::model::internal {

torch::Tensor GpuKvCache::AttendTile(int layer, const torch::Tensor& q, const torch::Tensor& table,
                                     const torch::Tensor& lens, std::span<const int32_t> lengths,
                                     int max_pages, GpuReadBits bits) {
  const Pools& p = *pools_;
  const auto batch = static_cast<int>(lengths.size());
  rc::TileDecodeShape shape;
  shape.batch = batch;
  shape.heads_q = config_.heads_q;
  shape.heads_kv = config_.heads_kv;
  shape.head_dim = config_.head_dim;
  shape.store_bits = config_.store_bits;
  shape.max_encoded_tokens = *std::max_element(lengths.begin(), lengths.end());
  shape.max_residual_tokens = 0;  // no residual window: every token is encoded (gpu_kv_cache.h)
  shape.max_pages = max_pages;
  shape.byte_keys = config_.byte_keys;
  rc::TilePlan plan = rc::PlanTileDecode(shape, sm_count_, config_.value_window_tokens);
  // One launch where the device holds every row's cluster at once (asked once per shape of
  // cluster and kept; tile_attention.h), unless the server was told off.
  Check(rc::ApplyOnePassMode(config_.one_pass, shape, &plan), "ChooseTileOnePass");
  torch::Tensor ws = Workspace(rc::TileDecodeWorkspaceBytes(shape, plan));
  if (!zero_lens_.defined() || zero_lens_.numel() < batch) {
    zero_lens_ =
        torch::zeros({batch}, torch::TensorOptions().dtype(torch::kInt).device(config_.device));
  }
  torch::Tensor out = torch::empty({batch, config_.heads_q, config_.head_dim}, q.options());
  rc::TileDecodeInputs in;
  in.queries = Ptr<const float>(q);
  in.key_tiles = Ptr<const uint8_t>(p.k[static_cast<size_t>(layer)]);
  in.value_tiles = Ptr<const uint8_t>(p.v[static_cast<size_t>(layer)]);
  in.page_table = Ptr<const int32_t>(table);
  in.encoded_lens = Ptr<const int32_t>(lens);
  in.residual_lens = Ptr<const int32_t>(zero_lens_);
  in.out = Ptr<float>(out);
  if (Lists()) {
    in.key_outlier_pages = Ptr<const uint32_t>(p.k_lists[static_cast<size_t>(layer)]);
    in.value_outlier_pages = Ptr<const uint32_t>(p.v_lists[static_cast<size_t>(layer)]);
    CountListHeaderReads(lengths);
  }
  // Both increment tables are the step-1 table: the tile reader's Value step is 1.
  const rc::ReadKvReadPolicy policy{bits.key, bits.value, Ptr<const double>(p.key_increments),
                                    p.key_steps, Ptr<const double>(p.key_increments),
                                    p.key_steps};
  // The depth-dependent ledger terms, added on the device by the kernels (gpu_kv_cache.h).
  rc::TileDecodeDebug debug;
  debug.totals = Ptr<unsigned long long>(device_totals_);
  // The entries the lists hold, summed by TileSelect into outlier_counters_[3].
  if (Lists()) debug.outlier_entries = Ptr<unsigned long long>(outlier_counters_, 3);
  Check(rc::TileDecodeAttention(
            shape, in, p.Codec(layer, config_.heads_kv, config_.head_dim, config_.store_bits),
            p.tile_centroids, policy, plan, ws.data_ptr(), nullptr, debug),
        "TileDecodeAttention");
  const std::vector<int32_t> no_residual(lengths.size(), 0);
  host_ledgers_.physical_traffic_bytes +=
      rc::TileDecodeTraffic(shape, plan, lengths.data(), no_residual.data(), nullptr, nullptr)
          .Total();
  return out;
}

void GpuKvCache::CountListHeaderReads(std::span<const int32_t> lengths) {
  // The tile_start halves: 4 bytes per token tile, KV head and kind (every token is encoded: no
  // residual window). The entries themselves are counted on the device (AttendTile).
  int64_t tiles = 0;
  for (const int32_t length : lengths) tiles += (length + 15) / 16;
  const int64_t halves = 2 * int64_t{config_.heads_kv} * tiles * 4;
  host_ledgers_.logical_read_bytes += halves;
  host_ledgers_.physical_traffic_bytes += halves;
  host_ledgers_.outlier_read_bytes += halves;
}

}  // namespace readkv::model::internal
