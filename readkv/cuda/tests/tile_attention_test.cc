// The GPU tile reader (tile_attention.h) against the CPU tile reader (codec::TileAttend) on the
// same caches: ragged sequences of synthetic K/V, with and without the residual window, depth
// mixes from 1 to 8 planes. Skips cleanly without a GPU.
//
// What must hold: the Key group depths equal the CPU's (the weights are bit-identical); the
// Value block depths equal the CPU Threshold allocator's on the GPU's own block weights; every
// output is finite and within tolerance of the CPU output (f16 folded queries and
// probabilities on the tensor cores: ~1e-3 relative, plus the quantisation noise of any Value
// block whose depth differs from the CPU's choice on its float weights). With outlier lists
// (planted 10-sigma K and V elements that change the output), the GPU with lists matches the CPU
// with lists, the GPU without them the CPU without them, and the two differ.
#include "readkv/cuda/tile_attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
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
#include "readkv/cuda/attention_bench.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_centroids.h"
#include "readkv/cuda/tile_outlier_lists.h"
#include "test_buffers.h"
#include "tile_read_sums.h"

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
  int value_window = 0;  // the reader plan's Value window; nonzero: the GPU's chunk is it
  bool byte_keys = false;  // keys as uniform bytes (needs key bits 8)
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
    text += "_c" + std::to_string(chunk_tokens);
    if (value_window > 0) text += "_w" + std::to_string(value_window);
    return byte_keys ? text + "_kbytes" : text;
  }
};

// The GPU's tile inputs in tile_attention.h's layout, packed from the CPU caches: the key and
// value pools under a page table that is not the identity (the sequences' pages in reverse
// order, one spare page that the unused entries name), every byte the stores do not fill
// poisoned (0xFF: tiles past a sequence's tokens in its last page, the spare page), and the BF16
// residual windows.
struct HostTiles {
  std::vector<uint8_t> key_tiles, value_tiles;  // [num_pages][H_kv][16][d / 16][W][32]
  std::vector<int32_t> page_table;              // [B][max_pages]
  std::vector<uint16_t> residual_k, residual_v;
  std::vector<int32_t> encoded_lens, residual_lens;
};

HostTiles PackTiles(const std::vector<std::unique_ptr<codec::LayerKvCache>>& caches,
                    const TileDecodeShape& shape) {
  const int d = shape.head_dim, hkv = shape.heads_kv, W = shape.store_bits, groups = d / 16;
  const int max_residual = shape.max_residual_tokens, max_pages = shape.max_pages;
  const size_t tile_bytes = static_cast<size_t>(groups) * W * 32;
  int owned = 0;
  for (const auto& cache : caches) {
    const auto& rk = dynamic_cast<const codec::ReadKvLayerCache&>(*cache);
    owned += static_cast<int>((rk.encoded_tokens() + kPageTokens - 1) / kPageTokens);
  }
  const int spare = owned;  // the last page: never owned
  HostTiles t;
  t.page_table.assign(caches.size() * static_cast<size_t>(max_pages), spare);
  t.key_tiles.assign(static_cast<size_t>(owned + 1) * hkv * 16 * tile_bytes, 0xFF);
  t.value_tiles.assign(t.key_tiles.size(), 0xFF);
  t.residual_k.assign(caches.size() * hkv * max_residual * d, 0);
  t.residual_v.assign(t.residual_k.size(), 0);
  for (size_t b = 0; b < caches.size(); ++b) {
    const auto& cache = dynamic_cast<const codec::ReadKvLayerCache&>(*caches[b]);
    const codec::TileLayerView view = cache.tile_view();
    t.encoded_lens.push_back(static_cast<int32_t>(view.encoded_tokens));
    t.residual_lens.push_back(static_cast<int32_t>(view.residual_tokens));
    for (int64_t j = 0; j < (view.encoded_tokens + kPageTokens - 1) / kPageTokens; ++j) {
      t.page_table[b * max_pages + static_cast<size_t>(j)] = --owned;  // reverse order
    }
    for (int h = 0; h < hkv; ++h) {
      const codec::TilePlaneStore& store = view.stores[static_cast<size_t>(h)];
      const size_t row = b * hkv + h;
      for (int64_t r = 0; r < store.token_tiles(); ++r) {
        const auto page =
            static_cast<size_t>(t.page_table[b * max_pages + static_cast<size_t>(r / 16)]);
        const size_t at = ((page * hkv + h) * 16 + static_cast<size_t>(r % 16)) * tile_bytes;
        std::memcpy(t.key_tiles.data() + at, store.KeyTile(r, 0), tile_bytes);
        std::memcpy(t.value_tiles.data() + at, store.ValueTile(r, 0), tile_bytes);
      }
      const auto& rk = view.residual_keys[static_cast<size_t>(h)];
      const auto& rv = view.residual_values[static_cast<size_t>(h)];
      std::copy(rk.begin(), rk.end(), t.residual_k.begin() + row * max_residual * d);
      std::copy(rv.begin(), rv.end(), t.residual_v.begin() + row * max_residual * d);
    }
  }
  return t;
}
// The CPU side of a case: the caches (ReadKV, tile reader, outlier lists when a cap is given),
// the queries, the CPU tile reader's outputs and depths.
struct CpuSide {
  std::shared_ptr<const codec::Calibration> calibration;
  std::vector<std::unique_ptr<codec::LayerKvCache>> caches;
  std::vector<float> queries, out;
  std::vector<codec::TileDepths> depths;
  int max_encoded = 0, max_residual = 0;
  const codec::ReadKvLayerCache& Cache(size_t b) const {
    return dynamic_cast<const codec::ReadKvLayerCache&>(*caches[b]);
  }
};

