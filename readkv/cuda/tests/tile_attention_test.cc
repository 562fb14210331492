// The GPU tile reader (tile_attention.h) against the CPU tile reader (codec::TileAttend) on the
// same caches: ragged sequences of synthetic K/V, with and without the residual window, depth
// mixes from 1 to 8 planes. Skips cleanly without a GPU.
//
// What must hold: the Key group depths equal the CPU's (the weights are bit-identical); the
// Value block depths equal the CPU Threshold allocator's on the GPU's own block weights; every
// output is finite and within tolerance of the CPU output (f16 folded queries and
// probabilities on the tensor cores: ~1e-3 relative, plus the quantisation noise of any Value
// block whose depth differs from the CPU's choice on its float weights).
#include "readkv/cuda/tile_attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "readkv/codec/allocator.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/readers.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/synthetic.h"
#include "readkv/codec/tile_reader.h"
#include "readkv/codec/transform.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_centroids.h"
#include "test_buffers.h"

namespace readkv::cuda {
namespace {

namespace codec = readkv::codec;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

struct TileCase {
  int heads_q, heads_kv, head_dim;
  std::vector<int> lens;
  bool residual_window;
  double read_bits, key_bits, value_bits;  // R_K = R_V = R when both splits are 0
  int chunk_tokens;                        // 0: PlanTileDecode's choice
  std::string Name() const {
    std::string text = "hq" + std::to_string(heads_q) + "_hkv" + std::to_string(heads_kv) + "_d" +
                       std::to_string(head_dim) + "_T";
    for (const int t : lens) text += std::to_string(t) + "_";
    text += std::string(residual_window ? "res" : "nores") + "_R" +
            std::to_string(static_cast<int>(read_bits * 10));
    if (key_bits != 0.0) {
      text += "_K" + std::to_string(static_cast<int>(key_bits * 10)) + "V" +
              std::to_string(static_cast<int>(value_bits * 10));
    }
    return text + "_c" + std::to_string(chunk_tokens);
  }
};

// The GPU's tile inputs in tile_attention.h's layout, packed from the CPU caches: per (sequence,
// KV head) the key and value tiles (zero past a sequence's end) and the BF16 residual windows.
struct HostTiles {
  std::vector<uint8_t> key_tiles, value_tiles;
  std::vector<uint16_t> residual_k, residual_v;
  std::vector<int32_t> encoded_lens, residual_lens;
};

HostTiles PackTiles(const std::vector<std::unique_ptr<codec::LayerKvCache>>& caches,
                    const TileDecodeShape& shape) {
  const int d = shape.head_dim, hkv = shape.heads_kv, W = shape.store_bits, groups = d / 16;
  const int max_residual = shape.max_residual_tokens;
  const size_t tile_row = static_cast<size_t>(shape.max_token_tiles()) * groups * W * 32;
  HostTiles t;
  t.key_tiles.assign(caches.size() * hkv * tile_row, 0);
  t.value_tiles.assign(t.key_tiles.size(), 0);
  t.residual_k.assign(caches.size() * hkv * max_residual * d, 0);
  t.residual_v.assign(t.residual_k.size(), 0);
  for (size_t b = 0; b < caches.size(); ++b) {
    const auto& cache = dynamic_cast<const codec::ReadKvLayerCache&>(*caches[b]);
    const codec::TileLayerView view = cache.tile_view();
    t.encoded_lens.push_back(static_cast<int32_t>(view.encoded_tokens));
    t.residual_lens.push_back(static_cast<int32_t>(view.residual_tokens));
    for (int h = 0; h < hkv; ++h) {
      const codec::TilePlaneStore& store = view.stores[static_cast<size_t>(h)];
      const size_t row = b * hkv + h;
      const size_t bytes = static_cast<size_t>(store.token_tiles()) * groups * W * 32;
      if (bytes > 0) {
        std::memcpy(t.key_tiles.data() + row * tile_row, store.KeyTile(0, 0), bytes);
        std::memcpy(t.value_tiles.data() + row * tile_row, store.ValueTile(0, 0), bytes);
      }
      const auto& rk = view.residual_keys[static_cast<size_t>(h)];
      const auto& rv = view.residual_values[static_cast<size_t>(h)];
      std::copy(rk.begin(), rk.end(), t.residual_k.begin() + row * max_residual * d);
      std::copy(rv.begin(), rv.end(), t.residual_v.begin() + row * max_residual * d);
    }
  }
  return t;
}
class TileKernelTest : public ::testing::TestWithParam<TileCase> {};

TEST_P(TileKernelTest, MatchesTheCpuTileReader) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const TileCase c = GetParam();
  const int d = c.head_dim, hkv = c.heads_kv, hq = c.heads_q, W = 8, groups = d / 16;
  const int batch = static_cast<int>(c.lens.size());
  const codec::LayerGeometry geometry{hq, hkv, d};
  codec::SyntheticConfig data;
  data.geometry = geometry;
  data.seed = 0x7113 + static_cast<uint64_t>(d);
  const auto calibration =
      std::make_shared<const codec::Calibration>(codec::MakeSyntheticCalibration(data, 2048));
  codec::LayerCacheConfig config;
  config.backend = codec::KvBackend::kReadKv;
  config.geometry = geometry;
  config.calibration = calibration;
  config.store_bits = W;
  config.policy = {codec::ReaderKind::kTile, c.read_bits, c.key_bits, c.value_bits};
  config.residual_window = c.residual_window;

