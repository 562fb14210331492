// TileAppend (tile_attention.h) against the CPU reference on the same tokens: the tile pools it
// writes must be byte-equal to the codec's TilePlaneStores (codec::ReadKvLayerCache in the tile
// layout, every token encoded) placed at their tiles' slots under the page table, for keys on the
// Lloyd tree and for byte keys. Ragged sequences under a shuffled page table (not the identity), a
// prefill of several hundred tokens in one launch in a shuffled order (tokens of one tile
// appended by different blocks of one launch), then single-token appends, as a decode step makes
// them. Skips without a GPU.
// With outlier pools (issue 36): a prefill grouped by sequence in position order then decode
// steps, planted outliers (one page past the block budget); the page blocks downloaded must be
// word-equal to BuildTileOutlierPages of the codec's own OutlierStores for the same tokens, and
// the dropped counters equal the codec's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "decode_test_support.h"
#include "kvgate/stats/random.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/transform.h"
#include "readkv/cuda/codec_tables.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/tile_attention.h"
#include "readkv/cuda/tile_outlier_lists.h"
#include "test_buffers.h"
#include "tile_pages.h"

namespace readkv::cuda {
namespace {

using kernel_test::Case;
using kernel_test::LayerZero;
using kernel_test::MakeWorkload;
using kernel_test::Workload;

// Layer 0's codec tables of a workload on the device, and the ReadKvCodec pointing into them.
struct DeviceCodec {
  DeviceCodec(const Workload& w, int W)
      : host(MakeReadKvHostTables(w.calibration->seeds, 1, w.shape.heads_kv, w.shape.head_dim, W)),
        kmean(LayerZero(w.calibration->key_mean, w.shape.heads_kv, w.shape.head_dim)),
        kstd(LayerZero(w.calibration->key_std, w.shape.heads_kv, w.shape.head_dim)),
        vmean(LayerZero(w.calibration->value_mean, w.shape.heads_kv, w.shape.head_dim)),
        vstd(LayerZero(w.calibration->value_std, w.shape.heads_kv, w.shape.head_dim)),
        ksigns(host.key_signs),
        vsigns(host.value_signs),
        boundaries(host.boundaries) {
    codec.store_bits = W;
    codec.key_mean = kmean.get();
    codec.key_std = kstd.get();
    codec.value_mean = vmean.get();
    codec.value_std = vstd.get();
    codec.key_signs = ksigns.get();
    codec.value_signs = vsigns.get();
    codec.boundaries = boundaries.get();
  }
  ReadKvHostTables host;
  DeviceBuffer<float> kmean, kstd, vmean, vstd, ksigns, vsigns, boundaries;
  ReadKvCodec codec{};
};

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

// Counts the bytes in which two pools (keys, values) differ, and the key bytes set, then expects
// none to differ and at least a quarter of the key pool set (random codes: not empty).
void ExpectPoolsEqual(const std::vector<uint8_t>& got_k, const std::vector<uint8_t>& want_k,
                      const std::vector<uint8_t>& got_v, const std::vector<uint8_t>& want_v,
                      const std::string& reference) {
  ASSERT_EQ(got_k.size(), want_k.size());
  ASSERT_EQ(got_v.size(), want_v.size());
  int64_t key_diff = 0, value_diff = 0, set = 0;
  for (size_t i = 0; i < got_k.size(); ++i) {
    key_diff += got_k[i] != want_k[i];
    value_diff += got_v[i] != want_v[i];
    set += got_k[i] != 0;
  }
  EXPECT_EQ(key_diff, 0) << "key pool bytes that differ from " << reference;
  EXPECT_EQ(value_diff, 0) << "value pool bytes that differ from " << reference;
  EXPECT_GT(set, static_cast<int64_t>(got_k.size() / 4)) << "random codes: the pools are not empty";
}

// The pools the codec's tile stores of a workload's tokens fill (`layout`: kTiles or
// kTilesByteKeys; every token encoded, no residual window): each (sequence, KV head)'s token tiles
// at slot r % 16 of page page_table[b * max_pages + r / 16], zeros elsewhere. {keys, values}.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> CodecPools(const Workload& w, int W,
                                                                 codec::PlaneLayout layout) {
  const int hkv = w.shape.heads_kv, d = w.shape.head_dim;
  const auto tree = std::make_shared<const codec::LloydTree>(W);
  codec::ReadKvCacheOptions options;
  options.store_bits = W;
  options.policy = {codec::ReaderKind::kTile, static_cast<double>(W), 0.0, 0.0};  // reads all
  options.residual_window = false;
  options.layout = layout;
  const size_t tile_bytes = static_cast<size_t>(tile::TokenTileBytes(d, W));
  const size_t pool = static_cast<size_t>(w.num_pages) * hkv * tile::PageHeadBytes(d, W);
  std::vector<uint8_t> keys(pool, 0), values(pool, 0);
  const size_t row = static_cast<size_t>(hkv) * d;
  size_t first = 0;
  for (size_t b = 0; b < w.seq_lens.size(); ++b) {
    codec::ReadKvLayerCache cache(w.geometry, w.calibration, 0, tree, options);
    const size_t n = static_cast<size_t>(w.seq_lens[b]);
    cache.AppendTokens(std::span<const float>(w.keys).subspan(first * row, n * row),
                       std::span<const float>(w.values).subspan(first * row, n * row));
    first += n;
    const codec::TileLayerView view = cache.tile_view();
    for (int h = 0; h < hkv; ++h) {
      const codec::TilePlaneStore& store = view.stores[static_cast<size_t>(h)];
      EXPECT_EQ(store.byte_keys(), layout == codec::PlaneLayout::kTilesByteKeys);
      for (int64_t r = 0; r < store.token_tiles(); ++r) {
        const auto page = static_cast<size_t>(
            w.page_table[b * static_cast<size_t>(w.shape.max_pages) + static_cast<size_t>(r / 16)]);
        const size_t at = ((page * hkv + h) * 16 + static_cast<size_t>(r % 16)) * tile_bytes;
        std::memcpy(keys.data() + at, store.KeyTile(r, 0), tile_bytes);
        std::memcpy(values.data() + at, store.ValueTile(r, 0), tile_bytes);
      }
    }
  }
  return {std::move(keys), std::move(values)};
}

struct AppendCase {
  int heads_kv, head_dim, store_bits;
  std::vector<int> lens;
};

class TileAppendTest : public ::testing::TestWithParam<AppendCase> {};

TEST_P(TileAppendTest, PoolsEqualTheCodecsTileStores) {
  if (!kernel_test::HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const AppendCase& p = GetParam();
  const int hkv = p.heads_kv, d = p.head_dim, W = p.store_bits;
  const Workload w = MakeWorkload(Case{2 * hkv, hkv, d, p.lens}, 0x71e + d + W);
  const auto [want_k, want_v] = CodecPools(w, W, codec::PlaneLayout::kTiles);
  const DeviceCodec tables(w, W);
  const size_t pool = want_k.size();
  DeviceBuffer<uint8_t> key_pool(std::vector<uint8_t>(pool, 0));
  DeviceBuffer<uint8_t> value_pool(std::vector<uint8_t>(pool, 0));
  DeviceBuffer<int32_t> table(w.page_table);

  const std::vector<Launch> launches = Launches(w, 3, 0x5eed + d);
  ASSERT_GE(launches.front().size(), 300u) << "the prefill is one launch of hundreds of tokens";
  const size_t row = static_cast<size_t>(hkv) * d;
  for (const Launch& launch : launches) {
    DeviceBuffer<float> keys(Pick(w.keys, launch, row)), values(Pick(w.values, launch, row));
    DeviceBuffer<int32_t> seq_ids(Pick(w.seq_ids, launch, 1));
    DeviceBuffer<int32_t> positions(Pick(w.positions, launch, 1));
    CUDA_OK(TileAppend(w.shape, static_cast<int>(launch.size()), keys.get(), values.get(),
                       seq_ids.get(), positions.get(), table.get(), tables.codec,
                       TileCache{key_pool.get(), value_pool.get()}, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
  }
  ExpectPoolsEqual(key_pool.Download(pool), want_k, value_pool.Download(pool), want_v,
                   "the codec's tile stores");
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

// Plants standardised |z| of 9, -8 and 7 on three channels of every KV head of flat token k,
// keys on channels 3, 10, 17 and values on 5, 12, 19: in the transformed domain (x = mu + z
// sigma), then back to the model's, so the encoder sees ~those z (cap 2 keeps two of each).
void PlantThree(Workload& w, size_t k) {
  const int hkv = w.shape.heads_kv, d = w.shape.head_dim;
  const codec::Calibration& cal = *w.calibration;
  std::vector<float> x(static_cast<size_t>(d));
  for (int h = 0; h < hkv; ++h) {
    for (const bool keys : {true, false}) {
      const codec::HadamardTransform t(d, keys ? cal.seeds.KeySeed(0, h) : cal.seeds.ValueSeed(0, h));
      float* row = (keys ? w.keys : w.values).data() + (k * hkv + static_cast<size_t>(h)) * d;
      const std::span<float> raw(row, static_cast<size_t>(d));
      t.Forward(raw, x);
      const auto& mean = keys ? cal.key_mean : cal.value_mean;
      const auto& sd = keys ? cal.key_std : cal.value_std;
      const int first = keys ? 3 : 5;
      const float z[3] = {9.0f, -8.0f, 7.0f};
      for (int m = 0; m < 3; ++m) {
        const size_t c = static_cast<size_t>(h) * d + static_cast<size_t>(first + 7 * m);
        x[static_cast<size_t>(first + 7 * m)] = mean[c] + z[m] * sd[c];
      }
      t.Inverse(x, raw);
    }
  }
}

TEST_P(TileAppendTest, OutlierPageBlocksEqualTheCodecsStores) {
  const AppendCase& p = GetParam();
  const int hkv = p.heads_kv, d = p.head_dim, W = p.store_bits, cap = 2;
  Workload w = MakeWorkload(Case{2 * hkv, hkv, d, p.lens}, 0x71e + d + W);
  const size_t batch = p.lens.size(), n_tokens = w.seq_ids.size();
  // Planted: sequence 0's first 100 tokens (2 x 100 selected entries a kind in its first page,
  // past the budget of 160) and every sequence's last token (appended by a decode step).
  for (size_t k = 0; k < n_tokens; ++k) {
    const auto b = static_cast<size_t>(w.seq_ids[k]);
    if ((b == 0 && w.positions[k] < 100) || w.positions[k] == w.seq_lens[b] - 1) PlantThree(w, k);
  }
  // The reference: the codec's caches of the same tokens (every token encoded), their stores.
  const auto tree = std::make_shared<const codec::LloydTree>(W);
  codec::ReadKvCacheOptions options;
  options.store_bits = W;
  options.policy = {codec::ReaderKind::kFull, static_cast<double>(W), 0.0, 0.0};
  options.residual_window = false;
  options.outliers = {cap, 0.0f};
  const codec::OutlierOptions resolved = codec::ResolveOutlierOptions(options.outliers, *tree, d);
  ASSERT_EQ(resolved.block_cap, kPageOutlierEntries);
  std::vector<std::unique_ptr<codec::ReadKvLayerCache>> caches;
  std::vector<const codec::OutlierStore*> stores;
  unsigned long long want_past_cap = 0, want_over_budget = 0;
  const size_t row = static_cast<size_t>(hkv) * d;
  size_t first = 0;
  for (size_t b = 0; b < batch; ++b) {
    caches.push_back(std::make_unique<codec::ReadKvLayerCache>(w.geometry, w.calibration, 0, tree,
                                                               options));
    const size_t n = static_cast<size_t>(w.seq_lens[b]);
    caches.back()->AppendTokens(std::span<const float>(w.keys).subspan(first * row, n * row),
                                std::span<const float>(w.values).subspan(first * row, n * row));
    first += n;
    for (int h = 0; h < hkv; ++h) {
      const codec::OutlierStore& store = caches.back()->outliers(h);
      stores.push_back(&store);
      for (const codec::OutlierStats* st : {&store.key_stats(), &store.value_stats()}) {
        want_over_budget += static_cast<unsigned long long>(st->over_budget);
        want_past_cap += static_cast<unsigned long long>(st->dropped() - st->over_budget);
      }
    }
  }
  const TileOutlierPages want = BuildTileOutlierPages(stores, w.seq_lens, hkv, w.page_table,
                                                      w.shape.max_pages, w.num_pages);
  // Sequence 0's first page goes past the budget by at least 40 entries a head and kind (more
  // where natural outliers add to it: at W = 3 the tree clips past ~2 sigma).
  ASSERT_GE(want_over_budget, 2ULL * hkv * (200 - kPageOutlierEntries));
  ASSERT_GE(want_past_cap, 2ULL * hkv * (100 + batch));  // the third planted value of each
  if (!kernel_test::HaveGpu()) GTEST_SKIP() << "no CUDA device (the CPU half ran): "
                                            << QueryDevices().reason;

  const DeviceCodec tables(w, W);
  const ReadKvCodec& codec = tables.codec;
  const size_t pool = static_cast<size_t>(w.num_pages) * hkv * tile::PageHeadBytes(d, W);
  const size_t words = static_cast<size_t>(w.num_pages) * hkv * kPageOutlierBlockWords;
  DeviceBuffer<uint8_t> key_pool(std::vector<uint8_t>(pool, 0));
  DeviceBuffer<uint8_t> value_pool(std::vector<uint8_t>(pool, 0));
  DeviceBuffer<uint32_t> key_lists(std::vector<uint32_t>(words, 0));
  DeviceBuffer<uint32_t> value_lists(std::vector<uint32_t>(words, 0));
  DeviceBuffer<uint8_t> workspace(TileAppendOutlierWorkspaceBytes(static_cast<int>(n_tokens), hkv, cap));
  DeviceBuffer<unsigned long long> dropped(std::vector<unsigned long long>(3, 0));
  DeviceBuffer<int32_t> table(w.page_table);
  const TileCache cache{key_pool.get(),  value_pool.get(),     key_lists.get(),
                        value_lists.get(), cap,                resolved.threshold,
                        workspace.get(),   dropped.get()};
  // The prefill (all but every sequence's last 3 tokens) in (sequence, position) order, one
  // launch; then 3 decode steps, each one launch of every sequence's next token.
  const int steps = 3;
  std::vector<Launch> launches(1 + steps);
  for (size_t k = 0; k < n_tokens; ++k) {
    const int from_end = w.seq_lens[static_cast<size_t>(w.seq_ids[k])] - w.positions[k];
    launches[from_end > steps ? 0 : static_cast<size_t>(1 + steps - from_end)].push_back(k);
  }
  ASSERT_GE(launches.front().size(), 300u);
  for (const Launch& launch : launches) {
    DeviceBuffer<float> keys(Pick(w.keys, launch, row)), values(Pick(w.values, launch, row));
    DeviceBuffer<int32_t> seq_ids(Pick(w.seq_ids, launch, 1));
    DeviceBuffer<int32_t> positions(Pick(w.positions, launch, 1));
    CUDA_OK(TileAppend(w.shape, static_cast<int>(launch.size()), keys.get(), values.get(),
                       seq_ids.get(), positions.get(), table.get(), codec, cache, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
  }
  const std::vector<unsigned long long> counters = dropped.Download(3);
  EXPECT_EQ(counters[2], 0u) << "tokens refused as out of order";
  EXPECT_EQ(counters[1], want_over_budget) << "entries past the block budget";
  EXPECT_EQ(counters[0], want_past_cap) << "values past the cap";
  for (const bool keys : {true, false}) {
    const std::vector<uint32_t> got = (keys ? key_lists : value_lists).Download(words);
    const std::vector<uint32_t>& expected = want.blocks(keys);
    int64_t differ = 0, entries = 0;
    for (size_t i = 0; i < words; ++i) {
      if (got[i] != expected[i] && differ++ == 0) {
        const size_t block = i / kPageOutlierBlockWords;
        ADD_FAILURE() << (keys ? "key" : "value") << " block (page " << block / hkv << ", head "
                      << block % hkv << ") word " << i % kPageOutlierBlockWords << ": got "
                      << got[i] << ", the codec's " << expected[i];
      }
      entries += i % kPageOutlierBlockWords == 8 ? (expected[i] & 0xffffu) : 0;  // tile_start[16]
    }
    EXPECT_EQ(differ, 0) << (keys ? "key" : "value") << " words that differ";
    // At least the full page and two entries of every other sequence's last token.
    EXPECT_GE(entries, static_cast<int64_t>(hkv) * (kPageOutlierEntries + 2 * (batch - 1)));
  }
}

// Byte keys (TileCache::byte_keys): the key pool must be byte-equal to the codec's byte-key
// stores (codec::PlaneLayout::kTilesByteKeys) of the same tokens under the page table, and the
// value pool to its value tiles; the same shuffled prefill and decode steps as above (a byte per
// key element: any order). W = 8, the only width byte keys have.
TEST(TileAppendTest, ByteKeyPoolsEqualTheCodecsByteKeyStores) {
  if (!kernel_test::HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  for (const AppendCase& p : {AppendCase{2, 128, 8, {700, 13, 300}}, AppendCase{4, 64, 8, {260, 529}}}) {
    const int hkv = p.heads_kv, d = p.head_dim, W = 8;
    SCOPED_TRACE("d " + std::to_string(d));
    const Workload w = MakeWorkload(Case{2 * hkv, hkv, d, p.lens}, 0xb17e + d);
    const auto [want_k, want_v] = CodecPools(w, W, codec::PlaneLayout::kTilesByteKeys);
    const size_t pool = want_k.size();
    const size_t row = static_cast<size_t>(hkv) * d;
    const DeviceCodec tables(w, W);
    DeviceBuffer<uint8_t> key_pool(std::vector<uint8_t>(pool, 0));
    DeviceBuffer<uint8_t> value_pool(std::vector<uint8_t>(pool, 0));
    DeviceBuffer<int32_t> table(w.page_table);
    TileCache cache{key_pool.get(), value_pool.get()};
    cache.byte_keys = true;
    for (const Launch& launch : Launches(w, 3, 0xb5eed + d)) {
      DeviceBuffer<float> keys(Pick(w.keys, launch, row)), values(Pick(w.values, launch, row));
      DeviceBuffer<int32_t> seq_ids(Pick(w.seq_ids, launch, 1));
      DeviceBuffer<int32_t> positions(Pick(w.positions, launch, 1));
      CUDA_OK(TileAppend(w.shape, static_cast<int>(launch.size()), keys.get(), values.get(),
                         seq_ids.get(), positions.get(), table.get(), tables.codec, cache,
                         nullptr));
      CUDA_OK(cudaDeviceSynchronize());
    }
    ExpectPoolsEqual(key_pool.Download(pool), want_k, value_pool.Download(pool), want_v,
                     "the codec's byte-key stores");
  }
  // Byte keys at a store width other than 8 are refused; the same append without them runs.
  const Workload w4 = MakeWorkload(Case{2, 1, 64, {16}}, 1);
  const DeviceCodec four(w4, 4);
  const size_t pool4 = static_cast<size_t>(w4.num_pages) * tile::PageHeadBytes(64, 4);
  DeviceBuffer<uint8_t> k4(std::vector<uint8_t>(pool4, 0)), v4(std::vector<uint8_t>(pool4, 0));
  DeviceBuffer<float> keys4(w4.keys), values4(w4.values);
  DeviceBuffer<int32_t> seq4(w4.seq_ids), pos4(w4.positions), table4(w4.page_table);
  TileCache cache4{k4.get(), v4.get()};
  cache4.byte_keys = true;
  const auto append4 = [&](const TileCache& c) {
    return TileAppend(w4.shape, 16, keys4.get(), values4.get(), seq4.get(), pos4.get(),
                      table4.get(), four.codec, c, nullptr);
  };
  EXPECT_EQ(append4(cache4), cudaErrorInvalidValue);
  cache4.byte_keys = false;
  EXPECT_EQ(append4(cache4), cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
}

TEST(TileAppendTest, RefusesBadArguments) {
  if (!kernel_test::HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const DecodeShape shape{1, 8, 2, 64, 1, 256, 0};
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