// Builds the case's caches from seeded synthetic layers; `plant(calibration, layer)` may change
// a layer's keys and values before they are encoded.
using Plant = std::function<void(const codec::Calibration&, codec::SyntheticLayer&)>;
CpuSide MakeCpuSide(const TileCase& c, int outlier_cap, const Plant& plant = {}) {
  const int d = c.head_dim, hq = c.heads_q;
  const codec::LayerGeometry geometry{hq, c.heads_kv, d};
  codec::SyntheticConfig data;
  data.geometry = geometry;
  data.seed = 0x7113 + static_cast<uint64_t>(d);
  CpuSide cpu;
  cpu.calibration =
      std::make_shared<const codec::Calibration>(codec::MakeSyntheticCalibration(data, 2048));
  codec::LayerCacheConfig config;
  config.backend = codec::KvBackend::kReadKv;
  config.geometry = geometry;
  config.calibration = cpu.calibration;
  config.store_bits = 8;
  config.policy = {codec::ReaderKind::kTile, c.read_bits, c.key_bits, c.value_bits};
  config.policy.value_window_tokens = c.value_window;
  config.residual_window = c.residual_window;
  config.outliers = {outlier_cap, 0.0f};
  config.byte_keys = c.byte_keys;
  cpu.depths.resize(c.lens.size());
  for (size_t b = 0; b < c.lens.size(); ++b) {
    data.tokens = c.lens[b];
    data.seed = 0x7113 * 31 + static_cast<uint64_t>(b);
    codec::SyntheticLayer layer = codec::MakeSyntheticLayer(data);
    if (plant) plant(*cpu.calibration, layer);
    cpu.caches.push_back(codec::MakeLayerKvCache(config));
    cpu.caches.back()->AppendTokens(layer.keys, layer.values);
    const codec::ReadKvLayerCache& cache = cpu.Cache(b);
    std::vector<float> out(static_cast<size_t>(hq) * d);
    codec::TileAttend(cache.tile_view(), cache.plan(), layer.queries, out, &cpu.depths[b]);
    cpu.queries.insert(cpu.queries.end(), layer.queries.begin(), layer.queries.end());
    cpu.out.insert(cpu.out.end(), out.begin(), out.end());
    cpu.max_encoded = std::max(cpu.max_encoded, static_cast<int>(cache.encoded_tokens()));
    cpu.max_residual = std::max(cpu.max_residual, static_cast<int>(cache.residual_tokens()));
  }
  return cpu;
}

// What one GPU call gave: outputs, depths and the Value block weights (TileDecodeDebug).
struct GpuRun {
  std::vector<float> out;
  std::vector<uint8_t> key_depths, value_depths;
  std::vector<double> weights;
  std::vector<unsigned long long> totals;  // TileDecodeDebug::totals: logical bits, payload bytes
  unsigned long long outlier_entries = 0;  // TileDecodeDebug::outlier_entries
  bool one_pass = false;                   // the plan the call ran (TilePlan::one_pass)
  std::vector<TilePhaseClocks> phases;     // TileDecodeDebug::phases, a block's each (zeroed)
};

// The caches' outlier page blocks under PackTiles' page table (the same table RunOnGpu uploads),
// the spare page's blocks poisoned (0xFF: no tile the kernels read is there).
TileOutlierPages PagesOf(const CpuSide& cpu, const TileDecodeShape& shape) {
  const HostTiles host = PackTiles(cpu.caches, shape);
  std::vector<const codec::OutlierStore*> stores;
  std::vector<int32_t> encoded;
  for (size_t b = 0; b < cpu.caches.size(); ++b) {
    encoded.push_back(static_cast<int32_t>(cpu.Cache(b).encoded_tokens()));
    for (int h = 0; h < shape.heads_kv; ++h) stores.push_back(&cpu.Cache(b).outliers(h));
  }
  const size_t page_bytes = static_cast<size_t>(shape.heads_kv) * 16 * (shape.head_dim / 16) *
                            shape.store_bits * 32;
  const int num_pages = static_cast<int>(host.key_tiles.size() / page_bytes);
  TileOutlierPages pages = BuildTileOutlierPages(stores, encoded, shape.heads_kv, host.page_table,
                                                 shape.max_pages, num_pages);
  const auto spare = static_cast<size_t>(num_pages - 1) * shape.heads_kv * kPageOutlierBlockWords;
  std::fill(pages.key_blocks.begin() + static_cast<std::ptrdiff_t>(spare), pages.key_blocks.end(),
            0xFFFFFFFFu);
  std::fill(pages.value_blocks.begin() + static_cast<std::ptrdiff_t>(spare),
            pages.value_blocks.end(), 0xFFFFFFFFu);
  return pages;
}

