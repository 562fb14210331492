// GPU-vs-CPU consistency of the ReadKV append and decode-attention kernels (readkv/cuda) against
// the codec's CPU reference (readkv/codec), over a grid of shapes with ragged paged sequences,
// fresh random inputs and poisoned outputs, under every kernel variant. Skips cleanly without a
// GPU.
//
// What must hold: ReadKvAppend writes exactly the codec's bit planes; the Key depths equal the
// CPU reader's for the same queries; the Value depths equal the CPU Threshold allocator's on the
// same importance weights; the device ledgers equal the host's for the chosen depths; two calls
// on the same inputs agree bit for bit; every output is finite and within tolerance of the CPU
// backend's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "decode_test_support.h"
#include "test_buffers.h"
#include "readkv/codec/allocator.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/readers.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/transform.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"

namespace readkv::cuda {
namespace {

using namespace kernel_test;  // NOLINT(build/namespaces): the tests' shared fixtures

// The CPU reference of a case: one codec cache per sequence (constrained reader, no residual
// window: every token encoded), holding the sequence's K/V.
struct CpuReference {
  codec::LayerCacheConfig config;
  std::vector<std::unique_ptr<codec::LayerKvCache>> caches;
};

CpuReference MakeCpuReference(const Case& c, const Workload& w) {
  CpuReference r;
  r.config.backend = codec::KvBackend::kReadKv;
  r.config.geometry = w.geometry;
  r.config.calibration = w.calibration;
  r.config.store_bits = c.store_bits;
  r.config.policy =
      codec::ReadPolicy{codec::ReaderKind::kConstrained, c.read_bits, c.key_bits, c.value_bits};
  r.config.residual_window = false;
  for (const auto& layer : w.layers) {
    r.caches.push_back(codec::MakeLayerKvCache(r.config));
    r.caches.back()->AppendTokens(layer.keys, layer.values);
  }
  return r;
}

std::vector<float> Centroids(const codec::LloydTree& tree) {
  std::vector<float> centroids;
  for (int t = 0; t <= tree.store_bits(); ++t) {
    for (float x : tree.centroids(t)) centroids.push_back(x);
  }
  return centroids;
}

// Leaf boundaries sorted: the thresholds of every depth merged.
std::vector<float> SortedBoundaries(const codec::LloydTree& tree) {
  std::vector<float> boundaries;
  for (int t = 1; t <= tree.store_bits(); ++t) {
    for (float x : tree.thresholds(t)) boundaries.push_back(x);
  }
  std::sort(boundaries.begin(), boundaries.end());
  return boundaries;
}

std::vector<double> Increments(const codec::DepthAllocator& allocator) {
  std::vector<double> increments;
  for (int k = 0; k < allocator.steps_per_object(); ++k) {
    increments.push_back(allocator.increment(k));
  }
  return increments;
}

// The codec's tables on the GPU (layer 0) and the constrained reader's depth increments.
struct GpuCodec {
  GpuCodec(const Workload& w, const codec::LloydTree& tree)
      : store_bits(tree.store_bits()),
        key_inc(Increments(codec::DepthAllocator(tree.distortions(), 1, 1))),
        value_inc(Increments(codec::DepthAllocator(tree.distortions(), 1, 2))),
        kmean(LayerZero(w.calibration->key_mean, w.geometry.heads_kv, w.geometry.head_dim)),
        kstd(LayerZero(w.calibration->key_std, w.geometry.heads_kv, w.geometry.head_dim)),
        vmean(LayerZero(w.calibration->value_mean, w.geometry.heads_kv, w.geometry.head_dim)),
        vstd(LayerZero(w.calibration->value_std, w.geometry.heads_kv, w.geometry.head_dim)),
        ksigns(TransformSigns(*w.calibration, w.geometry.heads_kv, w.geometry.head_dim, true)),
        vsigns(TransformSigns(*w.calibration, w.geometry.heads_kv, w.geometry.head_dim, false)),
        centroids(Centroids(tree)),
        boundaries(SortedBoundaries(tree)),
        kinc(key_inc),
        vinc(value_inc) {}

