// GPU-vs-CPU consistency of the dense and FP8 decode-attention kernels (readkv/cuda) against the
// codec's CPU backends (readkv/codec), over a grid of shapes with ragged paged sequences, fresh
// random inputs and poisoned outputs; the launchers' refusals and the stream timer. The tile
// reader's tests are tile_attention_test.cc and tile_append_test.cc. Skips cleanly without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "decode_test_support.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/fp8.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"

namespace readkv::cuda {
namespace {

using namespace kernel_test;  // NOLINT(build/namespaces): the tests' shared fixtures

// ---- Dense and FP8 ---------------------------------------------------------------------------

uint16_t ToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

class SplitKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(SplitKernelTest, DenseAndFp8MatchCpuBackends) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const Case c = GetParam();
  const Workload w = MakeWorkload(c, 0xdec0de + c.lens.size());
  const DecodeShape& s = w.shape;
  const int d = c.head_dim, hkv = c.heads_kv;
  const size_t page_elems = static_cast<size_t>(hkv) * kPageTokens * d;
  std::vector<uint16_t> kb(page_elems * w.num_pages, 0), vb(kb.size(), 0);
  std::vector<uint8_t> k8(kb.size(), 0), v8(kb.size(), 0);
  // Per-head FP8 scales from the calibration's amax, as the CPU FP8 cache computes them.
  std::vector<float> kscale(static_cast<size_t>(hkv)), vscale(static_cast<size_t>(hkv));
  for (int h = 0; h < hkv; ++h) {
    kscale[static_cast<size_t>(h)] = codec::Fp8ScaleFromAmax(w.calibration->key_amax[h]);
    vscale[static_cast<size_t>(h)] = codec::Fp8ScaleFromAmax(w.calibration->value_amax[h]);
  }
  for (size_t k = 0; k < w.seq_ids.size(); ++k) {
    const int b = w.seq_ids[k], i = w.positions[k];
    const int page = w.page_table[static_cast<size_t>(b) * s.max_pages + i / kPageTokens];
    for (int h = 0; h < hkv; ++h) {
      for (int ch = 0; ch < d; ++ch) {
        const size_t src = (k * hkv + h) * d + ch;
        const size_t dst = static_cast<size_t>(page) * page_elems +
                           (static_cast<size_t>(h) * kPageTokens + i % kPageTokens) * d + ch;
        kb[dst] = ToBf16(w.keys[src]);
        vb[dst] = ToBf16(w.values[src]);
        k8[dst] = codec::Fp8E4m3Encode(w.keys[src] / kscale[static_cast<size_t>(h)]);
        v8[dst] = codec::Fp8E4m3Encode(w.values[src] / vscale[static_cast<size_t>(h)]);
      }
    }
  }
  DeviceBuffer<uint16_t> d_kb(kb), d_vb(vb);
  DeviceBuffer<uint8_t> d_k8(k8), d_v8(v8);
  DeviceBuffer<float> d_ks(kscale), d_vs(vscale), d_queries(w.queries);
  DeviceBuffer<int32_t> d_pages(w.page_table), d_lens(w.seq_lens);
  const size_t out_size = static_cast<size_t>(s.batch) * c.heads_q * d;

  codec::LayerCacheConfig config;
  config.geometry = w.geometry;
  config.calibration = w.calibration;
  config.backend = codec::KvBackend::kDense;
  config.dense_storage = codec::DenseStorage::kBf16;
  codec::LayerCacheConfig fp8_config = config;
  fp8_config.backend = codec::KvBackend::kFp8;
  fp8_config.fp8_scale = codec::Fp8ScaleGranularity::kHead;
  std::vector<float> dense_cpu(out_size), fp8_cpu(out_size);
  const size_t per_sequence = static_cast<size_t>(c.heads_q) * d;
  for (size_t b = 0; b < w.layers.size(); ++b) {
    const auto& layer = w.layers[b];
    auto dense_cache = codec::MakeLayerKvCache(config);
    auto fp8_cache = codec::MakeLayerKvCache(fp8_config);
    dense_cache->AppendTokens(layer.keys, layer.values);
    fp8_cache->AppendTokens(layer.keys, layer.values);
    const std::span<const float> q(w.queries.data() + b * per_sequence, per_sequence);
    dense_cache->Attend(q, std::span<float>(dense_cpu.data() + b * per_sequence, per_sequence));
    fp8_cache->Attend(q, std::span<float>(fp8_cpu.data() + b * per_sequence, per_sequence));
  }