// TileDecodeAttention over the CPU side's caches, with `lists` (the caches' outlier page blocks,
// PagesOf) or none, the chunk of the case (0: PlanTileDecode's) or its Value window.
// one_pass: the plan asks for TileWindowPass (the same call in one launch; byte keys in windows
// whose rows fit a cluster, OnePassFits).
void RunOnGpu(const CpuSide& cpu, const TileDecodeShape& shape, const TileCase& c,
              const TileOutlierPages* lists, GpuRun& run, bool one_pass = false) {
  const int chunk_tokens = c.chunk_tokens;
  const int d = shape.head_dim, hkv = shape.heads_kv, W = shape.store_bits, groups = d / 16;
  const int batch = shape.batch, max_tiles = shape.max_token_tiles();
  const HostTiles host = PackTiles(cpu.caches, shape);
  if (lists != nullptr) {
    ASSERT_EQ(lists->page_table, host.page_table);
  }
  const std::vector<float> key_signs = TransformSigns(*cpu.calibration, hkv, d, /*keys=*/true);
  const std::vector<float> value_signs = TransformSigns(*cpu.calibration, hkv, d, /*keys=*/false);
  const codec::LloydTree tree(W);
  const codec::DepthAllocator step1(tree.distortions(), 1, 1);  // the tile reader's K and V step
  std::vector<double> increments;
  for (int k = 0; k < step1.steps_per_object(); ++k) increments.push_back(step1.increment(k));
  const auto layer0 = [&](const std::vector<float>& all) {
    return std::vector<float>(all.begin(), all.begin() + static_cast<size_t>(hkv) * d);
  };
  const codec::Calibration& cal = *cpu.calibration;
  DeviceBuffer<float> kmean(layer0(cal.key_mean)), kstd(layer0(cal.key_std));
  DeviceBuffer<float> vmean(layer0(cal.value_mean)), vstd(layer0(cal.value_std));
  DeviceBuffer<float> ksigns(key_signs), vsigns(value_signs);
  DeviceBuffer<double> inc(increments);
  const ReadKvCodec codec_tables{W,          kmean.get(),  kstd.get(),   vmean.get(),
                                 vstd.get(), ksigns.get(), vsigns.get(), nullptr};
  const codec::ReaderPlan& plan = cpu.Cache(0).plan();
  const ReadKvReadPolicy policy{plan.key_bits, plan.value_bits, inc.get(), W - 1, inc.get(), W - 1};
  const std::vector<float>& queries = cpu.queries;
  DeviceBuffer<float> d_queries(queries);
  DeviceBuffer<uint8_t> d_ktiles(host.key_tiles), d_vtiles(host.value_tiles);
  DeviceBuffer<int32_t> d_pages(host.page_table);
  DeviceBuffer<uint16_t> d_rk(host.residual_k), d_rv(host.residual_v);
  DeviceBuffer<int32_t> d_enc(host.encoded_lens), d_res(host.residual_lens);
  DeviceBuffer<float> d_out(queries.size());
  CUDA_OK(cudaMemset(d_out.get(), 0xff, queries.size() * sizeof(float)));  // NaN poison
  DeviceBuffer<uint8_t> d_kdepths(static_cast<size_t>(batch) * hkv * groups);
  DeviceBuffer<uint8_t> d_vdepths(static_cast<size_t>(batch) * hkv * max_tiles);
  DeviceBuffer<double> d_weights(static_cast<size_t>(batch) * hkv * max_tiles);
  const std::vector<uint32_t> no_lists;
  DeviceBuffer<uint32_t> d_klists(lists ? lists->key_blocks : no_lists);
  DeviceBuffer<uint32_t> d_vlists(lists ? lists->value_blocks : no_lists);

  int sm_count = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  TilePlan tile_plan =
      c.value_window > 0 ? PlanTileDecode(shape, sm_count, c.value_window)
      : chunk_tokens > 0
          ? TilePlan{chunk_tokens,
                     std::max(1, (shape.max_encoded_tokens + chunk_tokens - 1) / chunk_tokens)}
          : PlanTileDecode(shape, sm_count);
  tile_plan.one_pass = one_pass;
  run.one_pass = tile_plan.one_pass;
  DeviceBuffer<uint8_t> workspace(TileDecodeWorkspaceBytes(shape, tile_plan));
  TileDecodeInputs inputs{d_queries.get(), d_ktiles.get(), d_vtiles.get(),
                          d_pages.get(),   d_rk.get(),     d_rv.get(),
                          d_enc.get(),     d_res.get(),    d_out.get()};
  if (lists != nullptr) {
    inputs.key_outlier_pages = d_klists.get();
    inputs.value_outlier_pages = d_vlists.get();
  }
  DeviceBuffer<unsigned long long> d_totals(std::vector<unsigned long long>{0, 0});
  DeviceBuffer<unsigned long long> d_entries(std::vector<unsigned long long>{0});
  TileDecodeDebug debug{d_kdepths.get(), d_vdepths.get(), d_weights.get(), nullptr};
  debug.totals = d_totals.get();
  debug.outlier_entries = d_entries.get();
  const size_t blocks = static_cast<size_t>(tile_plan.chunks) * hkv * batch;
  DeviceBuffer<TilePhaseClocks> d_phases(std::vector<TilePhaseClocks>(blocks, TilePhaseClocks{}));
  debug.phases = d_phases.get();
  if (shape.byte_keys) {  // byte keys are read whole: the same call with fewer key bits is refused
    ReadKvReadPolicy fewer = policy;
    fewer.key_bits = 7.0;
    EXPECT_EQ(TileDecodeAttention(shape, inputs, codec_tables, tile::MakeTileCentroids(tree),
                                  fewer, tile_plan, workspace.get(), nullptr, debug),
              cudaErrorInvalidValue);
  }
  CUDA_OK(TileDecodeAttention(shape, inputs, codec_tables, tile::MakeTileCentroids(tree), policy,
                              tile_plan, workspace.get(), nullptr, debug));
  CUDA_OK(cudaDeviceSynchronize());
  run.out = d_out.Download(queries.size());
  run.key_depths = d_kdepths.Download(static_cast<size_t>(batch) * hkv * groups);
  run.value_depths = d_vdepths.Download(static_cast<size_t>(batch) * hkv * max_tiles);
  run.weights = d_weights.Download(static_cast<size_t>(batch) * hkv * max_tiles);
  run.totals = d_totals.Download(2);
  run.outlier_entries = d_entries.Download(1)[0];
  run.phases = d_phases.Download(blocks);
}

