// TileAppend (tile_attention.h) against ReadKvAppend (decode_attention.h) on the same tokens: the
// tile pools it writes must be byte-equal to the bench's relayout (bench::PagesToTiles) of the
// planes ReadKvAppend writes, whose codes tests/readkv_kernel_test.cc proves equal to the codec's.
// Ragged sequences under a shuffled page table (not the identity), a prefill of several hundred
// tokens in one launch in a shuffled order (tokens of one tile appended by different blocks of
// one launch), then single-token appends, as a decode step makes them. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "bench_kernels.h"
#include "decode_test_support.h"
#include "kvgate/stats/random.h"
#include "readkv/cuda/codec_tables.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/tile_attention.h"
#include "test_buffers.h"
#include "tile_pages.h"

namespace readkv::cuda {
namespace {

using kernel_test::Case;
using kernel_test::MakeWorkload;
using kernel_test::Workload;

// Layer 0's rows ([H_kv][d]) of a [layers][H_kv][d] calibration array.
std::vector<float> LayerZero(const std::vector<float>& all, int hkv, int d) {
  return std::vector<float>(all.begin(), all.begin() + static_cast<size_t>(hkv) * d);
}

// One launch's tokens: indices into the workload's flat token arrays.
using Launch = std::vector<size_t>;

// The prefill (every sequence's tokens but its last `decode_steps`, all sequences interleaved in
// a seeded shuffled order, one launch), then per decode step one launch per sequence of its next
// token.
std::vector<Launch> Launches(const Workload& w, int decode_steps, uint64_t seed) {
  std::vector<size_t> first(w.seq_lens.size() + 1, 0);
  for (size_t b = 0; b < w.seq_lens.size(); ++b) first[b + 1] = first[b] + w.seq_lens[b];
  Launch prefill;
  for (size_t b = 0; b < w.seq_lens.size(); ++b) {
    for (size_t i = first[b]; i + decode_steps < first[b + 1]; ++i) prefill.push_back(i);
  }
  kvgate::stats::SplitMixRng rng(seed);
  for (size_t i = prefill.size(); i > 1; --i) {
    std::swap(prefill[i - 1], prefill[rng.UniformIndex(i)]);
  }
  std::vector<Launch> launches = {prefill};
  for (int step = decode_steps; step > 0; --step) {
    for (size_t b = 0; b < w.seq_lens.size(); ++b) {
      if (first[b + 1] - first[b] >= static_cast<size_t>(step)) {
        launches.push_back({first[b + 1] - static_cast<size_t>(step)});
      }
    }
  }
  return launches;
}

template <typename T>
std::vector<T> Pick(const std::vector<T>& all, const Launch& launch, size_t row) {
  std::vector<T> out;
  for (const size_t k : launch) {
    out.insert(out.end(), all.begin() + k * row, all.begin() + (k + 1) * row);
  }
  return out;
}

struct AppendCase {
  int heads_kv, head_dim, store_bits;
  std::vector<int> lens;
};

class TileAppendTest : public ::testing::TestWithParam<AppendCase> {};

TEST_P(TileAppendTest, PoolsEqualTheRelayoutOfReadKvAppendsPlanes) {
  if (!kernel_test::HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const AppendCase& p = GetParam();
  const int hkv = p.heads_kv, d = p.head_dim, W = p.store_bits;
  const Workload w = MakeWorkload(Case{2 * hkv, hkv, d, p.lens, W, 4.0, 0}, 0x71e + d + W);
  const ReadKvHostTables host = MakeReadKvHostTables(w.calibration->seeds, 1, hkv, d, W);
  const codec::Calibration& cal = *w.calibration;
  DeviceBuffer<float> kmean(LayerZero(cal.key_mean, hkv, d)), kstd(LayerZero(cal.key_std, hkv, d));
  DeviceBuffer<float> vmean(LayerZero(cal.value_mean, hkv, d));
  DeviceBuffer<float> vstd(LayerZero(cal.value_std, hkv, d));
  DeviceBuffer<float> ksigns(host.key_signs), vsigns(host.value_signs);
  DeviceBuffer<float> boundaries(host.boundaries);
  ReadKvCodec codec;
  codec.store_bits = W;
  codec.key_mean = kmean.get();
  codec.key_std = kstd.get();
  codec.value_mean = vmean.get();
  codec.value_std = vstd.get();
  codec.key_signs = ksigns.get();
  codec.value_signs = vsigns.get();
  codec.boundaries = boundaries.get();

  const size_t key_page = static_cast<size_t>(hkv) * d * W * 32;
  const size_t value_page = static_cast<size_t>(hkv) * kPageTokens * W * (d / 8);
  const size_t pool = static_cast<size_t>(w.num_pages) * hkv * tile::PageHeadBytes(d, W);
  DeviceBuffer<uint8_t> kplanes(std::vector<uint8_t>(key_page * w.num_pages, 0));
  DeviceBuffer<uint8_t> vplanes(std::vector<uint8_t>(value_page * w.num_pages, 0));
  DeviceBuffer<uint8_t> key_pool(std::vector<uint8_t>(pool, 0));
  DeviceBuffer<uint8_t> value_pool(std::vector<uint8_t>(pool, 0));
  DeviceBuffer<int32_t> table(w.page_table), lens(w.seq_lens);

  const std::vector<Launch> launches = Launches(w, 3, 0x5eed + d);
  ASSERT_GE(launches.front().size(), 300u) << "the prefill is one launch of hundreds of tokens";
  const size_t row = static_cast<size_t>(hkv) * d;
  for (const Launch& launch : launches) {
    DeviceBuffer<float> keys(Pick(w.keys, launch, row)), values(Pick(w.values, launch, row));
    DeviceBuffer<int32_t> seq_ids(Pick(w.seq_ids, launch, 1));
    DeviceBuffer<int32_t> positions(Pick(w.positions, launch, 1));
    const int n = static_cast<int>(launch.size());
    CUDA_OK(ReadKvAppend(w.shape, n, keys.get(), values.get(), seq_ids.get(), positions.get(),
                         table.get(), codec, ReadKvCache{kplanes.get(), vplanes.get()}, nullptr));
    CUDA_OK(TileAppend(w.shape, n, keys.get(), values.get(), seq_ids.get(), positions.get(),
                       table.get(), codec, TileCache{key_pool.get(), value_pool.get()}, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
  }
  // The relayout of ReadKvAppend's planes into zeroed pools under the same page table.
  DeviceBuffer<uint8_t> key_want(std::vector<uint8_t>(pool, 0));
  DeviceBuffer<uint8_t> value_want(std::vector<uint8_t>(pool, 0));
  const bench::PagedPlanes planes{kplanes.get(), vplanes.get(), table.get(), hkv, d, W,
                                  w.shape.max_pages};
  CUDA_OK(bench::PagesToTiles(planes, lens.get(), static_cast<int>(p.lens.size()), key_want.get(),
                              value_want.get(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got_k = key_pool.Download(pool), got_v = value_pool.Download(pool);
  const std::vector<uint8_t> want_k = key_want.Download(pool), want_v = value_want.Download(pool);
  int64_t key_diff = 0, value_diff = 0, set = 0;
  for (size_t i = 0; i < pool; ++i) {
    key_diff += got_k[i] != want_k[i];
    value_diff += got_v[i] != want_v[i];
    set += got_k[i] != 0;
  }
  EXPECT_EQ(key_diff, 0) << "key pool bytes that differ from the relayout of ReadKvAppend's";
  EXPECT_EQ(value_diff, 0) << "value pool bytes that differ from the relayout of ReadKvAppend's";
  EXPECT_GT(set, static_cast<int64_t>(pool / 4)) << "random codes: the pools are not empty";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TileAppendTest,
    ::testing::Values(
        // Ragged: a partial tile and a partial page, a sequence shorter than one tile, two pages.
        AppendCase{2, 128, 8, {700, 13, 300}},  //
        AppendCase{4, 64, 4, {260, 529}},
        AppendCase{1, 64, 3, {256, 17, 400}}),
    [](const ::testing::TestParamInfo<AppendCase>& param_info) {
      const AppendCase& c = param_info.param;
      std::string name = "hkv" + std::to_string(c.heads_kv) + "_d" + std::to_string(c.head_dim) +
                         "_W" + std::to_string(c.store_bits) + "_T";
      for (const int len : c.lens) name += std::to_string(len) + "_";
      return name;
    });

TEST(TileAppendTest, RefusesBadArguments) {
  if (!kernel_test::HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const DecodeShape shape{1, 8, 2, 64, 1, 256, 0, 0};
  EXPECT_EQ(TileAppend(shape, 1, nullptr, nullptr, nullptr, nullptr, nullptr, ReadKvCodec{},
                       TileCache{}, nullptr),
            cudaErrorInvalidValue);
  DecodeShape odd = shape;
  odd.head_dim = 96;
  EXPECT_EQ(TileAppend(odd, 0, nullptr, nullptr, nullptr, nullptr, nullptr, ReadKvCodec{},
                       TileCache{}, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace readkv::cuda