  ReadKvCodec tables() const {
    return ReadKvCodec{store_bits,   kmean.get(),  kstd.get(),      vmean.get(),
                       vstd.get(),   ksigns.get(), vsigns.get(),    centroids.get(),
                       boundaries.get()};
  }
  ReadKvReadPolicy policy(const Case& c) const {
    return ReadKvReadPolicy{c.KeyBits(),  c.ValueBits(), kinc.get(),
                            static_cast<int>(key_inc.size()), vinc.get(),
                            static_cast<int>(value_inc.size())};
  }

  int store_bits;
  std::vector<double> key_inc, value_inc;
  DeviceBuffer<float> kmean, kstd, vmean, vstd, ksigns, vsigns, centroids, boundaries;
  DeviceBuffer<double> kinc, vinc;
};

// A workload's pages on the GPU (key planes zeroed, value planes poisoned) and the inputs of
// the append and decode kernels.
struct GpuPages {
  GpuPages(const Workload& w, int store_bits)
      : key_page_bytes(static_cast<size_t>(w.shape.heads_kv) * w.shape.head_dim * store_bits * 32),
        value_page_bytes(static_cast<size_t>(w.shape.heads_kv) * kPageTokens * store_bits *
                         (w.shape.head_dim / 8)),
        kplanes(key_page_bytes * w.num_pages),
        vplanes(value_page_bytes * w.num_pages),
        keys(w.keys),
        values(w.values),
        seq_ids(w.seq_ids),
        positions(w.positions),
        pages(w.page_table),
        lens(w.seq_lens) {}
  ReadKvCache cache() const { return ReadKvCache{kplanes.get(), vplanes.get()}; }