TileDecodeShape ShapeOf(const TileCase& c, const CpuSide& cpu) {
  return TileDecodeShape{static_cast<int>(c.lens.size()),
                         c.heads_q,
                         c.heads_kv,
                         c.head_dim,
                         8,
                         cpu.max_encoded,
                         cpu.max_residual,
                         (cpu.max_encoded + kPageTokens - 1) / kPageTokens,
                         c.byte_keys};
}

// Whether a case can run in one pass (TilePlan::one_pass): byte keys in windows, a row's windows
// in one cluster.
bool OnePassFits(const TileCase& c, const CpuSide& cpu) {
  return c.byte_keys && c.value_window > 0 &&
         (cpu.max_encoded + c.value_window - 1) / c.value_window <= kTileMaxClusterChunks;
}

class TileKernelTest : public ::testing::TestWithParam<TileCase> {};

TEST_P(TileKernelTest, MatchesTheCpuTileReader) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const TileCase c = GetParam();
  const int d = c.head_dim, hkv = c.heads_kv, hq = c.heads_q, groups = d / 16;
  const int batch = static_cast<int>(c.lens.size());
  const CpuSide cpu = MakeCpuSide(c, 0);
  const TileDecodeShape shape = ShapeOf(c, cpu);
  const int max_tiles = shape.max_token_tiles();
  GpuRun gpu;
  ASSERT_NO_FATAL_FAILURE(RunOnGpu(cpu, shape, c, nullptr, gpu));

  const codec::ReaderPlan& plan = cpu.Cache(0).plan();
  const codec::LloydTree tree(8);
  const codec::ReaderAllocators allocators(plan, tree.distortions());
  codec::AllocatorScratch scratch;
  int64_t value_blocks = 0, same_as_cpu = 0;
  tile::ReadSums reads;  // what the kernels' totals must be, from their own depths
  for (int b = 0; b < batch; ++b) {
    const auto& chosen = cpu.depths[static_cast<size_t>(b)];
    const auto encoded = static_cast<int>(cpu.Cache(static_cast<size_t>(b)).encoded_tokens());
    const int tiles = (encoded + 15) / 16;
    for (int h = 0; h < hkv; ++h) {
      const size_t row = static_cast<size_t>(b) * hkv + h;
      long long steps = 0;
      for (int g = 0; g < groups; ++g) {
        ASSERT_EQ(gpu.key_depths[row * groups + g],
                  chosen.key_groups[static_cast<size_t>(h * groups + g)])
            << "key group depth, sequence " << b << " head " << h << " group " << g;
        steps += gpu.key_depths[row * groups + g];
      }
      reads.bits += tile::KeyRowReads(encoded, steps).bits;
      reads.bytes += tile::KeyRowReads(encoded, steps).bytes;
      const std::vector<double> w(gpu.weights.begin() + row * max_tiles,
                                  gpu.weights.begin() + row * max_tiles + tiles);
      std::vector<uint8_t> want(w.size());
      codec::ChooseValueBlockDepths(plan, allocators, w, want, scratch);
      for (int j = 0; j < tiles; ++j) {
        ASSERT_EQ(gpu.value_depths[row * max_tiles + j], want[static_cast<size_t>(j)])
            << "value block depth, sequence " << b << " head " << h << " block " << j;
        const tile::ReadSums v =
            tile::ValueTileReads(encoded, j, gpu.value_depths[row * max_tiles + j], d);
        reads.bits += v.bits;
        reads.bytes += v.bytes;
        ++value_blocks;
        same_as_cpu += gpu.value_depths[row * max_tiles + j] ==
                       chosen.value_blocks[static_cast<size_t>(h * tiles + j)];
      }
    }
    const size_t offset = static_cast<size_t>(b) * hq * d;
    const std::vector<float> want(cpu.out.begin() + offset, cpu.out.begin() + offset + hq * d);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(std::isfinite(gpu.out[offset + i])) << i;
    EXPECT_LT(MaxHeadError(gpu.out, want, offset, hq, d), 2e-2) << "sequence " << b;
  }
  EXPECT_EQ(static_cast<long long>(gpu.totals[0]), reads.bits);
  EXPECT_EQ(static_cast<long long>(gpu.totals[1]), reads.bytes);
  if (value_blocks > 0) {
    // Weights from f16-MMA logits differ from the CPU's in the last bits: nearly every block
    // still lands on the CPU's depth.
    EXPECT_GE(static_cast<double>(same_as_cpu) / value_blocks, 0.95);
  }
  // One pass is the two launches' arithmetic in the same order (tile_window_pass.cuh): the same
  // call in one launch gives the same bits.
  EXPECT_FALSE(gpu.one_pass);  // never PlanTileDecode's choice
  for (const TilePhaseClocks& p : gpu.phases) {  // the timeline is one pass's alone
    ASSERT_EQ(p.clock[kStampStart], 0u);
    ASSERT_EQ(p.global_end_ns, 0u);
    for (const unsigned long long end : p.values_warp_end) ASSERT_EQ(end, 0u);
  }
  if (OnePassFits(c, cpu)) {
    GpuRun one;
    ASSERT_NO_FATAL_FAILURE(RunOnGpu(cpu, shape, c, nullptr, one, /*one_pass=*/true));
    ASSERT_TRUE(one.one_pass);
    // Every block stamped its timeline, in order, and each of its warps its Values end
    // (SummarisePhases checks each stamp).
    EXPECT_NO_THROW(SummarisePhases(one.phases, 1));
    EXPECT_EQ(one.value_depths, gpu.value_depths);
    EXPECT_EQ(one.weights, gpu.weights);
    EXPECT_EQ(one.totals, gpu.totals);
    ASSERT_EQ(one.out.size(), gpu.out.size());
    for (size_t i = 0; i < gpu.out.size(); ++i) {
      ASSERT_EQ(one.out[i], gpu.out[i]) << "output " << i << ", one pass against two launches";
    }
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
        TileCase{4, 4, 128, {640}, false, 7.0, 0, 0, 512},
        // Value windows (TileWindowValues): the served split 8:2 without a residual window; a
        // ragged batch with one; d 128 in windows of 1024; a partial last window of 2048;
        // group 8; a residual-only sequence whose blocks all arrive empty.
        TileCase{8, 2, 64, {1000, 513}, false, 5.0, 8.0, 2.0, 0, 512},
        TileCase{8, 2, 64, {1000, 37, 1800}, true, 2.0, 0, 0, 0, 512},
        TileCase{16, 2, 128, {2100, 300}, false, 3.0, 1.5, 4.5, 0, 1024},
        TileCase{8, 2, 64, {4100, 900}, true, 3.0, 0, 0, 0, 2048},
        TileCase{8, 1, 64, {1500}, true, 1.5, 0, 0, 0, 512},
        TileCase{8, 2, 64, {12, 600}, true, 2.0, 0, 0, 0, 512},
        // Byte keys (key bits 8): the served split 8:2 in Value windows of 512 and in one row
        // with a residual window; the go/no-go model's heads at d 128; group 8.
        TileCase{8, 2, 64, {1000, 513}, false, 5.0, 8.0, 2.0, 0, 512, true},
        TileCase{8, 2, 64, {1000, 37, 1800}, true, 5.0, 8.0, 2.0, 512, 0, true},
        TileCase{32, 8, 128, {700}, true, 6.0, 8.0, 4.0, 0, 0, true},
        TileCase{8, 1, 64, {1500}, true, 5.0, 8.0, 2.0, 0, 512, true},
        // Byte keys in windows whose rows fit a cluster, so also in one pass (TileWindowPass):
        // the served split in windows of 1024 over a ragged batch with a residual window and a residual-only sequence; a full
        // cluster of 16 windows of 512 at d 128; group 2 and group 1 in windows of 2048.
        TileCase{8, 2, 64, {3000, 37, 1800, 16}, true, 5.0, 8.0, 2.0, 0, 1024, true},
        TileCase{32, 8, 128, {8192}, true, 4.5, 8.0, 1.0, 0, 512, true},
        TileCase{4, 2, 64, {5000, 2049}, true, 5.0, 8.0, 2.0, 0, 2048, true},
        TileCase{2, 2, 128, {2100}, false, 5.0, 8.0, 2.0, 0, 2048, true}),
    [](const ::testing::TestParamInfo<TileCase>& param_info) { return param_info.param.Name(); });