  // CPU caches, the CPU reader's outputs and depths.
  std::vector<std::unique_ptr<codec::LayerKvCache>> caches;
  std::vector<float> queries, cpu_out;
  std::vector<codec::TileDepths> cpu_depths(static_cast<size_t>(batch));
  int max_encoded = 0, max_residual = 0;
  for (int b = 0; b < batch; ++b) {
    data.tokens = c.lens[static_cast<size_t>(b)];
    data.seed = 0x7113 * 31 + static_cast<uint64_t>(b);
    const codec::SyntheticLayer layer = codec::MakeSyntheticLayer(data);
    caches.push_back(codec::MakeLayerKvCache(config));
    caches.back()->AppendTokens(layer.keys, layer.values);
    const auto& cache = dynamic_cast<const codec::ReadKvLayerCache&>(*caches.back());
    std::vector<float> out(static_cast<size_t>(hq) * d);
    codec::TileAttend(cache.tile_view(), cache.plan(), layer.queries, out,
                      &cpu_depths[static_cast<size_t>(b)]);
    queries.insert(queries.end(), layer.queries.begin(), layer.queries.end());
    cpu_out.insert(cpu_out.end(), out.begin(), out.end());
    max_encoded = std::max(max_encoded, static_cast<int>(cache.encoded_tokens()));
    max_residual = std::max(max_residual, static_cast<int>(cache.residual_tokens()));
  }
  const auto& first = dynamic_cast<const codec::ReadKvLayerCache&>(*caches.front());
  const codec::ReaderPlan& plan = first.plan();