  size_t key_page_bytes, value_page_bytes;
  DeviceBuffer<uint8_t> kplanes, vplanes;
  DeviceBuffer<float> keys, values;
  DeviceBuffer<int32_t> seq_ids, positions, pages, lens;
};

// Bit planes of the GPU's pages that differ from the CPU caches' (every key and value plane of
// every head and stored block/token).
int64_t PlaneMismatches(const Workload& w, const CpuReference& cpu, const GpuPages& g, int W) {
  const int d = w.geometry.head_dim, hkv = w.geometry.heads_kv, max_pages = w.shape.max_pages;
  const auto kplanes = g.kplanes.Download(g.key_page_bytes * w.num_pages);
  const auto vplanes = g.vplanes.Download(g.value_page_bytes * w.num_pages);
  int64_t mismatches = 0;
  for (size_t b = 0; b < w.layers.size(); ++b) {
    const auto& rk = dynamic_cast<const codec::ReadKvLayerCache&>(*cpu.caches[b]);
    for (int h = 0; h < hkv; ++h) {
      const codec::BitPlaneStore& store = rk.store(h);
      for (int64_t blk = 0; blk < store.blocks(); ++blk) {
        const int page = w.page_table[b * max_pages + static_cast<size_t>(blk)];
        for (int ch = 0; ch < d; ++ch) {
          for (int p = 0; p < W; ++p) {
            const uint8_t* gpu = kplanes.data() + static_cast<size_t>(page) * g.key_page_bytes +
                                 ((static_cast<size_t>(h) * d + ch) * W + p) * 32;
            mismatches += std::memcmp(gpu, store.KeyPlane(blk, ch, p), 32) != 0;
          }
        }
      }
      for (int64_t i = 0; i < store.tokens(); ++i) {
        const int page = w.page_table[b * max_pages + static_cast<size_t>(i / kPageTokens)];
        for (int p = 0; p < W; ++p) {
          const uint8_t* gpu =
              vplanes.data() + static_cast<size_t>(page) * g.value_page_bytes +
              ((static_cast<size_t>(h) * kPageTokens + i % kPageTokens) * W + p) * (d / 8);
          mismatches += std::memcmp(gpu, store.ValuePlane(i, p), d / 8) != 0;
        }
      }
    }
  }
  return mismatches;
}

// Appends every token on the GPU into the zeroed pages; the planes must be the codec's.
void AppendAndComparePlanes(const Workload& w, const CpuReference& cpu, const GpuCodec& codec_gpu,
                            GpuPages& g) {
  CUDA_OK(cudaMemset(g.kplanes.get(), 0, g.key_page_bytes * w.num_pages));
  CUDA_OK(cudaMemset(g.vplanes.get(), 0xA5, g.value_page_bytes * w.num_pages));
  CUDA_OK(ReadKvAppend(w.shape, static_cast<int>(w.seq_ids.size()), g.keys.get(), g.values.get(),
                       g.seq_ids.get(), g.positions.get(), g.pages.get(), codec_gpu.tables(),
                       g.cache(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(PlaneMismatches(w, cpu, g, codec_gpu.store_bits), 0)
      << "bit planes differ from readkv::codec";
}

// What one decode step on the GPU returned: the output of a second call on the same inputs and
// workspace, the first call's output, and the second call's debug outputs.
struct GpuDecode {
  std::vector<float> out, out_first;
  std::vector<uint8_t> key_depths, value_depths;
  std::vector<double> importance;
  std::vector<unsigned long long> totals;  // ledgers, minus their nonzero start {7, 11}
  unsigned listed = 0;                     // Select blocks that listed their last gains
};

// One decode step on the GPU with poisoned outputs, twice back to back on one stream and one
// workspace (the second's Prepare resets the row state the first's last blocks used).
void RunGpuDecode(const Case& c, const Workload& w, const GpuCodec& codec_gpu, const GpuPages& g,
                  GpuDecode& r) {
  const DecodeShape& s = w.shape;
  const int d = c.head_dim, hkv = c.heads_kv;
  DeviceBuffer<float> d_queries(w.queries);
  const size_t out_size = static_cast<size_t>(s.batch) * c.heads_q * d;
  DeviceBuffer<float> d_out(std::vector<float>(out_size, kNaNs[0]));
  DeviceBuffer<char> d_work(ReadKvDecodeWorkspaceBytes(s));
  CUDA_OK(cudaMemset(d_work.get(), 0xFF, ReadKvDecodeWorkspaceBytes(s)));
  const size_t depth_rows = static_cast<size_t>(s.batch) * hkv;
  DeviceBuffer<uint8_t> d_kdepth(depth_rows * d), d_vdepth(depth_rows * s.max_tokens);
  DeviceBuffer<double> d_importance(depth_rows * s.max_tokens);
  // Ledgers summed by the kernels, from a nonzero start (they add, never reset).
  DeviceBuffer<unsigned long long> d_totals(std::vector<unsigned long long>{7, 11});
  DeviceBuffer<unsigned> d_listed(std::vector<unsigned>{0});
  const ReadKvDebug debug{d_kdepth.get(), d_vdepth.get(), d_importance.get(), d_totals.get(),
                          d_listed.get()};
  const ReadKvReadPolicy policy = codec_gpu.policy(c);
  DeviceBuffer<float> d_first(std::vector<float>(out_size, kNaNs[0]));
  const DecodeInputs first{d_queries.get(), g.pages.get(), g.lens.get(), d_first.get()};
  CUDA_OK(ReadKvDecodeAttention(s, first, g.cache(), codec_gpu.tables(), policy, d_work.get(),
                                nullptr, ReadKvDebug{}));
  const DecodeInputs inputs{d_queries.get(), g.pages.get(), g.lens.get(), d_out.get()};
  CUDA_OK(ReadKvDecodeAttention(s, inputs, g.cache(), codec_gpu.tables(), policy, d_work.get(),
                                nullptr, debug));
  CUDA_OK(cudaDeviceSynchronize());
  r.out = d_out.Download(out_size);
  r.out_first = d_first.Download(out_size);
  r.key_depths = d_kdepth.Download(depth_rows * d);
  r.value_depths = d_vdepth.Download(depth_rows * s.max_tokens);
  r.importance = d_importance.Download(depth_rows * s.max_tokens);
  r.totals = d_totals.Download(2);
  r.totals[0] -= 7;
  r.totals[1] -= 11;
  r.listed = d_listed.Download(1)[0];
}

// The device ledgers: exactly the host ledgers of the depths the call chose (the logical one in
// bits: ReadKvLogicalBytes rounds each call down to bytes).
void CheckLedgers(const Case& c, const Workload& w, const GpuDecode& r) {
  const DecodeShape& s = w.shape;
  const int d = c.head_dim, hkv = c.heads_kv;
  unsigned long long logical_bits = 0;
  for (int b = 0; b < s.batch; ++b) {
    const auto tokens = static_cast<unsigned long long>(w.seq_lens[static_cast<size_t>(b)]);
    for (int h = 0; h < hkv; ++h) {
      const size_t head = static_cast<size_t>(b) * hkv + h;
      for (int ch = 0; ch < d; ++ch) logical_bits += r.key_depths[head * d + ch] * tokens;
      for (size_t i = 0; i < tokens; ++i) {
        logical_bits += r.value_depths[head * s.max_tokens + i] * static_cast<unsigned>(d);
      }
    }
  }
  EXPECT_EQ(r.totals[0], logical_bits) << "logical bits summed on the device";
  EXPECT_EQ(r.totals[0] / 8,
            static_cast<unsigned long long>(ReadKvLogicalBytes(
                s, w.seq_lens.data(), r.key_depths.data(), r.value_depths.data())));
  EXPECT_EQ(r.totals[1],
            static_cast<unsigned long long>(
                ReadKvDecodeTraffic(s, w.seq_lens.data(), c.store_bits, c.KeyBits(),
                                    r.key_depths.data(), r.value_depths.data())
                    .payload))
      << "payload bytes summed on the device";
}

// Sequence b's Key depths as the CPU reader's stage 1 chooses them on the same queries.
std::vector<uint8_t> CpuKeyDepths(const Case& c, const Workload& w, size_t b,
                                  const codec::ReaderPlan& plan,
                                  const codec::ReaderAllocators& allocators,
                                  codec::AllocatorScratch& scratch) {
  const int d = c.head_dim, hkv = c.heads_kv;
  std::vector<float> transformed(static_cast<size_t>(c.heads_q) * d);
  std::vector<double> weights(static_cast<size_t>(hkv) * d);
  std::vector<uint8_t> cpu_depths(weights.size());
  const float* q = w.queries.data() + b * c.heads_q * d;
  for (int hq = 0; hq < c.heads_q; ++hq) {
    const int h = hq / (c.heads_q / hkv);
    const codec::HadamardTransform kt(d, w.calibration->seeds.KeySeed(0, h));
    kt.Forward(std::span<const float>(q + hq * d, static_cast<size_t>(d)),
               std::span<float>(transformed).subspan(static_cast<size_t>(hq) * d, d));
  }
  const int g = c.heads_q / hkv;
  for (int h = 0; h < hkv; ++h) {
    codec::KeyChannelImportance(
        std::span<const float>(transformed).subspan(static_cast<size_t>(h) * g * d,
                                                    static_cast<size_t>(g) * d),
        g, w.calibration->KeyStd(0, h),
        std::span<double>(weights).subspan(static_cast<size_t>(h) * d, d));
  }
  codec::ChooseKeyDepths(plan, allocators, weights, hkv, d, cpu_depths, scratch);
  return cpu_depths;
}

// Per sequence: the Key depths equal the CPU reader's, the Value depths the CPU Threshold
// allocator's on the GPU's own weights, and the output is within tolerance of the CPU reader's.
void CheckAgainstCpu(const Case& c, const Workload& w, const CpuReference& cpu,
                     const codec::LloydTree& tree, const GpuDecode& r) {
  const int d = c.head_dim, hkv = c.heads_kv;
  const codec::ReaderPlan plan = codec::MakeReaderPlan(cpu.config.policy, c.store_bits);
  const codec::ReaderAllocators allocators(plan, tree.distortions());
  codec::AllocatorScratch scratch;
  for (size_t b = 0; b < w.layers.size(); ++b) {
    const int T = w.seq_lens[b];
    const std::vector<uint8_t> cpu_depths = CpuKeyDepths(c, w, b, plan, allocators, scratch);
    EXPECT_TRUE(
        std::equal(cpu_depths.begin(), cpu_depths.end(), r.key_depths.begin() + b * hkv * d))
        << "sequence " << b << ": Key depths differ from the CPU reader's";
    for (int h = 0; h < hkv; ++h) {
      const size_t row = (b * hkv + h) * static_cast<size_t>(w.shape.max_tokens);
      std::vector<double> a(r.importance.begin() + row, r.importance.begin() + row + T);
      std::vector<uint8_t> expect(static_cast<size_t>(T));
      allocators.value.Threshold(a, plan.ValueBudget(T, 1), expect, scratch);
      EXPECT_TRUE(std::equal(expect.begin(), expect.end(), r.value_depths.begin() + row))
          << "sequence " << b << " head " << h << ": Value depths differ from the CPU allocator's";
    }
    std::vector<float> cpu_out(static_cast<size_t>(c.heads_q) * d);
    const float* q = w.queries.data() + b * c.heads_q * d;
    cpu.caches[b]->Attend(std::span<const float>(q, cpu_out.size()), cpu_out);
    EXPECT_LT(MaxHeadError(r.out, cpu_out, b * cpu_out.size(), c.heads_q, d), 2e-3)
        << "sequence " << b << " of length " << T;
  }
}

// A kernel variant, chosen by the environment the launchers read.
struct Variant {
  const char* logits;  // KVGATE_READKV_LOGITS
  const char* values;  // KVGATE_READKV_VALUES
  const char* pdl;     // KVGATE_READKV_PDL
  const char* select;  // KVGATE_READKV_SELECT
};

class ReadKvKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReadKvKernelTest, AppendMatchesCodecPlanesAndDecodeMatchesCpuReader) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const Case c = GetParam();
  const Workload w = MakeWorkload(c, 0x5eed + static_cast<uint64_t>(c.head_dim) + c.lens.size());
  const codec::LloydTree tree(c.store_bits);
  const CpuReference cpu = MakeCpuReference(c, w);
  const GpuCodec codec_gpu(w, tree);
  GpuPages pages(w, c.store_bits);
  ASSERT_NO_FATAL_FAILURE(AppendAndComparePlanes(w, cpu, codec_gpu, pages));

  // Every logits kernel (KVGATE_READKV_LOGITS): the per-bit reader, the transposed one with 1, 2
  // and 4 pages per pass and the tensor-core one, each with the tensor-core Values reader; and the
  // CUDA-core Values reader (KVGATE_READKV_VALUES=lanes); both Values readers once more with the
  // launches chained by programmatic dependent launch (KVGATE_READKV_PDL=1); Select listing its
  // last gains (KVGATE_READKV_SELECT=list) under two logits readers.
  const Variant variants[] = {
      {"plain", "mma", "0", "scan"},  {"wide1", "mma", "0", "scan"},
      {"wide2", "mma", "0", "scan"},  {"wide4", "mma", "0", "scan"},
      {"wide4", "lanes", "0", "scan"}, {"mma", "mma", "0", "scan"},
      {"mma", "mma", "1", "scan"},    {"wide4", "lanes", "1", "scan"},
      {"mma", "mma", "0", "list"},    {"wide4", "mma", "1", "list"}};
  for (const auto& [logits_variant, values_variant, pdl, select] : variants) {
    SCOPED_TRACE(std::string("logits ") + logits_variant + ", values " + values_variant +
                 ", pdl " + pdl + ", select " + select);
    setenv("KVGATE_READKV_LOGITS", logits_variant, 1);
    setenv("KVGATE_READKV_VALUES", values_variant, 1);
    setenv("KVGATE_READKV_PDL", pdl, 1);
    setenv("KVGATE_READKV_SELECT", select, 1);
    GpuDecode r;
    ASSERT_NO_FATAL_FAILURE(RunGpuDecode(c, w, codec_gpu, pages, r));
    EXPECT_EQ(std::memcmp(r.out.data(), r.out_first.data(), r.out.size() * sizeof(float)), 0)
        << "two calls on the same inputs gave different outputs";
    // Select blocks that listed their last gains: none unless asked; with the listing, at most
    // one per Select block (8 per row at most). Whether any lists depends on how the gains fall
    // into the radix bins, so the count is printed for the GPU round to read, not asserted > 0.
    if (std::strcmp(select, "list") == 0) {
      EXPECT_LE(r.listed, static_cast<unsigned>(w.shape.batch * c.heads_kv * 8));
      std::cout << "[ select   ] " << c.Name() << " logits " << logits_variant << ": "
                << r.listed << " Select blocks listed their last gains\n";
    } else {
      EXPECT_EQ(r.listed, 0u) << "Select listed without KVGATE_READKV_SELECT=list";
    }
    ASSERT_TRUE(AllFinite(r.out)) << "an output stayed poisoned or became NaN";
    CheckLedgers(c, w, r);
    CheckAgainstCpu(c, w, cpu, tree, r);
  }
  unsetenv("KVGATE_READKV_LOGITS");
  unsetenv("KVGATE_READKV_VALUES");
  unsetenv("KVGATE_READKV_PDL");
  unsetenv("KVGATE_READKV_SELECT");
}

INSTANTIATE_TEST_SUITE_P(
    Grid, ReadKvKernelTest,
    ::testing::Values(Case{32, 8, 128, {300, 1, 1024, 777}, 8, 4.0, 0},
                      Case{32, 8, 128, {2048, 513}, 8, 2.0, 256},
                      Case{8, 8, 128, {600, 256}, 8, 4.0, 0},
                      Case{16, 2, 64, {1000, 255, 3000}, 8, 2.0, 512},
                      Case{16, 8, 64, {257, 40}, 4, 2.0, 0},
                      Case{64, 8, 128, {4096, 100}, 8, 3.0, 1024},
                      Case{8, 4, 128, {5000}, 8, 4.0, 0},
                      Case{32, 8, 128, {300, 20000}, 8, 4.0, 0, true},
                      // Chunks longer than one round of the tensor-core Values reader (1024
                      // tokens, 512 when 8 query heads share a KV head).
                      Case{32, 8, 128, {3000, 700}, 8, 4.0, 2048},
                      Case{16, 2, 64, {2500, 1}, 8, 3.0, 1024},
                      // Select's launch shapes (SelectGridFor): 16 rows or fewer take 512
                      // threads (most cases), 32 rows 8 blocks of 256 (the 4-sequence cases),
                      // these 40 rows of short shares clusters of 4.
                      Case{16, 8, 64, {700, 1, 2000, 64, 333}, 8, 3.0, 0},
                      // 72 rows of shares under 2048 tokens at 4 blocks: clusters of 2.
                      Case{16, 8, 64, {900, 5, 1500, 64, 333, 1, 2, 700, 40}, 8, 4.0, 0},
                      // A row too long for Select's shares of importances to stay in shared
                      // memory (over 8 x 20480 tokens): they go through the workspace; beside it
                      // a row whose 8 shares are mostly empty.
                      Case{4, 1, 64, {170000, 5}, 8, 4.0, 0},
                      // Shares of 60 KB: more shared memory than a launch gets without opting in.
                      Case{4, 1, 64, {60000}, 8, 2.0, 0},
                      // K/V splits of the same per-head reader (readkv/codec/readers.h).
                      Case{32, 8, 128, {300, 1, 1024, 777}, 8, 4.0, 0, false, 6.0, 2.0},
                      Case{16, 2, 64, {1000, 255, 3000}, 8, 5.0, 512, false, 8.0, 2.0},
                      Case{8, 4, 128, {5000, 64}, 8, 4.0, 0, false, 7.0, 1.0},
                      Case{32, 8, 128, {2048, 513}, 8, 3.0, 256, false, 1.5, 4.5}),
    [](const ::testing::TestParamInfo<Case>& param) { return param.param.Name(); });

}  // namespace
}  // namespace readkv::cuda