// Plants outliers in KV head h's keys and values of `tokens`: a Key element of z = +-10 on the
// channel where the head's first query weighs most (|q~_c sigma_c|, the sign of q~_c: the
// token's logit rises by ~6 sigma-weighted units past the clipped code), and Value elements of
// z = -12 and +11 on two channels, so the token's now large probability carries them into the
// output. In the transformed, standardised domain (x_c = mu_c + z sigma_c), as the codec lists
// them.
void PlantOutliers(const codec::Calibration& cal, const std::vector<int>& tokens,
                   codec::SyntheticLayer& layer) {
  const int d = layer.geometry.head_dim, hkv = layer.geometry.heads_kv;
  const int g = layer.geometry.heads_q / hkv;
  std::vector<float> x(static_cast<size_t>(d)), q(x.size());
  for (int h = 0; h < hkv; ++h) {
    const codec::HadamardTransform kt(d, cal.seeds.KeySeed(0, h));
    const codec::HadamardTransform vt(d, cal.seeds.ValueSeed(0, h));
    const auto k_mean = cal.KeyMean(0, h), k_std = cal.KeyStd(0, h);
    const auto v_mean = cal.ValueMean(0, h), v_std = cal.ValueStd(0, h);
    const float* first_query = layer.queries.data() + static_cast<size_t>(h * g * d);
    kt.Forward(std::span<const float>(first_query, x.size()), q);
    int best = 0;
    for (int c = 1; c < d; ++c) {
      if (std::fabs(q[c] * k_std[c]) > std::fabs(q[best] * k_std[best])) best = c;
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      const size_t at = (static_cast<size_t>(tokens[i]) * hkv + h) * d;
      const std::span<float> key(layer.keys.data() + at, x.size());
      const std::span<float> value(layer.values.data() + at, x.size());
      kt.Forward(key, x);
      x[best] = k_mean[best] + (q[best] > 0.0f ? 10.0f : -10.0f) * k_std[best];
      kt.Inverse(x, key);
      vt.Forward(value, x);
      const int c0 = static_cast<int>(7 + 5 * i) % d, c1 = (c0 + 16 + 3) % d;
      x[c0] = v_mean[c0] - 12.0f * v_std[c0];
      x[c1] = v_mean[c1] + 11.0f * v_std[c1];
      vt.Inverse(x, value);
    }
  }
}