  // The GPU's inputs in tile_attention.h's layout.
  TileDecodeShape shape{batch, hq, hkv, d, W, max_encoded, max_residual};
  const int max_tiles = shape.max_token_tiles();
  const HostTiles host = PackTiles(caches, shape);
  const std::vector<int32_t>& encoded_lens = host.encoded_lens;
  const std::vector<float> key_signs = TransformSigns(*calibration, hkv, d, /*keys=*/true);
  const std::vector<float> value_signs = TransformSigns(*calibration, hkv, d, /*keys=*/false);
  const codec::LloydTree tree(W);
  const codec::DepthAllocator step1(tree.distortions(), 1, 1);  // the tile reader's K and V step
  std::vector<double> increments;
  for (int k = 0; k < step1.steps_per_object(); ++k) increments.push_back(step1.increment(k));
  const auto layer0 = [&](const std::vector<float>& all) {
    return std::vector<float>(all.begin(), all.begin() + static_cast<size_t>(hkv) * d);
  };
  DeviceBuffer<float> kmean(layer0(calibration->key_mean)), kstd(layer0(calibration->key_std));
  DeviceBuffer<float> vmean(layer0(calibration->value_mean)), vstd(layer0(calibration->value_std));
  DeviceBuffer<float> ksigns(key_signs), vsigns(value_signs);
  DeviceBuffer<double> inc(increments);
  const ReadKvCodec codec_tables{W,          kmean.get(),  kstd.get(),   vmean.get(),
                                 vstd.get(), ksigns.get(), vsigns.get(), nullptr,
                                 nullptr};
  const ReadKvReadPolicy policy{plan.key_bits, plan.value_bits, inc.get(), W - 1, inc.get(), W - 1};
  DeviceBuffer<float> d_queries(queries);
  DeviceBuffer<uint8_t> d_ktiles(host.key_tiles), d_vtiles(host.value_tiles);
  DeviceBuffer<uint16_t> d_rk(host.residual_k), d_rv(host.residual_v);
  DeviceBuffer<int32_t> d_enc(host.encoded_lens), d_res(host.residual_lens);
  DeviceBuffer<float> d_out(queries.size());
  CUDA_OK(cudaMemset(d_out.get(), 0xff, queries.size() * sizeof(float)));  // NaN poison
  DeviceBuffer<uint8_t> d_kdepths(static_cast<size_t>(batch) * hkv * groups);
  DeviceBuffer<uint8_t> d_vdepths(static_cast<size_t>(batch) * hkv * max_tiles);
  DeviceBuffer<double> d_weights(static_cast<size_t>(batch) * hkv * max_tiles);

  int sm_count = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  const TilePlan tile_plan =
      c.chunk_tokens > 0
          ? TilePlan{c.chunk_tokens,
                     std::max(1, (max_encoded + c.chunk_tokens - 1) / c.chunk_tokens)}
          : PlanTileDecode(shape, sm_count);
  DeviceBuffer<uint8_t> workspace(TileDecodeWorkspaceBytes(shape, tile_plan));
  const TileDecodeInputs inputs{d_queries.get(), d_ktiles.get(), d_vtiles.get(), d_rk.get(),
                                d_rv.get(),      d_enc.get(),    d_res.get(),    d_out.get()};
  const TileDecodeDebug debug{d_kdepths.get(), d_vdepths.get(), d_weights.get(), nullptr};
  CUDA_OK(TileDecodeAttention(shape, inputs, codec_tables, tile::MakeTileCentroids(tree), policy,
                              tile_plan, workspace.get(), nullptr, debug));
  CUDA_OK(cudaDeviceSynchronize());

