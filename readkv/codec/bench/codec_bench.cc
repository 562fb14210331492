// CPU reference throughput of the ReadKV codec and the attention backends.
//   BM_Encode             tokens/s appended into a ReadKvLayerCache (d=128, H_kv=8, W=8).
//   BM_ProgressiveDecode  tokens/s of planes -> reconstructed K and V values at depth t.
//   BM_Attention*         one decode step over T=8192 tokens, H_q=32, H_kv=8, d=128.
// Run: readkv_codec_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/plane_decode.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/synthetic.h"

namespace readkv::codec {
namespace {

constexpr LayerGeometry kGeometry = {32, 8, 128};
constexpr int64_t kTokens = 8192;

// One synthetic layer and its calibration, made once for every benchmark.
struct Fixture {
  SyntheticConfig config;
  SyntheticLayer layer;
  std::shared_ptr<const Calibration> calibration;
  std::shared_ptr<const LloydTree> tree = std::make_shared<const LloydTree>(8);

  Fixture() {
    config.geometry = kGeometry;
    config.tokens = kTokens;
    config.seed = 1;
    layer = MakeSyntheticLayer(config);
    calibration = std::make_shared<const Calibration>(MakeSyntheticCalibration(config, 4096));
  }
  static const Fixture& Get() {
    static const Fixture fixture;
    return fixture;
  }
};

std::unique_ptr<LayerKvCache> FilledCache(KvBackend backend, ReadPolicy policy = {}) {
  const Fixture& f = Fixture::Get();
  LayerCacheConfig config;
  config.backend = backend;
  config.geometry = kGeometry;
  config.calibration = f.calibration;
  config.codebook = f.tree;
  config.policy = policy;
  auto cache = MakeLayerKvCache(config);
  cache->AppendTokens(f.layer.keys, f.layer.values);
  return cache;
}

void BM_Encode(benchmark::State& state) {
  const Fixture& f = Fixture::Get();
  const int64_t tokens = 2048;
  const size_t floats = static_cast<size_t>(tokens) * kGeometry.heads_kv * kGeometry.head_dim;
  const std::span<const float> keys(f.layer.keys.data(), floats);
  const std::span<const float> values(f.layer.values.data(), floats);
  for (auto _ : state) {
    ReadKvLayerCache cache(kGeometry, f.calibration, 0, f.tree, ReadKvCacheOptions{});
    cache.AppendTokens(keys, values);
    benchmark::DoNotOptimize(cache.encoded_tokens());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

// Reconstructs every K and V scalar of every KV head at depth t: codes from planes, then
// mu + sigma * centroid. Measures the decode path the readers use, without attention.
void BM_ProgressiveDecode(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  static const std::unique_ptr<LayerKvCache> cache = FilledCache(KvBackend::kReadKv);
  const auto& readkv = static_cast<const ReadKvLayerCache&>(*cache);
  const Fixture& f = Fixture::Get();
  const int d = kGeometry.head_dim;
  std::vector<uint8_t> codes(256);
  std::vector<float> out(256);
  const auto centroids = f.tree->centroids(depth);
  for (auto _ : state) {
    for (int h = 0; h < kGeometry.heads_kv; ++h) {
      const BitPlaneStore& store = readkv.store(h);
      const auto k_mean = f.calibration->KeyMean(0, h);
      const auto k_std = f.calibration->KeyStd(0, h);
      for (int64_t b = 0; b < store.blocks(); ++b) {
        for (int c = 0; c < d; ++c) {
          DecodeKeyBlockCodes(store, b, c, depth, codes.data());
          for (int j = 0; j < 256; ++j) out[j] = k_mean[c] + k_std[c] * centroids[codes[j]];
          benchmark::DoNotOptimize(out.data());
        }
      }
      const auto v_mean = f.calibration->ValueMean(0, h);
      const auto v_std = f.calibration->ValueStd(0, h);
      for (int64_t i = 0; i < store.tokens(); ++i) {
        DecodeValueCodes(store, i, depth, codes.data());
        for (int c = 0; c < d; ++c) out[c] = v_mean[c] + v_std[c] * centroids[codes[c]];
        benchmark::DoNotOptimize(out.data());
      }
    }
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kTokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ProgressiveDecode)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond);

void RunAttention(benchmark::State& state, const LayerKvCache& cache) {
  const Fixture& f = Fixture::Get();
  std::vector<float> out(f.layer.queries.size());
  AttentionLedgers ledgers;
  for (auto _ : state) {
    ledgers = cache.Attend(f.layer.queries, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kTokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["logical_read_MB"] = static_cast<double>(ledgers.logical.Bytes()) / 1e6;
  state.counters["physical_MB"] = static_cast<double>(ledgers.physical.Total()) / 1e6;
}

void BM_AttentionDense(benchmark::State& state) {
  static const auto cache = FilledCache(KvBackend::kDense);
  RunAttention(state, *cache);
}
BENCHMARK(BM_AttentionDense)->Unit(benchmark::kMillisecond);

void BM_AttentionFp8(benchmark::State& state) {
  static const auto cache = FilledCache(KvBackend::kFp8);
  RunAttention(state, *cache);
}
BENCHMARK(BM_AttentionFp8)->Unit(benchmark::kMillisecond);

void BM_AttentionReadKv8x4Constrained(benchmark::State& state) {
  static const auto cache = FilledCache(KvBackend::kReadKv, {ReaderKind::kConstrained, 4, 0, 0});
  RunAttention(state, *cache);
}
BENCHMARK(BM_AttentionReadKv8x4Constrained)->Unit(benchmark::kMillisecond);

void BM_AttentionReadKv8x4Flexible(benchmark::State& state) {
  static const auto cache = FilledCache(KvBackend::kReadKv, {ReaderKind::kFlexible, 4, 0, 0});
  RunAttention(state, *cache);
}
BENCHMARK(BM_AttentionReadKv8x4Flexible)->Unit(benchmark::kMillisecond);

void BM_AttentionReadKv8x2Constrained(benchmark::State& state) {
  static const auto cache = FilledCache(KvBackend::kReadKv, {ReaderKind::kConstrained, 2, 0, 0});
  RunAttention(state, *cache);
}
BENCHMARK(BM_AttentionReadKv8x2Constrained)->Unit(benchmark::kMillisecond);

void BM_AttentionReadKv8x2Flexible(benchmark::State& state) {
  static const auto cache = FilledCache(KvBackend::kReadKv, {ReaderKind::kFlexible, 2, 0, 0});
  RunAttention(state, *cache);
}
BENCHMARK(BM_AttentionReadKv8x2Flexible)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace readkv::codec
