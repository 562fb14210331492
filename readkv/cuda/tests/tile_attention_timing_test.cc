// A first timing of the GPU tile reader against the FP8 kernel on the same shape, until
// `kvgate bench attention` runs the tile reader: disabled by default (it allocates ~2 GiB of device
// memory and prints numbers, it checks nothing but that both launch). Run it with
//   readkv_cuda_test --gtest_also_run_disabled_tests --gtest_filter='TileTiming*'
// KVGATE_TILE_TIMING="T,B,R[,HQ,HKV,D]" or "T,B,RK,RV,HQ,HKV,D" picks tokens, batch, the read
// budget (R_K = R_V = R, or a split) and the heads (default 32768,16,2,32,8,128). Planes and FP8
// codes are seeded random bytes (warm-up launches first; the sets are far larger than the L2, so
// each timed launch streams from DRAM as a decode step would).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/allocator.h"
#include "readkv/codec/codebook.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_attention.h"
#include "readkv/cuda/tile_centroids.h"
#include "test_buffers.h"

namespace readkv::cuda {
namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed, uint8_t mask) {
  std::vector<uint8_t> out(n);
  kvgate::stats::SplitMixRng rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng.Next();
    for (size_t k = 0; k < 8 && i + k < n; ++k)
      out[i + k] = static_cast<uint8_t>(x >> (8 * k)) & mask;
  }
  return out;
}

// Mean microseconds of `iters` launches after 3 warm-ups.
template <typename Launch>
double TimeUs(const Launch& launch, int iters) {
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) launch();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1000.0 * ms / iters;
}

TEST(TileTimingTest, DISABLED_TileReaderAgainstFp8) {
  if (QueryDevices().device_count == 0) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  int tokens = 32768, batch = 16, hq = 32, hkv = 8, d = 128;
  double rk = 2.0, rv = 2.0;
  if (const char* spec = std::getenv("KVGATE_TILE_TIMING")) {
    const int got =
        std::sscanf(spec, "%d,%d,%lf,%lf,%d,%d,%d", &tokens, &batch, &rk, &rv, &hq, &hkv, &d);
    if (got != 7) {
      const int short_form = std::sscanf(spec, "%d,%d,%lf,%d,%d,%d", &tokens, &batch, &rk, &hq,
                                         &hkv, &d);
      ASSERT_TRUE(short_form == 3 || short_form == 6) << spec;
      rv = rk;
    }
  }
  const int W = 8;
  const TileDecodeShape shape{batch, hq, hkv, d, W, tokens, 0};
  int sm_count = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  const TilePlan plan = PlanTileDecode(shape, sm_count);
  const size_t rows = static_cast<size_t>(batch) * hkv;
  const size_t tile_bytes = rows * shape.max_token_tiles() * shape.groups() * W * 32;
  DeviceBuffer<uint8_t> key_tiles(RandomBytes(tile_bytes, 1, 0xff));
  DeviceBuffer<uint8_t> value_tiles(RandomBytes(tile_bytes, 2, 0xff));
  std::vector<float> queries(static_cast<size_t>(batch) * hq * d);
  kvgate::stats::SplitMixRng rng(3);
  for (float& q : queries) q = static_cast<float>(rng.Normal());
  std::vector<float> ones(static_cast<size_t>(hkv) * d, 1.0f), zeros(ones.size(), 0.0f), signs;
  for (size_t i = 0; i < ones.size(); ++i) signs.push_back(rng.Next() % 2 ? 1.0f : -1.0f);
  const codec::LloydTree tree(W);
  const codec::DepthAllocator step1(tree.distortions(), 1, 1);
  std::vector<double> inc;
  for (int k = 0; k < step1.steps_per_object(); ++k) inc.push_back(step1.increment(k));
  DeviceBuffer<float> d_queries(queries), d_ones(ones), d_zeros(zeros), d_signs(signs);
  DeviceBuffer<double> d_inc(inc);
  DeviceBuffer<int32_t> encoded(std::vector<int32_t>(static_cast<size_t>(batch), tokens));
  DeviceBuffer<int32_t> residual(std::vector<int32_t>(static_cast<size_t>(batch), 0));
  DeviceBuffer<uint16_t> no_window(1);
  DeviceBuffer<float> out(queries.size());
  DeviceBuffer<uint8_t> workspace(TileDecodeWorkspaceBytes(shape, plan));
  const ReadKvCodec codec_tables{W,
                                 d_zeros.get(),
                                 d_ones.get(),
                                 d_zeros.get(),
                                 d_ones.get(),
                                 d_signs.get(),
                                 d_signs.get(),
                                 nullptr,
                                 nullptr};
  const ReadKvReadPolicy policy{rk, rv, d_inc.get(), W - 1, d_inc.get(), W - 1};
  const TileDecodeInputs inputs{d_queries.get(), key_tiles.get(), value_tiles.get(),
                                no_window.get(), no_window.get(), encoded.get(),
                                residual.get(),  out.get()};
  const tile::TileCentroids centroids = tile::MakeTileCentroids(tree);
  cudaError_t status = cudaSuccess;
  const double tile_us = TimeUs(
      [&] {
        const cudaError_t s = TileDecodeAttention(shape, inputs, codec_tables, centroids, policy,
                                                  plan, workspace.get(), nullptr);
        if (s != cudaSuccess) status = s;
      },
      20);
  CUDA_OK(status);
  CUDA_OK(cudaDeviceSynchronize());

  // FP8 e4m3 on the same shape: pages in order, no NaN codes (bits 3 and 7 cleared).
  const int pages_per_seq = (tokens + kPageTokens - 1) / kPageTokens;
  const size_t page_bytes = static_cast<size_t>(hkv) * kPageTokens * d;
  const size_t pages = static_cast<size_t>(batch) * pages_per_seq;
  DeviceBuffer<uint8_t> k_pages(RandomBytes(pages * page_bytes, 4, 0x77));
  DeviceBuffer<uint8_t> v_pages(RandomBytes(pages * page_bytes, 5, 0x77));
  std::vector<int32_t> table(pages);
  for (size_t p = 0; p < pages; ++p) table[p] = static_cast<int32_t>(p);
  DeviceBuffer<int32_t> d_table(table),
      d_lens(std::vector<int32_t>(static_cast<size_t>(batch), tokens));
  const DecodeShape fp8_shape{batch, hq, hkv, d, pages_per_seq, tokens, 0, tokens};
  DeviceBuffer<uint8_t> fp8_workspace(SplitDecodeWorkspaceBytes(fp8_shape));
  DeviceBuffer<float> scales(std::vector<float>(static_cast<size_t>(hkv), 1.0f));
  const Fp8Cache fp8{k_pages.get(), v_pages.get(), scales.get(), scales.get()};
  const DecodeInputs fp8_inputs{d_queries.get(), d_table.get(), d_lens.get(), out.get()};
  const double fp8_us = TimeUs(
      [&] {
        const cudaError_t s =
            Fp8DecodeAttention(fp8_shape, fp8_inputs, fp8, fp8_workspace.get(), nullptr);
        if (s != cudaSuccess) status = s;
      },
      20);
  CUDA_OK(status);
  CUDA_OK(cudaDeviceSynchronize());
  std::printf(
      "tile reader %d x %d (%d,%d) d%d W8 R_K %.2f R_V %.2f: %.1f us (chunk %d, %d chunks); "
      "fp8: %.1f us; tile / fp8 = %.3f\n",
      tokens, batch, hq, hkv, d, rk, rv, tile_us, plan.chunk_tokens, plan.chunks, fp8_us,
      tile_us / fp8_us);
}

}  // namespace
}  // namespace readkv::cuda