  const auto out = d_out.Download(queries.size());
  const auto kdepths = d_kdepths.Download(static_cast<size_t>(batch) * hkv * groups);
  const auto vdepths = d_vdepths.Download(static_cast<size_t>(batch) * hkv * max_tiles);
  const auto weights = d_weights.Download(static_cast<size_t>(batch) * hkv * max_tiles);
  const codec::ReaderAllocators allocators(plan, tree.distortions());
  codec::AllocatorScratch scratch;
  int64_t value_blocks = 0, same_as_cpu = 0;
  for (int b = 0; b < batch; ++b) {
    const auto& chosen = cpu_depths[static_cast<size_t>(b)];
    const int tiles = (encoded_lens[static_cast<size_t>(b)] + 15) / 16;
    for (int h = 0; h < hkv; ++h) {
      const size_t row = static_cast<size_t>(b) * hkv + h;
      for (int g = 0; g < groups; ++g) {
        ASSERT_EQ(kdepths[row * groups + g], chosen.key_groups[static_cast<size_t>(h * groups + g)])
            << "key group depth, sequence " << b << " head " << h << " group " << g;
      }
      const std::vector<double> w(weights.begin() + row * max_tiles,
                                  weights.begin() + row * max_tiles + tiles);
      std::vector<uint8_t> want(w.size());
      codec::ChooseValueBlockDepths(plan, allocators, w, want, scratch);
      for (int j = 0; j < tiles; ++j) {
        ASSERT_EQ(vdepths[row * max_tiles + j], want[static_cast<size_t>(j)])
            << "value block depth, sequence " << b << " head " << h << " block " << j;
        ++value_blocks;
        same_as_cpu +=
            vdepths[row * max_tiles + j] == chosen.value_blocks[static_cast<size_t>(h * tiles + j)];
      }
    }
    const size_t offset = static_cast<size_t>(b) * hq * d;
    const std::vector<float> cpu(cpu_out.begin() + offset, cpu_out.begin() + offset + hq * d);
    for (size_t i = 0; i < cpu.size(); ++i) ASSERT_TRUE(std::isfinite(out[offset + i])) << i;
    EXPECT_LT(MaxHeadError(out, cpu, offset, hq, d), 2e-2) << "sequence " << b;
  }
  if (value_blocks > 0) {
    // Weights from f16-MMA logits differ from the CPU's in the last bits: nearly every block
    // still lands on the CPU's depth.
    EXPECT_GE(static_cast<double>(same_as_cpu) / value_blocks, 0.95);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TileKernelTest,
    ::testing::Values(
        // The go/no-go model's heads, one sequence with a residual window (partial tile).
        TileCase{32, 8, 128, {700}, true, 2.0, 0, 0, 0},
        // Ragged batch, tokens not a multiple of 16, a residual-only sequence, several chunks.
        TileCase{8, 2, 64, {1000, 37, 1800}, true, 2.0, 0, 0, 512},
        // No window: every token encoded, partial last tile read from the planes.
        TileCase{8, 2, 64, {1000, 513}, false, 3.0, 0, 0, 512},
        // Deep and shallow mixes: R_K 6 / R_V 2 and R_K 1.5 / R_V 4.5 (depths 1..8 both sides).
        TileCase{16, 2, 128, {2100}, true, 4.0, 6.0, 2.0, 0},
        TileCase{16, 2, 128, {2100, 300}, false, 3.0, 1.5, 4.5, 1024},
        // GQA group 8 and group 1.
        TileCase{8, 1, 64, {1500}, true, 1.5, 0, 0, 512},
        TileCase{4, 4, 128, {640}, false, 7.0, 0, 0, 512}),
    [](const ::testing::TestParamInfo<TileCase>& param_info) { return param_info.param.Name(); });

TEST(TileAttentionTest, LauncherRefusesBadInputs) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const TileDecodeShape shape{1, 8, 2, 64, 8, 512, 0};
  const TilePlan plan = PlanTileDecode(shape, 132);
  DeviceBuffer<uint8_t> workspace(TileDecodeWorkspaceBytes(shape, plan));
  const codec::LloydTree tree(8);
  // Null inputs, and a plan whose chunks do not cover the tokens.
  EXPECT_EQ(
      TileDecodeAttention(shape, TileDecodeInputs{}, ReadKvCodec{}, tile::MakeTileCentroids(tree),
                          ReadKvReadPolicy{}, plan, workspace.get(), nullptr),
      cudaErrorInvalidValue);
  TileDecodeShape longer = shape;
  longer.max_encoded_tokens = 4096;
  EXPECT_EQ(
      TileDecodeAttention(longer, TileDecodeInputs{}, ReadKvCodec{}, tile::MakeTileCentroids(tree),
                          ReadKvReadPolicy{}, TilePlan{512, 1}, workspace.get(), nullptr),
      cudaErrorInvalidValue);
}

}  // namespace
}  // namespace readkv::cuda