// The GPU tile reader with outlier lists against the CPU tile reader with the same lists, on
// caches with planted 10-sigma outliers that change the output. The CPU half (the lists are
// built, the planted outliers matter) runs in every CUDA build; the GPU half skips without a
// device.
TEST(TileAttentionTest, OutlierListsMatchTheCpuReaderAndChangeTheOutput) {
  struct Planted {
    TileCase c;
    std::vector<int> tokens;  // planted in every sequence (encoded tokens)
  };
  const std::vector<Planted> cases = {
      // A residual window (only encoded tokens carry lists), a ragged batch, chunks of 512.
      {TileCase{8, 2, 64, {700, 300}, true, 2.0, 0, 0, 512}, {3, 77, 250}},
      // No window: a planted token in the partial last tile; deep keys, shallow values.
      {TileCase{16, 2, 128, {1000}, false, 3.0, 1.5, 4.5, 512}, {3, 500, 997}},
      // GQA group 8, shallow keys and deep values, PlanTileDecode's chunk.
      {TileCase{8, 1, 64, {600}, false, 4.0, 2.0, 6.0, 0}, {40, 41, 590}},
      // Value windows of 512: the lists in TileWindowValues.
      {TileCase{8, 2, 64, {700, 300}, true, 2.0, 0, 0, 0, 512}, {3, 77, 250}},
      // Byte keys: the Key entries correct against the grid's extreme value (in two launches,
      // and in one pass below).
      {TileCase{8, 2, 64, {700, 300}, true, 5.0, 8.0, 2.0, 0, 512, true}, {3, 77, 250}},
  };
  const bool gpu = QueryDevices().device_count > 0;
  for (const Planted& p : cases) {
    SCOPED_TRACE(p.c.Name());
    const TileCase& c = p.c;
    const int d = c.head_dim, hq = c.heads_q, hkv = c.heads_kv;
    const size_t batch = c.lens.size();
    const CpuSide cpu =
        MakeCpuSide(c, 2, [&](const codec::Calibration& cal, codec::SyntheticLayer& layer) {
          PlantOutliers(cal, p.tokens, layer);
        });
    std::vector<float> cpu_without;  // the same caches read without their lists
    for (size_t b = 0; b < batch; ++b) {
      const codec::ReadKvLayerCache& cache = cpu.Cache(b);
      codec::TileLayerView view = cache.tile_view();
      ASSERT_FALSE(view.outliers.empty());
      view.outliers = {};
      std::vector<float> out(static_cast<size_t>(hq) * d);
      const std::vector<float> q(cpu.queries.begin() + b * hq * d,
                                 cpu.queries.begin() + (b + 1) * hq * d);
      codec::TileAttend(view, cache.plan(), q, out);
      cpu_without.insert(cpu_without.end(), out.begin(), out.end());
    }
    const TileDecodeShape shape = ShapeOf(c, cpu);
    const TileOutlierPages lists = PagesOf(cpu, shape);
    int64_t listed = 0;
    for (size_t b = 0; b < batch; ++b) {
      const int64_t tiles = (cpu.Cache(b).encoded_tokens() + 15) / 16;
      for (int h = 0; h < hkv; ++h) {
        listed += lists.Entries(true, static_cast<int>(b), h, tiles) +
                  lists.Entries(false, static_cast<int>(b), h, tiles);
      }
    }
    // At least the planted K and 2 V entries per token, head and sequence.
    ASSERT_GE(listed, static_cast<int64_t>(3 * p.tokens.size() * batch) * hkv);
    for (size_t b = 0; b < batch; ++b) {
      EXPECT_GT(MaxHeadError(cpu_without, std::vector<float>(cpu.out.begin() + b * hq * d,
                                                             cpu.out.begin() + (b + 1) * hq * d),
                             b * hq * d, hq, d),
                0.1)
          << "sequence " << b << ": the planted outliers must matter";
    }
    if (!gpu) continue;
    GpuRun with, without;
    ASSERT_NO_FATAL_FAILURE(RunOnGpu(cpu, shape, c, &lists, with));
    ASSERT_NO_FATAL_FAILURE(RunOnGpu(cpu, shape, c, nullptr, without));
    // The entries the call's lists hold, as a server's ledgers count them; none without lists.
    EXPECT_EQ(with.outlier_entries, static_cast<unsigned long long>(listed));
    EXPECT_EQ(without.outlier_entries, 0u);
    if (OnePassFits(c, cpu)) {  // the lists read in one pass and in two launches: the same bits
      GpuRun one;
      ASSERT_NO_FATAL_FAILURE(RunOnGpu(cpu, shape, c, &lists, one, /*one_pass=*/true));
      EXPECT_EQ(one.out, with.out);
      EXPECT_EQ(one.outlier_entries, with.outlier_entries);
    }
    for (size_t b = 0; b < batch; ++b) {
      const size_t offset = b * hq * d;
      const std::vector<float> cpu_with(cpu.out.begin() + offset,
                                        cpu.out.begin() + offset + hq * d);
      const std::vector<float> cpu_bare(cpu_without.begin() + offset,
                                        cpu_without.begin() + offset + hq * d);
      for (size_t i = 0; i < cpu_with.size(); ++i) {
        ASSERT_TRUE(std::isfinite(with.out[offset + i])) << i;
      }
      EXPECT_EQ(with.key_depths, without.key_depths);  // Key depths never see the lists
      EXPECT_LT(MaxHeadError(with.out, cpu_with, offset, hq, d), 2e-2) << "sequence " << b;
      // Without lists a clipped planted outlier dominates its row, and a Value tile whose depth
      // the GPU chose from f16-MMA weights differently from the CPU moves the output by a few
      // 1e-2 (0.049 on the H200, 2026-12-05, sequence 1 of the first case): the bare outputs
      // agree loosely; the lists' own match is the 2e-2 above.
      EXPECT_LT(MaxHeadError(without.out, cpu_bare, offset, hq, d), 0.1) << "sequence " << b;
      EXPECT_GT(MaxHeadError(without.out, cpu_with, offset, hq, d), 2e-2)
          << "sequence " << b << ": without its lists the GPU must miss the planted outliers";
    }
  }
  if (!gpu) GTEST_SKIP() << "no CUDA device (the CPU half ran): " << QueryDevices().reason;
}

