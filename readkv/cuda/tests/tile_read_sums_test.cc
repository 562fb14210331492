// The tile reader's device-summed ledgers (tile_read_sums.h, TileDecodeDebug::totals) on the CPU:
// summed over the CPU tile reader's own depths, for a ragged batch (1 token, partial tiles, whole
// pages) at several budgets, they equal the codec's TileAttend ledgers (its logical bits, and the
// payload sectors of its physical traffic), which the served GPU backend reports as its own.
#include "tile_read_sums.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/synthetic.h"
#include "readkv/codec/tile_reader.h"

namespace readkv::cuda {
namespace {

TEST(TileReadSumsTest, SumsOverTheCpuReadersDepthsAreItsLedgers) {
  const int hq = 8, hkv = 2, d = 128, groups = d / 16;
  const std::vector<int> lens = {1, 17, 300, 777, 1024};
  codec::SyntheticConfig data;
  data.geometry = {hq, hkv, d};
  data.seed = 0x71e;
  const auto calibration =
      std::make_shared<const codec::Calibration>(codec::MakeSyntheticCalibration(data, 2048));
  for (const auto& [rk, rv] : std::vector<std::pair<double, double>>{
           {7, 2}, {4, 4}, {2, 2}, {1.5, 4.5}}) {
    codec::LayerCacheConfig config;
    config.backend = codec::KvBackend::kReadKv;
    config.geometry = data.geometry;
    config.calibration = calibration;
    config.store_bits = 8;
    config.policy = {codec::ReaderKind::kTile, 0.5 * (rk + rv), rk, rv};
    config.residual_window = false;  // as the served GPU backend
    long long want_bits = 0, want_bytes = 0, bits = 0, bytes = 0;
    for (size_t b = 0; b < lens.size(); ++b) {
      data.tokens = lens[b];
      data.seed = 0x71e + b;
      const codec::SyntheticLayer layer = codec::MakeSyntheticLayer(data);
      const auto cache = codec::MakeLayerKvCache(config);
      cache->AppendTokens(layer.keys, layer.values);
      const auto& readkv = dynamic_cast<const codec::ReadKvLayerCache&>(*cache);
      std::vector<float> out(static_cast<size_t>(hq) * d);
      codec::TileDepths depths;
      const codec::AttentionLedgers led =
          codec::TileAttend(readkv.tile_view(), readkv.plan(), layer.queries, out, &depths);
      want_bits += led.logical.key_bits + led.logical.value_bits;
      want_bytes += led.physical.key_payload_bytes + led.physical.value_payload_bytes;
      const int tiles = (lens[b] + 15) / 16;
      for (int h = 0; h < hkv; ++h) {
        long long steps = 0;
        for (int g = 0; g < groups; ++g) {
          steps += depths.key_groups[static_cast<size_t>(h * groups + g)];
        }
        const tile::ReadSums keys = tile::KeyRowReads(lens[b], steps);
        bits += keys.bits;
        bytes += keys.bytes;
        for (int j = 0; j < tiles; ++j) {
          const tile::ReadSums v = tile::ValueTileReads(
              lens[b], j, depths.value_blocks[static_cast<size_t>(h * tiles + j)], d);
          bits += v.bits;
          bytes += v.bytes;
        }
      }
    }
    EXPECT_EQ(bits, want_bits) << rk << ":" << rv;
    EXPECT_EQ(bytes, want_bytes) << rk << ":" << rv;
  }
}

}  // namespace
}  // namespace readkv::cuda
