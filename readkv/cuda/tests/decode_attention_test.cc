// GPU-vs-CPU consistency of the decode-attention and append kernels (readkv/cuda) against the
// codec's CPU reference (readkv/codec), over a grid of shapes with ragged paged sequences, fresh
// random inputs and poisoned outputs. Skips cleanly without a GPU.
//
// What must hold: ReadKvAppend writes exactly the codec's bit planes; the Key depths equal the
// CPU reader's for the same queries; the Value depths equal the CPU Threshold allocator's on the
// same importance weights; every output is finite and within tolerance of the CPU backend's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/allocator.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/fp8.h"
#include "readkv/codec/readers.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/synthetic.h"
#include "readkv/codec/transform.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"

namespace readkv::cuda {
namespace {

namespace codec = readkv::codec;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// A device buffer of T, freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(std::max<size_t>(count, 1)) {
    if (cudaMalloc(&ptr_, count_ * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  void Upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    cudaMemcpy(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  size_t count_;
  T* ptr_ = nullptr;
};

bool HaveGpu() { return QueryDevices().device_count > 0; }

struct Case {
  int heads_q, heads_kv, head_dim;
  std::vector<int> lens;
  int store_bits;
  double read_bits;
  int chunk_tokens;  // 0 = the launcher's choice
  bool zero_queries = false;  // every logit equal: every Value gain ties (the allocators' worst case)
  double key_bits = 0.0;      // R_K:R_V of a K/V split; both 0 = R_K = R_V = R
  double value_bits = 0.0;
  double KeyBits() const { return key_bits != 0.0 ? key_bits : read_bits; }
  double ValueBits() const { return value_bits != 0.0 ? value_bits : read_bits; }
  std::string Name() const {
    std::string lens_text;
    for (int t : lens) lens_text += std::to_string(t) + "_";
    return "hq" + std::to_string(heads_q) + "_hkv" + std::to_string(heads_kv) + "_d" +
           std::to_string(head_dim) + "_T" + lens_text + "W" + std::to_string(store_bits) + "_R" +
           std::to_string(static_cast<int>(read_bits * 10)) + "_c" + std::to_string(chunk_tokens) +
           (zero_queries ? "_q0" : "") +
           (key_bits != 0.0 ? "_K" + std::to_string(static_cast<int>(key_bits * 10)) + "V" +
                                  std::to_string(static_cast<int>(value_bits * 10))
                            : "");
  }
};

// Sequences of synthetic K/V (one SyntheticLayer per sequence) in a paged layout with a shuffled
// page order, plus the flat per-token arrays the append kernel takes.
struct Workload {
  codec::LayerGeometry geometry;
  DecodeShape shape;
  std::vector<codec::SyntheticLayer> layers;
  std::vector<float> queries;  // [B][H_q][d]
  std::vector<int32_t> page_table, seq_lens;
  int num_pages = 0;
  std::vector<float> keys, values;  // [n][H_kv][d]
  std::vector<int32_t> seq_ids, positions;
  std::shared_ptr<const codec::Calibration> calibration;
};

Workload MakeWorkload(const Case& c, uint64_t seed) {
  Workload w;
  w.geometry = {c.heads_q, c.heads_kv, c.head_dim};
  const int batch = static_cast<int>(c.lens.size());
  const int max_tokens = *std::max_element(c.lens.begin(), c.lens.end());
  w.shape = DecodeShape{batch, c.heads_q, c.heads_kv, c.head_dim,
                        (max_tokens + kPageTokens - 1) / kPageTokens, max_tokens, c.chunk_tokens,
                        *std::min_element(c.lens.begin(), c.lens.end())};
  codec::SyntheticConfig config;
  config.geometry = w.geometry;
  config.seed = seed;
  w.calibration = std::make_shared<codec::Calibration>(codec::MakeSyntheticCalibration(config));
  for (int b = 0; b < batch; ++b) {
    config.tokens = c.lens[static_cast<size_t>(b)];
    config.seed = seed * 1000 + static_cast<uint64_t>(b) + 1;
    w.layers.push_back(codec::MakeSyntheticLayer(config));
    auto& q = w.layers.back().queries;
    if (c.zero_queries) std::fill(q.begin(), q.end(), 0.0f);
    w.queries.insert(w.queries.end(), q.begin(), q.end());
    w.seq_lens.push_back(c.lens[static_cast<size_t>(b)]);
  }
  for (int len : c.lens) w.num_pages += (len + kPageTokens - 1) / kPageTokens;
  std::vector<int32_t> order(static_cast<size_t>(w.num_pages));
  std::iota(order.begin(), order.end(), 0);
  // Pages in a seeded order (Fisher-Yates on kvgate::stats' integer draws, the same everywhere).
  kvgate::stats::SplitMixRng rng(seed);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.UniformIndex(i)]);
  w.page_table.assign(static_cast<size_t>(batch) * w.shape.max_pages, -1);
  int next = 0;
  for (int b = 0; b < batch; ++b) {
    for (int p = 0; p < (c.lens[static_cast<size_t>(b)] + kPageTokens - 1) / kPageTokens; ++p) {
      w.page_table[static_cast<size_t>(b) * w.shape.max_pages + p] = order[static_cast<size_t>(next++)];
    }
    const auto& layer = w.layers[static_cast<size_t>(b)];
    w.keys.insert(w.keys.end(), layer.keys.begin(), layer.keys.end());
    w.values.insert(w.values.end(), layer.values.begin(), layer.values.end());
    for (int i = 0; i < c.lens[static_cast<size_t>(b)]; ++i) {
      w.seq_ids.push_back(b);
      w.positions.push_back(i);
    }
  }
  return w;
}

// Largest relative L2 error of the GPU output against a CPU output, per query head.
double MaxHeadError(const std::vector<float>& gpu, const std::vector<float>& cpu, size_t offset,
                    int heads, int d) {
  double worst = 0.0;
  for (int h = 0; h < heads; ++h) {
    double num = 0.0, den = 0.0;
    for (int c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(h) * d + c;
      const double diff = static_cast<double>(gpu[offset + i]) - cpu[i];
      num += diff * diff;
      den += static_cast<double>(cpu[i]) * cpu[i];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

bool AllFinite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

const std::vector<float> kNaNs(1, std::nanf(""));

class ReadKvKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReadKvKernelTest, AppendMatchesCodecPlanesAndDecodeMatchesCpuReader) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  const Case c = GetParam();
  const Workload w = MakeWorkload(c, 0x5eed + static_cast<uint64_t>(c.head_dim) + c.lens.size());
  const DecodeShape& s = w.shape;
  const int d = c.head_dim, W = c.store_bits, hkv = c.heads_kv;
  const codec::LloydTree tree(W);

  // CPU reference caches (constrained reader, no residual window: every token encoded).
  codec::LayerCacheConfig config;
  config.backend = codec::KvBackend::kReadKv;
  config.geometry = w.geometry;
  config.calibration = w.calibration;
  config.store_bits = W;
  config.policy =
      codec::ReadPolicy{codec::ReaderKind::kConstrained, c.read_bits, c.key_bits, c.value_bits};
  config.residual_window = false;
  std::vector<std::unique_ptr<codec::LayerKvCache>> cpu;
  for (const auto& layer : w.layers) {
    cpu.push_back(codec::MakeLayerKvCache(config));
    cpu.back()->AppendTokens(layer.keys, layer.values);
  }

  // Codec tables for the GPU.
  std::vector<float> key_signs, value_signs, centroids, boundaries;
  for (int h = 0; h < hkv; ++h) {
    const codec::HadamardTransform kt(d, w.calibration->seeds.KeySeed(0, h));
    const codec::HadamardTransform vt(d, w.calibration->seeds.ValueSeed(0, h));
    for (int8_t x : kt.signs()) key_signs.push_back(x);
    for (int8_t x : vt.signs()) value_signs.push_back(x);
  }
  for (int t = 0; t <= W; ++t) {
    for (float x : tree.centroids(t)) centroids.push_back(x);
  }
  // Leaf boundaries sorted: the thresholds of every depth merged.
  for (int t = 1; t <= W; ++t) {
    for (float x : tree.thresholds(t)) boundaries.push_back(x);
  }
  std::sort(boundaries.begin(), boundaries.end());
  const codec::DepthAllocator key_alloc(tree.distortions(), 1, 1);
  const codec::DepthAllocator value_alloc(tree.distortions(), 1, 2);
  std::vector<double> key_inc, value_inc;
  for (int k = 0; k < key_alloc.steps_per_object(); ++k) key_inc.push_back(key_alloc.increment(k));
  for (int k = 0; k < value_alloc.steps_per_object(); ++k) {
    value_inc.push_back(value_alloc.increment(k));
  }
  const auto calib_part = [&](const std::vector<float>& all) {
    return std::vector<float>(all.begin(), all.begin() + hkv * d);  // layer 0
  };
  DeviceBuffer<float> d_kmean(calib_part(w.calibration->key_mean));
  DeviceBuffer<float> d_kstd(calib_part(w.calibration->key_std));
  DeviceBuffer<float> d_vmean(calib_part(w.calibration->value_mean));
  DeviceBuffer<float> d_vstd(calib_part(w.calibration->value_std));
  DeviceBuffer<float> d_ksigns(key_signs), d_vsigns(value_signs), d_centroids(centroids),
      d_boundaries(boundaries);
  DeviceBuffer<double> d_kinc(key_inc), d_vinc(value_inc);
  const ReadKvCodec codec_tables{W,          d_kmean.get(),  d_kstd.get(),    d_vmean.get(),
                                 d_vstd.get(), d_ksigns.get(), d_vsigns.get(), d_centroids.get(),
                                 d_boundaries.get()};

  // Append on the GPU into zeroed pages.
  const size_t key_page_bytes = static_cast<size_t>(hkv) * d * W * 32;
  const size_t value_page_bytes = static_cast<size_t>(hkv) * kPageTokens * W * (d / 8);
  DeviceBuffer<uint8_t> d_kplanes(key_page_bytes * w.num_pages);
  DeviceBuffer<uint8_t> d_vplanes(value_page_bytes * w.num_pages);
  CUDA_OK(cudaMemset(d_kplanes.get(), 0, key_page_bytes * w.num_pages));
  CUDA_OK(cudaMemset(d_vplanes.get(), 0xA5, value_page_bytes * w.num_pages));
  DeviceBuffer<float> d_keys(w.keys), d_values(w.values);
  DeviceBuffer<int32_t> d_seq_ids(w.seq_ids), d_positions(w.positions), d_pages(w.page_table),
      d_lens(w.seq_lens);
  const ReadKvCache cache{d_kplanes.get(), d_vplanes.get()};
  CUDA_OK(ReadKvAppend(s, static_cast<int>(w.seq_ids.size()), d_keys.get(), d_values.get(),
                       d_seq_ids.get(), d_positions.get(), d_pages.get(), codec_tables, cache,
                       nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const auto kplanes = d_kplanes.Download(key_page_bytes * w.num_pages);
  const auto vplanes = d_vplanes.Download(value_page_bytes * w.num_pages);
  int64_t plane_mismatches = 0;
  for (size_t b = 0; b < w.layers.size(); ++b) {
    const auto& rk = dynamic_cast<const codec::ReadKvLayerCache&>(*cpu[b]);
    for (int h = 0; h < hkv; ++h) {
      const codec::BitPlaneStore& store = rk.store(h);
      for (int64_t blk = 0; blk < store.blocks(); ++blk) {
        const int page = w.page_table[b * s.max_pages + static_cast<size_t>(blk)];
        for (int ch = 0; ch < d; ++ch) {
          for (int p = 0; p < W; ++p) {
            const uint8_t* gpu = kplanes.data() + static_cast<size_t>(page) * key_page_bytes +
                                 ((static_cast<size_t>(h) * d + ch) * W + p) * 32;
            plane_mismatches += std::memcmp(gpu, store.KeyPlane(blk, ch, p), 32) != 0;
          }
        }
      }
      for (int64_t i = 0; i < store.tokens(); ++i) {
        const int page = w.page_table[b * s.max_pages + static_cast<size_t>(i / kPageTokens)];
        for (int p = 0; p < W; ++p) {
          const uint8_t* gpu =
              vplanes.data() + static_cast<size_t>(page) * value_page_bytes +
              ((static_cast<size_t>(h) * kPageTokens + i % kPageTokens) * W + p) * (d / 8);
          plane_mismatches += std::memcmp(gpu, store.ValuePlane(i, p), d / 8) != 0;
        }
      }
    }
  }
  EXPECT_EQ(plane_mismatches, 0) << "bit planes differ from readkv::codec";

  // Every logits kernel (KVGATE_READKV_LOGITS): the per-bit reader, the transposed one with 1, 2
  // and 4 pages per pass and the tensor-core one, each with the tensor-core Values reader; and the
  // CUDA-core Values reader (KVGATE_READKV_VALUES=lanes); both Values readers once more with the
  // launches chained by programmatic dependent launch (KVGATE_READKV_PDL=1); Select listing its
  // last gains (KVGATE_READKV_SELECT=list) under two logits readers.
  struct Variant {
    const char* logits;
    const char* values;
    const char* pdl;
    const char* select;
  };
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
    // One decode step on the GPU with poisoned outputs, and on the CPU per sequence.
    const ReadKvReadPolicy policy{c.KeyBits(), c.ValueBits(), d_kinc.get(),
                                  static_cast<int>(key_inc.size()), d_vinc.get(),
                                  static_cast<int>(value_inc.size())};
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
    // Two calls back to back on one stream and one workspace (the second's Prepare resets the
    // row state the first's last blocks used): same inputs, so bit-identical outputs.
    DeviceBuffer<float> d_first(std::vector<float>(out_size, kNaNs[0]));
    const DecodeInputs first{d_queries.get(), d_pages.get(), d_lens.get(), d_first.get()};
    CUDA_OK(ReadKvDecodeAttention(s, first, cache, codec_tables, policy, d_work.get(), nullptr,
                                  ReadKvDebug{}));
    const DecodeInputs inputs{d_queries.get(), d_pages.get(), d_lens.get(), d_out.get()};
    CUDA_OK(ReadKvDecodeAttention(s, inputs, cache, codec_tables, policy, d_work.get(), nullptr,
                                  debug));
    CUDA_OK(cudaDeviceSynchronize());
    const auto out = d_out.Download(out_size);
    const auto out_first = d_first.Download(out_size);
    EXPECT_EQ(std::memcmp(out.data(), out_first.data(), out_size * sizeof(float)), 0)
        << "two calls on the same inputs gave different outputs";
    const auto key_depths = d_kdepth.Download(depth_rows * d);
    const auto value_depths = d_vdepth.Download(depth_rows * s.max_tokens);
    const auto importance = d_importance.Download(depth_rows * s.max_tokens);
    const auto totals = d_totals.Download(2);
    // Select blocks that listed their last gains: none unless asked; with the listing, at most
    // one per Select block (8 per row at most). Whether any lists depends on how the gains fall
    // into the radix bins, so the count is printed for the GPU round to read, not asserted > 0.
    const unsigned listed = d_listed.Download(1)[0];
    if (std::strcmp(select, "list") == 0) {
      EXPECT_LE(listed, static_cast<unsigned>(s.batch * hkv * 8));
      std::cout << "[ select   ] " << c.Name() << " logits " << logits_variant
                << ": " << listed << " Select blocks listed their last gains\n";
    } else {
      EXPECT_EQ(listed, 0u) << "Select listed without KVGATE_READKV_SELECT=list";
    }
    ASSERT_TRUE(AllFinite(out)) << "an output stayed poisoned or became NaN";
    // The device ledgers: exactly the host ledgers of the depths the call chose (the logical
    // one in bits: ReadKvLogicalBytes rounds each call down to bytes).
    unsigned long long logical_bits = 0;
    for (int b = 0; b < s.batch; ++b) {
      const auto tokens = static_cast<unsigned long long>(w.seq_lens[static_cast<size_t>(b)]);
      for (int h = 0; h < hkv; ++h) {
        const size_t head = static_cast<size_t>(b) * hkv + h;
        for (int ch = 0; ch < d; ++ch) logical_bits += key_depths[head * d + ch] * tokens;
        for (size_t i = 0; i < tokens; ++i) {
          logical_bits += value_depths[head * s.max_tokens + i] * static_cast<unsigned>(d);
        }
      }
    }
    EXPECT_EQ(totals[0] - 7, logical_bits) << "logical bits summed on the device";
    EXPECT_EQ((totals[0] - 7) / 8,
              static_cast<unsigned long long>(ReadKvLogicalBytes(
                  s, w.seq_lens.data(), key_depths.data(), value_depths.data())));
    EXPECT_EQ(totals[1] - 11,
              static_cast<unsigned long long>(
                  ReadKvDecodeTraffic(s, w.seq_lens.data(), W, c.KeyBits(), key_depths.data(),
                                      value_depths.data()).payload))
        << "payload bytes summed on the device";

    const codec::ReaderPlan plan = codec::MakeReaderPlan(config.policy, W);
    const codec::ReaderAllocators allocators(plan, tree.distortions());
    codec::AllocatorScratch scratch;
    for (size_t b = 0; b < w.layers.size(); ++b) {
      const int T = w.seq_lens[b];
      // Key depths: the CPU reader's stage 1 on the same queries.
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
      EXPECT_TRUE(std::equal(cpu_depths.begin(), cpu_depths.end(), key_depths.begin() + b * hkv * d))
          << "sequence " << b << ": Key depths differ from the CPU reader's";
      // Value depths: the CPU Threshold allocator on the GPU's own weights.
      for (int h = 0; h < hkv; ++h) {
        const size_t row = (b * hkv + h) * static_cast<size_t>(s.max_tokens);
        std::vector<double> a(importance.begin() + row, importance.begin() + row + T);
        std::vector<uint8_t> expect(static_cast<size_t>(T));
        allocators.value.Threshold(a, plan.ValueBudget(T, 1), expect, scratch);
        EXPECT_TRUE(std::equal(expect.begin(), expect.end(), value_depths.begin() + row))
            << "sequence " << b << " head " << h << ": Value depths differ from the CPU allocator's";
      }
      // Outputs against the CPU reader.
      std::vector<float> cpu_out(static_cast<size_t>(c.heads_q) * d);
      cpu[b]->Attend(std::span<const float>(q, cpu_out.size()), cpu_out);
      EXPECT_LT(MaxHeadError(out, cpu_out, b * cpu_out.size(), c.heads_q, d), 2e-3)
          << "sequence " << b << " of length " << T;
    }
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

  // Every schedule (KVGATE_SPLIT_CLUSTER, split_work.h), each from a poisoned workspace and
  // poisoned outputs: the persistent one merges partials from the workspace; the cluster ones
  // must not touch it.
  const size_t work_bytes = SplitDecodeWorkspaceBytes(s);
  DeviceBuffer<char> d_work(work_bytes);
  for (const char* schedule : {"auto", "off", "1", "2", "4", "8"}) {
    SCOPED_TRACE(std::string("KVGATE_SPLIT_CLUSTER=") + schedule);
    ASSERT_EQ(setenv("KVGATE_SPLIT_CLUSTER", schedule, 1), 0);
    const std::vector<char> poison(work_bytes, static_cast<char>(0x7f));
    d_work.Upload(poison);
    DeviceBuffer<float> d_dense(std::vector<float>(out_size, kNaNs[0]));
    DeviceBuffer<float> d_fp8(std::vector<float>(out_size, kNaNs[0]));
    CUDA_OK(DenseDecodeAttention(s, {d_queries.get(), d_pages.get(), d_lens.get(), d_dense.get()},
                                 {d_kb.get(), d_vb.get()}, d_work.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(Fp8DecodeAttention(s, {d_queries.get(), d_pages.get(), d_lens.get(), d_fp8.get()},
                               {d_k8.get(), d_v8.get(), d_ks.get(), d_vs.get()}, d_work.get(),
                               nullptr));
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
  ASSERT_EQ(setenv("KVGATE_SPLIT_CLUSTER", "nine", 1), 0);  // not a schedule: refused
  DeviceBuffer<float> d_out(out_size);
  EXPECT_EQ(DenseDecodeAttention(s, {d_queries.get(), d_pages.get(), d_lens.get(), d_out.get()},
                                 {d_kb.get(), d_vb.get()}, d_work.get(), nullptr),
            cudaErrorInvalidValue);
  ASSERT_EQ(unsetenv("KVGATE_SPLIT_CLUSTER"), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, SplitKernelTest,
    ::testing::Values(Case{32, 8, 128, {300, 1, 1024, 777}, 8, 4.0, 0},
                      Case{32, 8, 128, {2048, 513}, 8, 4.0, 256},
                      Case{8, 8, 128, {600, 256}, 8, 4.0, 0},
                      Case{16, 2, 64, {1000, 255, 3000}, 8, 4.0, 512},
                      Case{16, 16, 64, {257, 40}, 8, 4.0, 0},
                      Case{64, 8, 128, {4096, 100}, 8, 4.0, 1024},
                      Case{16, 8, 128, {700, 3, 64}, 8, 4.0, 0},
                      // 128 equal heads: on an H200 the dense kernel's automatic schedule is
                      // clusters of 2 (SplitClusterSize), as at the bench's 32K x 16.
                      Case{32, 8, 128, std::vector<int>(16, 640), 8, 4.0, 0}),
    [](const ::testing::TestParamInfo<Case>& param) { return param.param.Name(); });

TEST(DecodeAttentionTest, LaunchersRefuseUnsafeShapes) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << QueryDevices().reason;
  DecodeShape s{1, 12, 8, 128, 1, 256, 0};  // 12 query heads over 8 KV heads: no integer group
  DecodeInputs in{};
  EXPECT_EQ(DenseDecodeAttention(s, in, {}, nullptr, nullptr), cudaErrorInvalidValue);
  s = DecodeShape{1, 8, 8, 96, 1, 256, 0};  // d = 96 has no kernel
  EXPECT_EQ(Fp8DecodeAttention(s, in, {}, nullptr, nullptr), cudaErrorInvalidValue);
  s = DecodeShape{1, 8, 8, 128, 1, 300, 0};  // more tokens than the page table can hold
  EXPECT_EQ(ReadKvDecodeAttention(s, in, {}, {}, {}, nullptr, nullptr), cudaErrorInvalidValue);
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