// A one-pass plan's residency (how many of its clusters the device holds at once) is a query,
// not a launch: refused for a plan that is not one pass, at least one cluster at the served
// shape (16 rows of 16 windows of 1024).
TEST(TileAttentionTest, OnePassResidencyIsAQuery) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const TileDecodeShape shape{16, 8, 2, 64, 8, 16384, 0, 64, /*byte_keys=*/true};
  int sm_count = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  TilePlan plan = PlanTileDecode(shape, sm_count, 1024);
  int clusters = -1;
  EXPECT_EQ(TileOnePassResidentClusters(shape, plan, &clusters), cudaErrorInvalidValue);
  plan.one_pass = true;
  CUDA_OK(TileOnePassResidentClusters(shape, plan, &clusters));
  EXPECT_GE(clusters, 1);
  EXPECT_LE(16 * clusters, 32 * sm_count);  // an SM holds at most 32 blocks
  // On an H100 or H200 (132 SMs) the served call's 16 x 2 rows are resident at once: 35
  // clusters at five blocks an SM, where four gave 28 and a second wave (tile_window_pass.cuh).
  if (sm_count >= 132) {
    EXPECT_GE(clusters, shape.batch * shape.heads_kv);
  }
  EXPECT_EQ(TileOnePassResidentClusters(shape, plan, nullptr), cudaErrorInvalidValue);
}