  // Every schedule (SplitPlan, split_work.h), each from a poisoned workspace and poisoned
  // outputs: the persistent one merges partials from the workspace; the cluster ones must not
  // touch it.
  const size_t work_bytes = SplitDecodeWorkspaceBytes(s);
  DeviceBuffer<char> d_work(work_bytes);
  for (const char* schedule : {"auto", "off", "1", "2", "4", "8"}) {
    SCOPED_TRACE(std::string("split plan ") + schedule);
    SplitPlan plan;
    ASSERT_TRUE(ParseSplitPlan(schedule, &plan));
    const std::vector<char> poison(work_bytes, static_cast<char>(0x7f));
    d_work.Upload(poison);
    DeviceBuffer<float> d_dense(std::vector<float>(out_size, kNaNs[0]));
    DeviceBuffer<float> d_fp8(std::vector<float>(out_size, kNaNs[0]));
    CUDA_OK(DenseDecodeAttention(s, {d_queries.get(), d_pages.get(), d_lens.get(), d_dense.get()},
                                 {d_kb.get(), d_vb.get()}, d_work.get(), nullptr, plan));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(Fp8DecodeAttention(s, {d_queries.get(), d_pages.get(), d_lens.get(), d_fp8.get()},
                               {d_k8.get(), d_v8.get(), d_ks.get(), d_vs.get()}, d_work.get(),
                               nullptr, plan));
    CUDA_OK(cudaDeviceSynchronize());
    const bool untouched = d_work.Download(work_bytes) == poison;
    if (std::strcmp(schedule, "off") == 0) {
      EXPECT_FALSE(untouched) << "the persistent schedule wrote no partials";
    }
    if (std::isdigit(static_cast<unsigned char>(schedule[0]))) {
      EXPECT_TRUE(untouched) << "a cluster schedule wrote the workspace";
    }
    const auto dense = d_dense.Download(out_size);
    const auto fp8 = d_fp8.Download(out_size);
    ASSERT_TRUE(AllFinite(dense));
    ASSERT_TRUE(AllFinite(fp8));
    for (size_t b = 0; b < w.layers.size(); ++b) {
      const std::vector<float> dense_b(dense_cpu.begin() + b * per_sequence,
                                       dense_cpu.begin() + (b + 1) * per_sequence);
      const std::vector<float> fp8_b(fp8_cpu.begin() + b * per_sequence,
                                     fp8_cpu.begin() + (b + 1) * per_sequence);
      EXPECT_LT(MaxHeadError(dense, dense_b, b * per_sequence, c.heads_q, d), 1e-4)
          << "dense, sequence " << b;
      EXPECT_LT(MaxHeadError(fp8, fp8_b, b * per_sequence, c.heads_q, d), 1e-4)
          << "fp8, sequence " << b;
    }
  }
  DeviceBuffer<float> d_out(out_size);  // a plan that is no schedule: refused
  EXPECT_EQ(DenseDecodeAttention(s, {d_queries.get(), d_pages.get(), d_lens.get(), d_out.get()},
                                 {d_kb.get(), d_vb.get()}, d_work.get(), nullptr, SplitPlan{9}),
            cudaErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, SplitKernelTest,
    ::testing::Values(Case{32, 8, 128, {300, 1, 1024, 777}},
                      Case{32, 8, 128, {2048, 513}},
                      Case{8, 8, 128, {600, 256}},
                      Case{16, 2, 64, {1000, 255, 3000}},
                      Case{16, 16, 64, {257, 40}},
                      Case{64, 8, 128, {4096, 100}},
                      Case{16, 8, 128, {700, 3, 64}},
                      // 128 equal heads: on an H200 the dense kernel's automatic schedule is
                      // clusters of 2 (SplitClusterSize), as at the bench's 32K x 16.
                      Case{32, 8, 128, std::vector<int>(16, 640)}),
    [](const ::testing::TestParamInfo<Case>& param) { return param.param.Name(); });

TEST(DecodeAttentionTest, LaunchersRefuseUnsafeShapes) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  DecodeShape s{1, 12, 8, 128, 1, 256, 0};  // 12 query heads over 8 KV heads: no integer group
  DecodeInputs in{};
  EXPECT_EQ(DenseDecodeAttention(s, in, {}, nullptr, nullptr), cudaErrorInvalidValue);
  s = DecodeShape{1, 8, 8, 96, 1, 256, 0};  // d = 96 has no kernel
  EXPECT_EQ(Fp8DecodeAttention(s, in, {}, nullptr, nullptr), cudaErrorInvalidValue);
  s = DecodeShape{1, 8, 8, 128, 1, 300, 0};  // more tokens than the page table can hold
  EXPECT_EQ(DenseDecodeAttention(s, in, {}, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace readkv::cuda

namespace readkv::cuda {
namespace {

// StreamTimer (device.h): every Begin/End pair adds its GPU time; Seconds() is idempotent; an
// unfinished pair (Begin without End) adds nothing.
TEST(StreamTimerTest, SumsTheGpuTimeOfItsRunsAndNothingElse) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  constexpr size_t kBytes = size_t{256} << 20;
  DeviceBuffer<char> buffer(kBytes);
  StreamTimer timer;
  EXPECT_EQ(timer.Seconds(), 0.0);
  timer.Begin();
  CUDA_OK(cudaMemsetAsync(buffer.get(), 1, kBytes, nullptr));
  timer.End();
  const double one = timer.Seconds();
  EXPECT_GT(one, 0.0);
  EXPECT_EQ(timer.Seconds(), one);
  for (int i = 0; i < 3; ++i) {
    timer.Begin();
    CUDA_OK(cudaMemsetAsync(buffer.get(), i, kBytes, nullptr));
    timer.End();
  }
  const double four = timer.Seconds();
  EXPECT_GT(four, one);
  CUDA_OK(cudaMemsetAsync(buffer.get(), 0, kBytes, nullptr));  // not timed
  timer.Begin();  // never ended
  CUDA_OK(cudaMemsetAsync(buffer.get(), 0, kBytes, nullptr));
  EXPECT_EQ(timer.Seconds(), four);
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace readkv::cuda
