// The CUDA KV backends of the runtime (src/gpu_kv_cache.h) against the CPU codec caches on the
// same K/V and queries: paging across ragged sequences, prefill and batched decode appends, mixed
// per-sequence budgets, page reuse after a sequence ends, and the ledgers, for FP8 and for ReadKV
// (the tile reader, its one GPU reader); then the runtime on a CUDA device against the runtime on
// the CPU with the built-in model. Needs a CUDA device; skips without one (CI compiles it).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvgate/stats/random.h"
#include "../src/cuda_graph.h"
#include "../src/gpu_kv_cache.h"
#include "../src/llama_internal.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/synthetic.h"
#include "readkv/codec/tile_reader.h"
#include "readkv/model/evaluation.h"
#include "readkv/model/recall_data.h"
#include "readkv/model/runtime.h"
#include "readkv/model/tokenizer.h"

namespace readkv::model {
namespace {

bool HaveCuda() { return torch::cuda::is_available(); }

struct Geometry {
  int layers = 2, heads_q = 8, heads_kv = 2, head_dim = 64;
};

// Gaussian K/V with per-channel means and a few loud channels, [n][H_kv][d].
std::vector<float> RandomRows(kvgate::stats::SplitMixRng& rng, int64_t n, const Geometry& g,
                              bool keys) {
  std::vector<float> x(static_cast<size_t>(n * g.heads_kv * g.head_dim));
  for (size_t i = 0; i < x.size(); ++i) {
    const auto c = static_cast<int>(i % static_cast<size_t>(g.head_dim));
    const double scale = keys && c % 16 == 3 ? 6.0 : 1.0;
    x[i] = static_cast<float>((keys ? 0.3 * (c % 5) : 0.0) + scale * rng.Normal());
  }
  return x;
}

std::shared_ptr<const codec::Calibration> RandomCalibration(const Geometry& g) {
  kvgate::stats::SplitMixRng rng(0xca1);
  codec::Calibrator cal(g.layers, g.heads_kv, g.head_dim);
  for (int l = 0; l < g.layers; ++l) {
    const std::vector<float> k = RandomRows(rng, 512, g, true);
    const std::vector<float> v = RandomRows(rng, 512, g, false);
    for (int64_t i = 0; i < 512; ++i) {
      for (int h = 0; h < g.heads_kv; ++h) {
        const size_t off = static_cast<size_t>((i * g.heads_kv + h) * g.head_dim);
        cal.Observe(l, h, {k.data() + off, static_cast<size_t>(g.head_dim)},
                    {v.data() + off, static_cast<size_t>(g.head_dim)});
      }
    }
  }
  return std::make_shared<const codec::Calibration>(cal.Finish());
}

torch::Tensor OnGpu(const std::vector<float>& x, std::vector<int64_t> shape) {
  return torch::from_blob(const_cast<float*>(x.data()), shape, torch::kFloat).to(torch::kCUDA);
}

// Worst relative L2 error over (sequence, query head) rows of [B][H_q][d].
double WorstRowError(const std::vector<float>& gpu, const std::vector<float>& cpu, int d) {
  double worst = 0.0;
  for (size_t row = 0; row * static_cast<size_t>(d) < cpu.size(); ++row) {
    double num = 0.0, den = 0.0;
    for (int c = 0; c < d; ++c) {
      const size_t i = row * static_cast<size_t>(d) + static_cast<size_t>(c);
      num += (gpu[i] - cpu[i]) * static_cast<double>(gpu[i] - cpu[i]);
      den += static_cast<double>(cpu[i]) * cpu[i];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

struct BackendCase {
  codec::KvBackend kind = codec::KvBackend::kFp8;
  codec::Fp8ScaleGranularity scale = codec::Fp8ScaleGranularity::kTensor;
  int head_dim = 64;
  std::vector<internal::GpuReadBits> read_bits;  // R_K, R_V per sequence (readkv)
  int outlier_cap = 0;  // readkv: outlier lists written by TileAppend, applied by the reader
  int value_window = 0;  // readkv: Value budgets per window of this many tokens (the GPU's chunk)
  bool byte_keys = false;  // readkv: keys as uniform bytes (every sequence's R_K 8)
  bool one_pass_off = false;  // readkv: the two launches always (kvgate serve --one-pass off)
};

class GpuKvCacheTest : public ::testing::TestWithParam<BackendCase> {};

// Three ragged sequences prefilled, two batched decode steps, then one sequence ends and a new one
// reuses its pages; every attention output is checked against the CPU caches of the same tokens.
// FP8 gives the CPU's outputs within float rounding and its logical bytes exactly; the tile reader
// computes on tensor cores in f16 and its Value depths come from the GPU's own block weights
// (tests/tile_attention_test.cc in readkv/cuda): outputs within 0.1 of codec::TileAttend (below:
// why not that test's 2e-2), and its ledgers within 2% of the CPU's (the Key depths agree
// exactly, nearly every Value block does). With outlier lists (issue 36: every ~20th token 3x
// louder, so values past the tree's clip are common) the CPU caches keep the same lists; the
// GPU's list reads are exactly 8 bytes per token tile and KV head (K and V) plus 4 per entry of
// the CPU's stores, and its dropped counters are the CPU stores' (none out of order).
TEST_P(GpuKvCacheTest, MatchesTheCpuCachesAcrossPagesStepsAndReuse) {
  if (!HaveCuda()) GTEST_SKIP() << "no CUDA device";
  const BackendCase bc = GetParam();
  Geometry g;
  g.head_dim = bc.head_dim;
  const auto calibration = RandomCalibration(g);
  internal::GpuKvConfig config;
  config.kind = bc.kind;
  config.layers = g.layers;
  config.heads_q = g.heads_q;
  config.heads_kv = g.heads_kv;
  config.head_dim = g.head_dim;
  config.calibration = calibration;
  config.fp8_scale = bc.scale;
  config.store_bits = 8;
  config.value_window_tokens = bc.value_window;
  config.byte_keys = bc.byte_keys;
  config.one_pass = bc.one_pass_off ? readkv::cuda::OnePassMode::kOff : readkv::cuda::OnePassMode::kAuto;
  const codec::LloydTree tree(8);
  config.outliers = codec::ResolveOutlierOptions({bc.outlier_cap, 0.0f}, tree, g.head_dim);
  internal::GpuKvCache gpu(config);
  const bool tile = bc.kind == codec::KvBackend::kReadKv;  // ReadKV on the GPU: the tile reader

  std::map<uint64_t, std::vector<std::unique_ptr<codec::LayerKvCache>>> cpu;
  std::map<uint64_t, int64_t> length;
  auto start = [&](uint64_t id, internal::GpuReadBits bits) {
    gpu.AddSequence(id, bits);
    codec::LayerCacheConfig c;
    c.backend = bc.kind;
    c.geometry = {g.heads_q, g.heads_kv, g.head_dim};
    c.calibration = calibration;
    c.fp8_scale = bc.scale;
    c.store_bits = 8;
    c.policy = codec::ReadPolicy{codec::ReaderKind::kTile, 0.5 * (bits.key + bits.value), bits.key,
                                 bits.value};
    c.policy.value_window_tokens = bc.value_window;
    c.residual_window = false;  // the GPU backend encodes every token at once
    c.outliers = {bc.outlier_cap, 0.0f};
    c.byte_keys = bc.byte_keys;
    for (int l = 0; l < g.layers; ++l) {
      c.layer = l;
      cpu[id].push_back(codec::MakeLayerKvCache(c));
    }
    length[id] = 0;
  };
  kvgate::stats::SplitMixRng rng(0x6b0 + static_cast<uint64_t>(bc.head_dim));
  int64_t cpu_logical = 0, cpu_payload = 0;  // payload: the tile planes' sectors (tile only)
  int64_t list_reads = 0;  // what the GPU must count for the lists (tile_ledgers.h's terms)
  double worst = 0.0;
  // Appends `counts` tokens to each of `ids` on both sides and compares one attention per layer.
  auto step = [&](const std::vector<uint64_t>& ids, const std::vector<int64_t>& counts) {
    std::vector<int64_t> starts;
    int64_t total = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      starts.push_back(length[ids[i]]);
      total += counts[i];
    }
    const auto s = gpu.Begin(ids, starts, counts);
    const auto b = static_cast<int64_t>(ids.size());
    for (int l = 0; l < g.layers; ++l) {
      std::vector<float> k = RandomRows(rng, total, g, true);
      std::vector<float> v = RandomRows(rng, total, g, false);
      const size_t per_row = static_cast<size_t>(g.heads_kv * g.head_dim);
      for (int64_t t = 0; bc.outlier_cap > 0 && t < total; ++t) {
        if (rng.UniformIndex(20) != 0) continue;
        for (size_t j = 0; j < per_row; ++j) {
          k[static_cast<size_t>(t) * per_row + j] *= 3.0f;
          v[static_cast<size_t>(t) * per_row + j] *= 3.0f;
        }
      }
      std::vector<float> q(static_cast<size_t>(b * g.heads_q * g.head_dim));
      for (float& x : q) x = static_cast<float>(rng.Normal());
      gpu.Append(s, l, OnGpu(k, {total, g.heads_kv, g.head_dim}),
                 OnGpu(v, {total, g.heads_kv, g.head_dim}));
      const torch::Tensor out =
          gpu.Attend(s, l, OnGpu(q, {b, g.heads_q, g.head_dim})).to(torch::kCPU).contiguous();
      const std::vector<float> got(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
      std::vector<float> want(got.size());
      size_t row = 0;
      const size_t per_token = static_cast<size_t>(g.heads_kv * g.head_dim);
      const size_t per_query = static_cast<size_t>(g.heads_q * g.head_dim);
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto n = static_cast<size_t>(counts[i]);
        auto& layer = *cpu[ids[i]][static_cast<size_t>(l)];
        layer.AppendTokens({k.data() + row * per_token, n * per_token},
                           {v.data() + row * per_token, n * per_token});
        row += n;
        const std::span<const float> query(q.data() + i * per_query, per_query);
        const std::span<float> result(want.data() + i * per_query, per_query);
        if (tile) {  // the CPU tile reader itself, for its ledgers' payload
          const auto& cache = dynamic_cast<const codec::ReadKvLayerCache&>(layer);
          const codec::AttentionLedgers led = codec::TileAttend(cache.tile_view(), cache.plan(),
                                                                query, result);
          // The lists' part is compared exactly below (list_reads: the GPU layout's terms).
          cpu_logical += led.logical.Bytes() - led.logical.outlier_bits / 8;
          cpu_payload += led.physical.key_payload_bytes + led.physical.value_payload_bytes;
          for (int h = 0; bc.outlier_cap > 0 && h < g.heads_kv; ++h) {
            list_reads += 8 * ((cache.encoded_tokens() + 15) / 16) + 4 * cache.outliers(h).entries();
          }
        } else {
          cpu_logical += layer.Attend(query, result).logical.Bytes();
        }
      }
      const double e = WorstRowError(got, want, g.head_dim);
      // The tile reader's Value depths come from f16-MMA weights on the GPU and exact ones on
      // the CPU: where two blocks' gains tie within those last bits the budget goes to the other
      // one (the total stays: the logical bytes below agree), and a row whose weight sits on
      // few tiles then differs by one block's quantisation step. Measured on the H200
      // (2026-12-05): worst 0.052 (d 64) and 0.048 (d 128) in one step each, every other step
      // within 2e-2. Depth equality itself is TileKernelTest's (readkv/cuda); a wiring fault
      // (a wrong page, stale bits, another sequence's budget) is an error of order 1.
      EXPECT_LT(e, tile ? 0.1 : 1e-4) << "layer " << l;
      worst = std::max(worst, e);
    }
    for (size_t i = 0; i < ids.size(); ++i) length[ids[i]] += counts[i];
  };

  const std::vector<internal::GpuReadBits> bits =
      bc.read_bits.empty() ? std::vector<internal::GpuReadBits>(4) : bc.read_bits;
  start(1, bits[0]);
  start(2, bits[1]);
  start(3, bits[2]);
  step({1}, {1});
  step({2}, {300});  // a partly filled second page
  step({3}, {777});
  step({1, 2, 3}, {1, 1, 1});
  step({3, 1, 2}, {1, 1, 1});
  EXPECT_EQ(gpu.SequenceBytes(3), gpu.SequenceBytes(2) * 2);  // 4 pages against 2
  // Sequence 3 ends; a new one reuses its (non-zero) pages.
  gpu.RemoveSequence(3);
  EXPECT_EQ(gpu.SequenceBytes(3), 0);
  start(4, bits[3]);
  step({4}, {520});
  step({2, 4, 1}, {1, 1, 1});
  const internal::GpuKvLedgers led = gpu.ledgers();
  if (bc.outlier_cap > 0) {
    EXPECT_EQ(led.outlier_read_bytes, list_reads);
    int64_t past_cap = 0, over_budget = 0, entries = 0;
    for (const auto& [id, layers] : cpu) {  // every sequence's appends, 3's too
      for (const auto& layer : layers) {
        const auto& cache = dynamic_cast<const codec::ReadKvLayerCache&>(*layer);
        for (int h = 0; h < g.heads_kv; ++h) {
          entries += cache.outliers(h).entries();
          for (const auto* st : {&cache.outliers(h).key_stats(), &cache.outliers(h).value_stats()}) {
            past_cap += st->dropped() - st->over_budget;
            over_budget += st->over_budget;
          }
        }
      }
    }
    EXPECT_GT(entries, 50) << "the louder tokens must give lists";
    EXPECT_EQ(led.outlier_past_cap, past_cap);
    EXPECT_EQ(led.outlier_over_budget, over_budget);
    EXPECT_EQ(led.outlier_out_of_order, 0);
  }
  if (tile) {
    EXPECT_NEAR(static_cast<double>(led.logical_read_bytes - led.outlier_read_bytes),
                static_cast<double>(cpu_logical), 0.02 * static_cast<double>(cpu_logical));
    // Whole sectors of every plane read, plus the other launches' terms.
    EXPECT_GT(led.physical_traffic_bytes, cpu_payload * 98 / 100);
  } else {
    EXPECT_EQ(led.logical_read_bytes, cpu_logical);
  }
  EXPECT_GT(led.physical_traffic_bytes, led.logical_read_bytes);
  EXPECT_GT(led.workspace_peak_bytes, 0);
  EXPECT_GT(led.encode_seconds, 0.0);  // the appends' GPU time, by events
  EXPECT_LT(led.encode_seconds, 60.0);
  EXPECT_GT(led.attention_seconds, 0.0);  // the attention calls' GPU time, by events
  EXPECT_LT(led.attention_seconds, 60.0);
  std::cout << codec::KvBackendName(bc.kind) << (tile ? " tile" : "") << " d" << bc.head_dim
            << ": worst relative error "
            << worst << ", logical bytes " << led.logical_read_bytes << " (CPU " << cpu_logical
            << "), physical " << led.physical_traffic_bytes << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    Backends, GpuKvCacheTest,
    ::testing::Values(
        BackendCase{codec::KvBackend::kFp8, codec::Fp8ScaleGranularity::kTensor, 64, {}},
        BackendCase{codec::KvBackend::kFp8, codec::Fp8ScaleGranularity::kHead, 128, {}},
        // The tile reader (issue 37): one budget, then mixed budgets and splits (the policy's
        // 7:2 among them), d 128.
        BackendCase{codec::KvBackend::kReadKv, {}, 64, {{4, 4}, {4, 4}, {4, 4}, {4, 4}}},
        BackendCase{codec::KvBackend::kReadKv, {}, 128, {{7, 2}, {4, 4}, {7, 2}, {2, 2}}},
        // K/V splits: two R = 4 sequences with different splits are two groups.
        BackendCase{codec::KvBackend::kReadKv, {}, 64, {{4, 4}, {6, 2}, {8, 2}, {6, 2}}},
        // With outlier lists (issue 36), both head dims.
        BackendCase{codec::KvBackend::kReadKv, {}, 64, {{4, 4}, {7, 2}, {4, 4}, {2, 2}}, 2},
        BackendCase{codec::KvBackend::kReadKv, {}, 128, {{7, 2}, {4, 4}, {7, 2}, {2, 2}}, 2},
        // Value windows of 512 tokens (TileWindowValues), the served split 8:2, with lists.
        BackendCase{codec::KvBackend::kReadKv, {}, 64, {{8, 2}, {4, 4}, {8, 2}, {2, 2}}, 2, 512},
        // Byte keys (every sequence's keys whole): the served split with lists in windows of
        // 512, and d 128 in rows.
        BackendCase{codec::KvBackend::kReadKv, {}, 64, {{8, 2}, {8, 4}, {8, 2}, {8, 6}}, 2, 512,
                    true},
        // The same in the two launches, as `kvgate serve --one-pass off` runs it (the case above
        // runs in one pass: its rows' clusters fit).
        BackendCase{codec::KvBackend::kReadKv, {}, 64, {{8, 2}, {8, 4}, {8, 2}, {8, 6}}, 2, 512,
                    true, true},
        BackendCase{codec::KvBackend::kReadKv, {}, 128, {{8, 2}, {8, 8}, {8, 2}, {8, 4}}, 0, 0,
                    true}),
    [](const auto& p) {
      return std::string(codec::KvBackendName(p.param.kind)) +
             (p.param.kind == codec::KvBackend::kReadKv ? "_tile" : "") + "_d" +
             std::to_string(p.param.head_dim) +
             (p.param.scale == codec::Fp8ScaleGranularity::kHead ? "_head" : "") +
             (p.param.outlier_cap > 0 ? "_lists" : "") +
             (p.param.value_window > 0 ? "_w" + std::to_string(p.param.value_window) : "") +
             (p.param.byte_keys ? "_kbytes" : "") + (p.param.one_pass_off ? "_two" : "") +
             std::to_string(p.index);
    });

TEST(GpuKvCacheTest, RejectsGeometriesTheKernelsDoNotRun) {
  Geometry g;
  internal::GpuKvConfig config;
  config.kind = codec::KvBackend::kFp8;
  config.layers = g.layers;
  config.heads_q = 8;
  config.heads_kv = 2;
  config.head_dim = 32;
  config.calibration = RandomCalibration(g);
  EXPECT_THROW(internal::GpuKvCache{config}, std::invalid_argument);
  config.head_dim = 64;
  config.heads_q = 6;
  EXPECT_THROW(internal::GpuKvCache{config}, std::invalid_argument);
  config.heads_q = 8;
  config.kind = codec::KvBackend::kDense;
  EXPECT_THROW(internal::GpuKvCache{config}, std::invalid_argument);
  // Outlier lists: ReadKV's (the tile reader's) only, and only with the page blocks' budget;
  // refused before any device is touched.
  config.outliers = codec::ResolveOutlierOptions({2, 0.0f}, codec::LloydTree(8), 64);
  const auto field = [&config] {
    try {
      internal::GpuKvCache cache(config);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      return what.substr(0, what.find(':'));
    }
    return std::string("accepted");
  };
  config.kind = codec::KvBackend::kFp8;
  EXPECT_EQ(field(), "outlier_cap");
  config.kind = codec::KvBackend::kReadKv;
  config.outliers.block_cap = 100;
  EXPECT_EQ(field(), "outlier_block_cap");
  config.outliers = {};
  // Byte keys: the tile reader's, with W = 8.
  config.byte_keys = true;
  config.kind = codec::KvBackend::kFp8;
  EXPECT_EQ(field(), "byte_keys");
  config.kind = codec::KvBackend::kReadKv;
  config.store_bits = 6;
  EXPECT_EQ(field(), "byte_keys");
}

TEST(GpuRuntimeTest, RejectsWhatTheCudaBackendsDoNotRun) {
  RuntimeOptions o;
  o.device = "cuda";
  o.kv.kind = codec::KvBackend::kReadKv;
  o.kv.reader = codec::ReaderKind::kFlexible;
  EXPECT_THROW(ValidateRuntimeOptions(o), std::invalid_argument);
  o.kv.reader = codec::ReaderKind::kConstrained;  // its GPU kernels were removed (issue 37)
  EXPECT_THROW(ValidateRuntimeOptions(o), std::invalid_argument);
  o.kv.reader = codec::ReaderKind::kTile;
  ValidateRuntimeOptions(o);
  o.prefix_cache.directory = "/tmp/unused";
  EXPECT_THROW(ValidateRuntimeOptions(o), std::invalid_argument);
}

// Prefill attention on CUDA (torch's fused SDPA) against the CPU's chunked loop, without a past
// (SDPA's causal mask) and with one (a chunked prompt: the shifted lower-triangle mask), with a
// query count that is not a multiple of the CPU's 128-query chunks. fp32 on both.
TEST(GpuRuntimeTest, PrefillAttentionOnCudaMatchesTheCpuLoop) {
  if (!HaveCuda()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(20261130);
  for (const int64_t past : {0, 300}) {
    const int64_t n = 200;
    const torch::Tensor q = torch::randn({n, 4, 64});
    const torch::Tensor k = torch::randn({past + n, 2, 64});
    const torch::Tensor v = torch::randn({past + n, 2, 64});
    const torch::Tensor want = internal::CausalAttention(q, k, v, past);
    const torch::Tensor got =
        internal::CausalAttention(q.to(torch::kCUDA), k.to(torch::kCUDA), v.to(torch::kCUDA), past)
            .to(torch::kCPU);
    ASSERT_EQ(got.sizes(), want.sizes());
    const double gap = (got - want).abs().max().item<double>();
    std::cout << "prefill attention, past " << past << ": CUDA vs CPU worst |diff| " << gap
              << "\n";
    EXPECT_LT(gap, 1e-4) << "past " << past;
    // The last query sees every key; the first sees past + 1 of them: a key moved after it must
    // not change its output (the mask, not only the agreement, is checked).
    torch::Tensor k2 = k.clone();
    k2[past + n - 1] += 5.0;
    const torch::Tensor moved =
        internal::CausalAttention(q.to(torch::kCUDA), k2.to(torch::kCUDA), v.to(torch::kCUDA), past)
            .to(torch::kCPU);
    EXPECT_EQ((moved[0] - got[0]).abs().max().item<double>(), 0.0) << "past " << past;
    EXPECT_GT((moved[n - 1] - got[n - 1]).abs().max().item<double>(), 1e-3) << "past " << past;
  }
}

bool HaveBuiltinModel() {
  return std::filesystem::exists(DefaultModelDirectory() + "/calibration.json");
}

// The built-in model on CUDA with a KV backend (ReadKV: the tile reader at R = 6).
RuntimeOptions CudaOptions(codec::KvBackend kind) {
  RuntimeOptions options;
  options.device = "cuda";
  options.kv.kind = kind;
  options.kv.reader = codec::ReaderKind::kTile;
  options.kv.read_bits = 6;
  return options;
}

// What `kvgate serve --device cuda` runs: FP8, and ReadKV with its GPU reader (the tile reader).
struct CudaBackend {
  codec::KvBackend kind;
  std::string Name() const {
    return std::string(codec::KvBackendName(kind)) +
           (kind == codec::KvBackend::kReadKv ? " tile" : "");
  }
};
const CudaBackend kCudaBackends[] = {{codec::KvBackend::kFp8}, {codec::KvBackend::kReadKv}};

// The built-in model served on the GPU with each CUDA KV backend completes the same prompts as on
// the CPU with the codec's caches of the same kind (fp32 compute on both), and a ReadKV server
// refuses a request for a reader its pools were not written for (the constrained reader, which
// runs on the CPU only).
TEST(GpuRuntimeTest, BuiltinModelOnCudaAnswersAsOnTheCpu) {
  if (!HaveCuda()) GTEST_SKIP() << "no CUDA device";
  if (!HaveBuiltinModel()) GTEST_SKIP() << "no built-in model";
  ByteTokenizer tok;
  const std::vector<std::string> keys = {"68351", "4172", "90210", "31337"};
  const std::vector<std::string> prompts = {
      PasskeyPrompt(keys[0], 700, 0.3), PasskeyPrompt(keys[1], 1900, 0.9),
      PasskeyPrompt(keys[2], 500, 0.0), PasskeyPrompt(keys[3], 3000, 0.5)};
  for (const CudaBackend& backend : kCudaBackends) {
    const codec::KvBackend kind = backend.kind;
    const std::string name = backend.Name();
    const RuntimeOptions gpu_options = CudaOptions(kind);
    RuntimeOptions cpu_options = gpu_options;
    cpu_options.device = "cpu";
    ValidateRuntimeOptions(gpu_options);
    LlamaDecodeModel gpu(DefaultModelDirectory(), gpu_options);
    const auto on_gpu = GreedyCompleteBatch(gpu, tok, prompts, 8, {}, {});
    int correct = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      correct += FirstInteger(on_gpu[i].text).value_or("none") == keys[i];
    }
    EXPECT_GE(correct, 3) << name;
    EXPECT_GT(gpu.ledgers().logical_read_bytes, 0) << name;
    // Every sequence ended, pages returned.
    EXPECT_EQ(gpu.kv_bytes_in_use(), 0) << name;
    if (kind == codec::KvBackend::kReadKv) {
      // A request for another ReadKV reader cannot be read from these pools: refused by name.
      engine::ReadPolicy other;
      other.reader = "constrained";
      try {
        gpu.StartSequence(99, other);
        ADD_FAILURE() << name << ": a request for the " << *other.reader << " reader was served";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()).rfind("reader:", 0), 0u) << e.what();
      }
      EXPECT_EQ(gpu.kv_bytes_in_use(), 0) << name;
    }
    if (kind == codec::KvBackend::kFp8) {
      // FP8 on the CPU, the same prompts: the same text (the codes are bit-identical; only
      // float summation order differs).
      LlamaDecodeModel cpu(DefaultModelDirectory(), cpu_options);
      const auto on_cpu = GreedyCompleteBatch(cpu, tok, prompts, 8, {}, {});
      for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(on_gpu[i].text, on_cpu[i].text) << i;
    }
    std::cout << name << ": " << correct << "/4 passkeys on the GPU\n";
  }
}

// Decode steps through CUDA graphs (RuntimeOptions::cuda_graphs) against the same steps op by op,
// for FP8 and ReadKV (the KV backend's launches run between the graph segments):
// three sequences of different lengths decoded together, then two after one ends (a second batch
// size, captured at its first step), every step's logits compared. The graphs replay the same
// kernels on the same inputs, so the logits agree to the last bits unless cuBLAS picks other
// kernels under capture; the bound leaves room for that, not for a misplaced input.
TEST(GpuRuntimeTest, DecodeStepsThroughCudaGraphsGiveTheLogitsOfOpByOpSteps) {
  if (!HaveCuda()) GTEST_SKIP() << "no CUDA device";
  if (!HaveBuiltinModel()) GTEST_SKIP() << "no built-in model";
  if (!internal::CudaGraph::Supported()) GTEST_SKIP() << "this libtorch has no CUDA graphs";
  ByteTokenizer tok;
  const std::vector<std::vector<int32_t>> prompts = {
      tok.Encode(PasskeyPrompt("52719", 900, 0.4), true),
      tok.Encode(PasskeyPrompt("8146", 1500, 0.7), true),
      tok.Encode(PasskeyPrompt("30303", 300, 0.1), true)};
  for (const CudaBackend& backend : kCudaBackends) {
    const std::string name = backend.Name();
    SCOPED_TRACE(name);
    RuntimeOptions options = CudaOptions(backend.kind);
    options.cuda_graphs = "off";
    LlamaDecodeModel eager(DefaultModelDirectory(), options);
    options.cuda_graphs = "on";
    LlamaDecodeModel graphs(DefaultModelDirectory(), options);
    // One Forward of the live sequences on both models; returns the eager model's logits and
    // records the worst |difference| relative to the largest |logit|.
    double worst = 0.0;
    int steps = 0;
    const auto forward = [&](const std::vector<uint64_t>& ids,
                             const std::vector<std::vector<int32_t>>& tokens) {
      std::vector<std::vector<float>> out[2];
      LlamaDecodeModel* models[2] = {&eager, &graphs};
      for (int m = 0; m < 2; ++m) {
        std::vector<engine::SequenceStep> batch(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
          batch[i].sequence_id = ids[i];
          batch[i].tokens = tokens[i];
        }
        models[m]->Forward(batch);
        for (const engine::SequenceStep& s : batch) out[m].push_back(s.logits);
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        double scale = 0.0, gap = 0.0;
        for (size_t j = 0; j < out[0][i].size(); ++j) {
          scale = std::max(scale, static_cast<double>(std::abs(out[0][i][j])));
          gap = std::max(gap, static_cast<double>(std::abs(out[0][i][j] - out[1][i][j])));
        }
        worst = std::max(worst, gap / std::max(scale, 1e-30));
      }
      ++steps;
      return out[0];
    };
    const auto greedy = [](const std::vector<float>& logits) {
      return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                  logits.begin());
    };
    std::vector<uint64_t> ids = {1, 2, 3};
    for (uint64_t id : ids) {
      eager.StartSequence(id, {});
      graphs.StartSequence(id, {});
    }
    std::vector<std::vector<float>> logits = forward(ids, prompts);
    for (int t = 0; t < 10; ++t) {
      if (t == 6) {  // sequence 2 ends: batches of two from here on
        eager.EndSequence(2);
        graphs.EndSequence(2);
        ids = {1, 3};
        logits = {logits[0], logits[2]};
      }
      std::vector<std::vector<int32_t>> next;
      for (const std::vector<float>& l : logits) next.push_back({greedy(l)});
      logits = forward(ids, next);
    }
    std::cout << name << ": CUDA graphs vs op by op over " << steps
              << " steps, worst |logit diff| / max |logit| " << worst << "\n";
    EXPECT_LT(worst, 1e-5);
    EXPECT_EQ(graphs.kv_bytes_in_use(), eager.kv_bytes_in_use());
  }
}

// Chunked prefill on the GPU (engine::SequenceStep::logits_wanted, `kvgate serve
// --prefill-chunk`): a prompt fed in chunks gives the logits of the same prompt fed whole, at its
// last position and at the decode steps after it; the chunks' past is exact, and their appends
// go through GpuKvCache::Begin with starts > 0. Dense and ReadKV agree to float rounding (~4e-6
// of the largest logit). FP8 cannot be held to that: a chunk's K/V differ from the whole
// prompt's in the last bits (other GEMM shapes), and an element that sits on an e4m3 rounding
// boundary then lands one code (up to 1/8 of its size) away. Measured with this prompt (2026-11-30,
// H200 and the 2-core CPU): the last prompt position agrees to 4e-7 and the decode steps after it
// drift to 5.1e-3 with chunks of 256 or 64 -- on the CPU as on the GPU, the same numbers -- but
// stay within 2e-6 with chunks of 128, 320, 640 or 1280, and CPU vs GPU for the whole prompt is
// 4e-6: one boundary element, not a misplaced append (that gives errors near 1). So FP8 is held
// to the same greedy tokens at every position and a bound such an error cannot meet.
TEST(GpuRuntimeTest, APromptFedInChunksOnCudaGivesTheLogitsOfTheWholePrompt) {
  if (!HaveCuda()) GTEST_SKIP() << "no CUDA device";
  if (!HaveBuiltinModel()) GTEST_SKIP() << "no built-in model";
  ByteTokenizer tok;
  const std::vector<int32_t> all = tok.Encode(PasskeyPrompt("52719", 1300, 0.4), true);
  ASSERT_GT(all.size(), 1100u);
  const size_t prompt_len = all.size() - 12;  // the last 12 tokens are fed one at a time
  const std::span<const int32_t> prompt = std::span<const int32_t>(all).first(prompt_len);
  const auto step = [](LlamaDecodeModel& model, std::span<const int32_t> tokens, bool wanted) {
    engine::SequenceStep s;
    s.sequence_id = 1;
    s.tokens = tokens;
    s.logits_wanted = wanted;
    model.Forward(std::span<engine::SequenceStep>(&s, 1));
    EXPECT_EQ(s.logits.empty(), !wanted);
    return s.logits;
  };
  // The whole prompt, then the rest one token at a time: the logits of each wanted position.
  const auto whole_run = [&](LlamaDecodeModel& model) {
    model.StartSequence(1, {});
    std::vector<std::vector<float>> out = {step(model, prompt, true)};
    for (size_t t = prompt_len; t < all.size(); ++t) {
      out.push_back(step(model, std::span<const int32_t>(&all[t], 1), true));
    }
    return out;
  };
  const auto chunked_run = [&](LlamaDecodeModel& model) {
    model.StartSequence(1, {});
    std::vector<std::vector<float>> out;
    for (size_t at = 0; at < prompt_len; at += 256) {  // chunks of 256, the last shorter
      const size_t n = std::min<size_t>(256, prompt_len - at);
      std::vector<float> logits = step(model, prompt.subspan(at, n), at + n == prompt_len);
      if (!logits.empty()) out.push_back(std::move(logits));
    }
    for (size_t t = prompt_len; t < all.size(); ++t) {
      out.push_back(step(model, std::span<const int32_t>(&all[t], 1), true));
    }
    return out;
  };
  // Worst |difference| over every logit, relative to the largest |logit| of `want`; and whether
  // every position's greedy token agrees.
  const auto compare = [](const std::vector<std::vector<float>>& got,
                          const std::vector<std::vector<float>>& want, bool* same_tokens) {
    EXPECT_EQ(got.size(), want.size());
    double scale = 0.0, worst = 0.0;
    *same_tokens = got.size() == want.size();
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
      EXPECT_EQ(got[i].size(), want[i].size());
      for (float x : want[i]) scale = std::max(scale, static_cast<double>(std::abs(x)));
      for (size_t j = 0; j < std::min(got[i].size(), want[i].size()); ++j) {
        worst = std::max(worst, static_cast<double>(std::abs(got[i][j] - want[i][j])));
      }
      *same_tokens = *same_tokens && std::max_element(got[i].begin(), got[i].end()) -
                                             got[i].begin() ==
                                         std::max_element(want[i].begin(), want[i].end()) -
                                             want[i].begin();
    }
    return worst / std::max(scale, 1e-30);
  };
  for (const codec::KvBackend kind :
       {codec::KvBackend::kDense, codec::KvBackend::kFp8, codec::KvBackend::kReadKv}) {
    SCOPED_TRACE(codec::KvBackendName(kind));
    const RuntimeOptions options = CudaOptions(kind);
    LlamaDecodeModel whole(DefaultModelDirectory(), options);
    LlamaDecodeModel chunked(DefaultModelDirectory(), options);
    const auto want = whole_run(whole);
    const auto got = chunked_run(chunked);
    bool same_tokens = false;
    const double gap = compare(got, want, &same_tokens);
    EXPECT_TRUE(same_tokens);
    EXPECT_EQ(chunked.kv_bytes_in_use(), whole.kv_bytes_in_use());
    if (kind != codec::KvBackend::kFp8) {
      std::cout << codec::KvBackendName(kind)
                << ": chunked vs whole prompt on the GPU, worst |logit diff| / max |logit| " << gap
                << "\n";
      EXPECT_LT(gap, 1e-4);
      continue;
    }
    RuntimeOptions cpu_options = options;
    cpu_options.device = "cpu";
    LlamaDecodeModel cpu(DefaultModelDirectory(), cpu_options);
    bool cpu_same_tokens = false;
    const double cpu_gap = compare(whole_run(cpu), want, &cpu_same_tokens);
    std::cout << "fp8: chunked vs whole prompt on the GPU " << gap
              << " (worst |logit diff| / max |logit|); whole prompt, CPU vs GPU " << cpu_gap
              << "\n";
    EXPECT_TRUE(cpu_same_tokens);
    EXPECT_LT(cpu_gap, 1e-4);
    EXPECT_LT(gap, 0.05);
  }
}

}  // namespace
}  // namespace readkv::model