// kvgate serve's choice of one pass: only where the plan allows it, and only while the device
// holds every row's cluster at once (TileOnePassResidentClusters), so a call never runs in
// waves; a cached answer gives the same choice again.
TEST(TileAttentionTest, ChoosesOnePassOnlyWhereEveryRowIsResident) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  int sm_count = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  TileDecodeShape shape{16, 8, 2, 64, 8, 16384, 0, 64, /*byte_keys=*/true};
  const TilePlan plan = PlanTileDecode(shape, sm_count, 1024);
  TilePlan asked = plan;
  asked.one_pass = true;
  int resident = 0;
  CUDA_OK(TileOnePassResidentClusters(shape, asked, &resident));
  for (const int batch : {1, 16, 64, 256}) {  // 2 to 512 rows against the same residency
    shape.batch = batch;
    for (int again = 0; again < 2; ++again) {  // the second answer is the cached one
      bool one_pass = !(resident >= 2 * batch);
      CUDA_OK(ChooseTileOnePass(shape, plan, &one_pass));
      EXPECT_EQ(one_pass, resident >= 2 * batch) << "batch " << batch << ", resident " << resident;
    }
  }
  // The served call (32 rows) on an H100 or H200 (132 SMs): one pass.
  shape.batch = 16;
  bool served = false;
  CUDA_OK(ChooseTileOnePass(shape, plan, &served));
  if (sm_count >= 132) {
    EXPECT_TRUE(served);
  }
  // Plans that do not allow one pass: no window, the tree's keys, more chunks than a cluster.
  bool one_pass = true;
  CUDA_OK(ChooseTileOnePass(shape, PlanTileDecode(shape, sm_count), &one_pass));
  EXPECT_FALSE(one_pass);
  TileDecodeShape tree_keys = shape;
  tree_keys.byte_keys = false;
  one_pass = true;
  CUDA_OK(ChooseTileOnePass(tree_keys, PlanTileDecode(tree_keys, sm_count, 1024), &one_pass));
  EXPECT_FALSE(one_pass);
  TileDecodeShape longer = shape;
  longer.max_encoded_tokens = 32768;  // 32 windows of 1024
  longer.max_pages = 128;
  one_pass = true;
  CUDA_OK(ChooseTileOnePass(longer, PlanTileDecode(longer, sm_count, 1024), &one_pass));
  EXPECT_FALSE(one_pass);
  EXPECT_EQ(ChooseTileOnePass(shape, plan, nullptr), cudaErrorInvalidValue);
}

TEST(TileAttentionTest, LauncherRefusesBadInputs) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const TileDecodeShape shape{1, 8, 2, 64, 8, 512, 0, 2};
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
  longer.max_pages = 16;  // the shape is sound: only the plan is refused
  EXPECT_EQ(
      TileDecodeAttention(longer, TileDecodeInputs{}, ReadKvCodec{}, tile::MakeTileCentroids(tree),
                          ReadKvReadPolicy{}, TilePlan{512, 1}, workspace.get(), nullptr),
      cudaErrorInvalidValue);
}

}  // namespace
}  // namespace readkv::cuda
