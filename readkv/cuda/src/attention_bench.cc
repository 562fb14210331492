// `kvgate bench attention`'s GPU run (attention_bench.h): per point, the paged caches and ReadKV
// codec tables built on the device, cold-L2 timing of every kernel and the torch anchor, the
// streaming-read bandwidth and the ledgers. Configuration and the report are in
// attention_bench_config.cc and attention_bench_report.cc.
#include "readkv/cuda/attention_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "readkv/codec/errors.h"
#include "readkv/cuda/codec_tables.h"
#include "readkv/cuda/device.h"

#if defined(KVGATE_HAVE_CUDA)
#include <cuda_runtime.h>

#include <memory>

#include "bench_kernels.h"
#include "readkv/codec/allocator.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/fp8.h"
#include "readkv/codec/random.h"
#include "readkv/codec/transform.h"
#endif

namespace readkv::cuda {

using codec::InvalidArgument;

// ---- The GPU run -----------------------------------------------------------------------------

#if !defined(KVGATE_HAVE_CUDA)

BenchReport RunAttentionBench(const BenchConfig& config, const Anchor*, std::ostream*) {
  config.Validate();
  throw std::runtime_error("no CUDA device: " + QueryDevices().reason);
}

#else

namespace {

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kAssumedL2Bytes = 60 * kMiB;  // issue 8: rotate past a 60 MiB L2
constexpr int kMaxLaunches = 2000;
constexpr int64_t kSpinNs = 200000;   // > the host's enqueue time of one (torch) call
constexpr int kAppendTokens = 16384;  // tokens per ReadKvAppend call
constexpr int kCalibrationTokens = 4096;
constexpr int kMaxCopies = 256;

void Check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(what + ": " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
  }
}

// Owns one device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes == 0) return;
    Check(cudaMalloc(&ptr_, bytes), "cudaMalloc " + std::to_string(bytes) + " bytes for " + what);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host, const std::string& what) {
  DeviceBuffer buffer(host.size() * sizeof(T), what);
  if (!host.empty()) {
    Check(
        cudaMemcpy(buffer.as<void>(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "upload " + what);
  }
  return buffer;
}

// An input set: named regions at 256-byte aligned offsets inside one copy, and `copies` copies
// of it back to back for the cold-L2 rotation. Copy 0 is filled, then Replicate() clones it.
class InputSet {
 public:
  size_t Add(size_t bytes) {
    const size_t offset = copy_bytes_;
    copy_bytes_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  void Allocate(int64_t l2_bytes, const std::string& what) {
    const auto copy = static_cast<int64_t>(copy_bytes_);
    // The N - 1 copies touched between two uses of a copy must hold >= 2 x L2.
    copies_ =
        copy > 2 * l2_bytes
            ? 1
            : static_cast<int>(std::min<int64_t>(kMaxCopies, (2 * l2_bytes + copy - 1) / copy + 1));
    storage_ = DeviceBuffer(copy_bytes_ * static_cast<size_t>(copies_), what);
  }
  void Replicate(const std::string& what) const {
    for (int k = 1; k < copies_; ++k) {
      Check(cudaMemcpy(Base(k), Base(0), copy_bytes_, cudaMemcpyDeviceToDevice),
            "replicate " + what);
    }
  }
  template <typename T>
  T* At(int copy, size_t offset) const {
    return reinterpret_cast<T*>(Base(copy) + offset);
  }
  int copies() const { return copies_; }
  size_t copy_bytes() const { return copy_bytes_; }

 private:
  char* Base(int copy) const {
    return storage_.as<char>() + copy_bytes_ * static_cast<size_t>(copy);
  }
  size_t copy_bytes_ = 0;
  int copies_ = 1;
  DeviceBuffer storage_;
};

// The host side of one (tokens, batch) point: lengths and a random page permutation.
struct PointGeometry {
  DecodeShape shape;
  int64_t num_pages = 0;
  int64_t context_tokens = 0;
  std::vector<int32_t> seq_lens;    // [B]
  std::vector<int32_t> page_table;  // [B][max_pages], unused entries 0
  std::vector<int32_t> page_owner;  // [P]: b * max_pages + page index within the sequence
};

PointGeometry MakeGeometry(const BenchConfig& config, int64_t tokens, int64_t batch) {
  PointGeometry g;
  g.shape.batch = static_cast<int>(batch);
  g.shape.heads_q = config.heads_q;
  g.shape.heads_kv = config.heads_kv;
  g.shape.head_dim = config.head_dim;
  g.shape.max_pages = static_cast<int>((tokens + kPageTokens - 1) / kPageTokens);
  g.shape.chunk_tokens = config.chunk_tokens;
  codec::SplitMix64 rng(codec::DeriveSeed(config.seed, 101, static_cast<uint64_t>(tokens),
                                          static_cast<uint64_t>(batch)));
  g.seq_lens.resize(static_cast<size_t>(batch));
  int64_t max_len = 0, min_len = tokens;
  for (auto& len : g.seq_lens) {
    int64_t l = tokens;
    if (config.ragged) {
      const int64_t lo = std::max<int64_t>(1, tokens / 2);
      l = lo + static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(tokens - lo + 1));
    }
    len = static_cast<int32_t>(l);
    max_len = std::max(max_len, l);
    min_len = std::min(min_len, l);
    g.context_tokens += l;
    g.num_pages += (l + kPageTokens - 1) / kPageTokens;
  }
  g.shape.max_tokens = static_cast<int>(max_len);
  g.shape.min_tokens = static_cast<int>(min_len);  // the dense and FP8 kernels' schedule hint
  std::vector<int32_t> perm(static_cast<size_t>(g.num_pages));
  for (size_t p = 0; p < perm.size(); ++p) perm[p] = static_cast<int32_t>(p);
  for (size_t p = perm.size(); p > 1; --p) {
    std::swap(perm[p - 1], perm[static_cast<size_t>(rng.Next() % p)]);
  }
  g.page_table.assign(static_cast<size_t>(batch) * g.shape.max_pages, 0);
  g.page_owner.assign(perm.size(), 0);
  size_t next = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = (g.seq_lens[static_cast<size_t>(b)] + kPageTokens - 1) / kPageTokens;
    for (int64_t j = 0; j < pages; ++j) {
      const int32_t page = perm[next++];
      const auto slot = static_cast<size_t>(b * g.shape.max_pages + j);
      g.page_table[slot] = page;
      g.page_owner[static_cast<size_t>(page)] = static_cast<int32_t>(slot);
    }
  }
  return g;
}

// Offsets of what every kernel reads besides its cache.
struct CommonRegions {
  size_t queries = 0, page_table = 0, seq_lens = 0;
  void Reserve(InputSet& set, const PointGeometry& g) {
    const DecodeShape& s = g.shape;
    queries = set.Add(static_cast<size_t>(s.batch) * s.heads_q * s.head_dim * sizeof(float));
    page_table = set.Add(g.page_table.size() * sizeof(int32_t));
    seq_lens = set.Add(g.seq_lens.size() * sizeof(int32_t));
  }
  // Copies the point's common inputs (device queries, host tables) into copy 0.
  void Fill(const InputSet& set, const PointGeometry& g, const float* queries_device) const {
    const DecodeShape& s = g.shape;
    Check(cudaMemcpy(set.At<float>(0, queries), queries_device,
                     static_cast<size_t>(s.batch) * s.heads_q * s.head_dim * sizeof(float),
                     cudaMemcpyDeviceToDevice),
          "copy queries");
    Check(cudaMemcpy(set.At<int32_t>(0, page_table), g.page_table.data(),
                     g.page_table.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
          "upload page table");
    Check(cudaMemcpy(set.At<int32_t>(0, seq_lens), g.seq_lens.data(),
                     g.seq_lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
          "upload seq_lens");
  }
  DecodeInputs Inputs(const InputSet& set, int copy, float* out) const {
    DecodeInputs in;
    in.queries = set.At<const float>(copy, queries);
    in.page_table = set.At<const int32_t>(copy, page_table);
    in.seq_lens = set.At<const int32_t>(copy, seq_lens);
    in.out = out;
    return in;
  }
};

// The seeded distribution of keys and values per (KV head, channel), like codec/synthetic.h:
// key means ~ N(0, 0.5^2), unit scale except 4 outlier channels per head with scale 8 (as real
// post-RoPE keys have); value means ~ N(0, 0.2^2), scales in [0.5, 1.5).
struct HostDistribution {
  std::vector<float> key_mean, key_scale, value_mean, value_scale;
};

HostDistribution MakeDistribution(const BenchConfig& config) {
  const int hkv = config.heads_kv;
  const int d = config.head_dim;
  HostDistribution dist;
  const auto n = static_cast<size_t>(hkv) * d;
  dist.key_mean.resize(n);
  dist.key_scale.assign(n, 1.0f);
  dist.value_mean.resize(n);
  dist.value_scale.resize(n);
  codec::SplitMix64 rng(codec::DeriveSeed(config.seed, 102));
  for (int h = 0; h < hkv; ++h) {
    const size_t base = static_cast<size_t>(h) * d;
    for (int c = 0; c < d; ++c) {
      dist.key_mean[base + c] = static_cast<float>(0.5 * rng.Normal());
      dist.value_mean[base + c] = static_cast<float>(0.2 * rng.Normal());
      dist.value_scale[base + c] = static_cast<float>(0.5 + rng.Uniform());
    }
    for (int k = 0; k < 4; ++k) {
      dist.key_scale[base + static_cast<size_t>(rng.Next() % static_cast<uint64_t>(d))] = 8.0f;
    }
  }
  return dist;
}

size_t PageElements(const PointGeometry& g) {
  return static_cast<size_t>(g.num_pages) * g.shape.heads_kv * kPageTokens * g.shape.head_dim;
}

struct DenseSet {
  InputSet set;
  CommonRegions common;
  size_t k = 0, v = 0;
  DenseCache Cache(int copy) const {
    return DenseCache{set.At<const uint16_t>(copy, k), set.At<const uint16_t>(copy, v)};
  }
};

struct Fp8Set {
  InputSet set;
  CommonRegions common;
  size_t k = 0, v = 0, k_scales = 0, v_scales = 0;
  Fp8Cache Cache(int copy) const {
    return Fp8Cache{set.At<const uint8_t>(copy, k), set.At<const uint8_t>(copy, v),
                    set.At<const float>(copy, k_scales), set.At<const float>(copy, v_scales)};
  }
};

struct ReadKvSet {
  int store_bits = 8;
  InputSet set;
  CommonRegions common;
  size_t key_planes = 0, value_planes = 0;
  size_t key_mean = 0, key_std = 0, value_mean = 0, value_std = 0, key_signs = 0, value_signs = 0,
         centroids = 0, boundaries = 0, key_increments = 0, value_increments = 0;
  int key_steps = 0, value_steps = 0;
  int64_t capacity_bytes = 0;  // planes + codec tables (ledger 1)
  ReadKvCache Cache(int copy) const {
    return ReadKvCache{set.At<uint8_t>(copy, key_planes), set.At<uint8_t>(copy, value_planes)};
  }
  ReadKvCodec Codec(int copy) const {
    ReadKvCodec c;
    c.store_bits = store_bits;
    c.key_mean = set.At<const float>(copy, key_mean);
    c.key_std = set.At<const float>(copy, key_std);
    c.value_mean = set.At<const float>(copy, value_mean);
    c.value_std = set.At<const float>(copy, value_std);
    c.key_signs = set.At<const float>(copy, key_signs);
    c.value_signs = set.At<const float>(copy, value_signs);
    c.centroids = set.At<const float>(copy, centroids);
    c.boundaries = set.At<const float>(copy, boundaries);
    return c;
  }
  ReadKvReadPolicy Policy(int copy, const KvSpec& spec) const {
    ReadKvReadPolicy p;
    p.key_bits = spec.key_bits;
    p.value_bits = spec.value_bits;
    p.key_increments = set.At<const double>(copy, key_increments);
    p.key_steps = key_steps;
    p.value_increments = set.At<const double>(copy, value_increments);
    p.value_steps = value_steps;
    return p;
  }
};

struct AnchorSet {
  InputSet set;
  size_t queries = 0, keys = 0, values = 0;
};

template <typename T>
void UploadTo(T* device, const std::vector<T>& host, const std::string& what) {
  Check(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "upload " + what);
}

float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float x = 0;
  std::memcpy(&x, &word, sizeof(x));
  return x;
}

// The calibration of the ReadKV codec, measured on the host (codec::Calibrator, transformed
// domain) from up to kCalibrationTokens tokens downloaded from the dense pages.
codec::Calibration Calibrate(const PointGeometry& g, const DenseSet& dense) {
  const int hkv = g.shape.heads_kv;
  const int d = g.shape.head_dim;
  codec::Calibrator calibrator(1, hkv, d);
  const size_t page_elems = static_cast<size_t>(hkv) * kPageTokens * d;
  std::vector<uint16_t> k_page(page_elems), v_page(page_elems);
  std::vector<float> key(static_cast<size_t>(d)), value(static_cast<size_t>(d));
  int64_t seen = 0;
  for (int b = 0; b < g.shape.batch && seen < kCalibrationTokens; ++b) {
    const int64_t len = g.seq_lens[static_cast<size_t>(b)];
    for (int64_t j = 0; j * kPageTokens < len && seen < kCalibrationTokens; ++j) {
      const int64_t page = g.page_table[static_cast<size_t>(b * g.shape.max_pages + j)];
      Check(cudaMemcpy(k_page.data(), dense.set.At<uint16_t>(0, dense.k) + page * page_elems,
                       page_elems * sizeof(uint16_t), cudaMemcpyDeviceToHost),
            "download calibration keys");
      Check(cudaMemcpy(v_page.data(), dense.set.At<uint16_t>(0, dense.v) + page * page_elems,
                       page_elems * sizeof(uint16_t), cudaMemcpyDeviceToHost),
            "download calibration values");
      const int64_t slots = std::min<int64_t>(kPageTokens, len - j * kPageTokens);
      for (int64_t s = 0; s < slots && seen < kCalibrationTokens; ++s, ++seen) {
        for (int h = 0; h < hkv; ++h) {
          const size_t row = (static_cast<size_t>(h) * kPageTokens + static_cast<size_t>(s)) * d;
          for (int c = 0; c < d; ++c) {
            key[static_cast<size_t>(c)] = Bf16BitsToFloat(k_page[row + static_cast<size_t>(c)]);
            value[static_cast<size_t>(c)] = Bf16BitsToFloat(v_page[row + static_cast<size_t>(c)]);
          }
          calibrator.Observe(0, h, key, value);
        }
      }
    }
  }
  return calibrator.Finish();
}

void BuildReadKv(ReadKvSet& rk, const PointGeometry& g, const DenseSet& dense, int64_t l2_bytes,
                 std::ostream* progress) {
  const DecodeShape& s = g.shape;
  const int w = rk.store_bits;
  const size_t hd = static_cast<size_t>(s.heads_kv) * s.head_dim;
  const ReadKvHostTables tables =
      MakeReadKvHostTables(codec::TransformSeeds{}, 1, s.heads_kv, s.head_dim, w);
  rk.key_steps = tables.key_steps;
  rk.value_steps = tables.value_steps;

  rk.common.Reserve(rk.set, g);
  rk.key_planes = rk.set.Add(static_cast<size_t>(g.num_pages) * hd * w * 32);
  rk.value_planes =
      rk.set.Add(static_cast<size_t>(g.num_pages) * s.heads_kv * kPageTokens * w * s.head_dim / 8);
  rk.key_mean = rk.set.Add(hd * sizeof(float));
  rk.key_std = rk.set.Add(hd * sizeof(float));
  rk.value_mean = rk.set.Add(hd * sizeof(float));
  rk.value_std = rk.set.Add(hd * sizeof(float));
  rk.key_signs = rk.set.Add(hd * sizeof(float));
  rk.value_signs = rk.set.Add(hd * sizeof(float));
  rk.centroids = rk.set.Add(((size_t{2} << w) - 1) * sizeof(float));
  rk.boundaries = rk.set.Add(((size_t{1} << w) - 1) * sizeof(float));
  rk.key_increments = rk.set.Add(tables.key_increments.size() * sizeof(double));
  rk.value_increments = rk.set.Add(tables.value_increments.size() * sizeof(double));
  rk.capacity_bytes = static_cast<int64_t>(rk.set.copy_bytes() - rk.key_planes);
  rk.set.Allocate(l2_bytes, "readkv:" + std::to_string(w) + " set");
  Check(cudaMemset(rk.set.At<char>(0, 0), 0, rk.set.copy_bytes()), "zero readkv planes");

  // Codec tables.
  const codec::Calibration cal = Calibrate(g, dense);
  UploadTo(rk.set.At<float>(0, rk.key_mean), cal.key_mean, "key_mean");
  UploadTo(rk.set.At<float>(0, rk.key_std), cal.key_std, "key_std");
  UploadTo(rk.set.At<float>(0, rk.value_mean), cal.value_mean, "value_mean");
  UploadTo(rk.set.At<float>(0, rk.value_std), cal.value_std, "value_std");
  UploadTo(rk.set.At<float>(0, rk.key_signs), tables.key_signs, "key_signs");
  UploadTo(rk.set.At<float>(0, rk.value_signs), tables.value_signs, "value_signs");
  UploadTo(rk.set.At<float>(0, rk.centroids), tables.centroids, "centroids");
  UploadTo(rk.set.At<float>(0, rk.boundaries), tables.boundaries, "boundaries");
  UploadTo(rk.set.At<double>(0, rk.key_increments), tables.key_increments, "increments");
  UploadTo(rk.set.At<double>(0, rk.value_increments), tables.value_increments, "increments");
  rk.common.Fill(rk.set, g, dense.set.At<float>(0, dense.common.queries));

  // Encode every token through the kernel's own append, in chunks of float rows gathered from
  // the dense pages, so all backends see the same (bfloat16) data.
  std::vector<int32_t> seq_ids, positions;
  seq_ids.reserve(static_cast<size_t>(g.context_tokens));
  positions.reserve(static_cast<size_t>(g.context_tokens));
  for (int b = 0; b < s.batch; ++b) {
    for (int32_t i = 0; i < g.seq_lens[static_cast<size_t>(b)]; ++i) {
      seq_ids.push_back(b);
      positions.push_back(i);
    }
  }
  const DeviceBuffer seq_ids_d = Upload(seq_ids, "append seq_ids");
  const DeviceBuffer positions_d = Upload(positions, "append positions");
  const auto chunk = static_cast<size_t>(std::min<int64_t>(kAppendTokens, g.context_tokens));
  const DeviceBuffer keys_f(chunk * hd * sizeof(float), "append keys");
  const DeviceBuffer values_f(chunk * hd * sizeof(float), "append values");
  const int32_t* table = rk.set.At<const int32_t>(0, rk.common.page_table);
  for (int64_t begin = 0; begin < g.context_tokens; begin += kAppendTokens) {
    const int n = static_cast<int>(std::min<int64_t>(kAppendTokens, g.context_tokens - begin));
    const int32_t* ids = seq_ids_d.as<const int32_t>() + begin;
    const int32_t* pos = positions_d.as<const int32_t>() + begin;
    Check(bench::GatherTokensFloat(dense.set.At<const uint16_t>(0, dense.k), table, s.max_pages,
                                   s.heads_kv, s.head_dim, n, ids, pos, keys_f.as<float>(), 0),
          "gather append keys");
    Check(bench::GatherTokensFloat(dense.set.At<const uint16_t>(0, dense.v), table, s.max_pages,
                                   s.heads_kv, s.head_dim, n, ids, pos, values_f.as<float>(), 0),
          "gather append values");
    Check(ReadKvAppend(s, n, keys_f.as<const float>(), values_f.as<const float>(), ids, pos, table,
                       rk.Codec(0), rk.Cache(0), 0),
          "ReadKvAppend");
  }
  Check(cudaDeviceSynchronize(), "ReadKvAppend (synchronise)");
  if (progress != nullptr) {
    *progress << "  readkv W=" << w << ": encoded " << g.context_tokens << " tokens, calibrated on "
              << cal.samples_per_head << "\n";
  }
}

// Times `launch(copy)` over rotating copies: a spin, then start event, launch, stop event.
TimingStats TimeLaunches(const std::function<void(int)>& launch, int copies,
                         const BenchConfig& config, const std::string& what) {
  cudaEvent_t start = nullptr, stop = nullptr;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  struct EventGuard {
    cudaEvent_t a, b;
    ~EventGuard() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } guard{start, stop};
  const int warmup = std::min(copies, 2);
  for (int k = 0; k < warmup; ++k) launch(k);
  Check(cudaDeviceSynchronize(), what + " (warm-up)");
  std::vector<double> times;
  double total_ms = 0;
  int copy = warmup % copies;
  while ((static_cast<int>(times.size()) < config.iters || total_ms < config.min_total_ms) &&
         static_cast<int>(times.size()) < std::max(kMaxLaunches, config.iters)) {
    Check(bench::Spin(kSpinNs, 0), "spin");
    Check(cudaEventRecord(start, 0), "cudaEventRecord");
    launch(copy);
    Check(cudaEventRecord(stop, 0), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), what);
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(1000.0 * ms);
    total_ms += ms;
    copy = (copy + 1) % copies;
  }
  return SummariseTimes(std::move(times));
}

std::vector<float> Download(const float* device, size_t n, const std::string& what) {
  std::vector<float> host(n);
  Check(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), what);
  return host;
}

bool AllFinite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

double RelativeL2(const std::vector<float>& x, const std::vector<float>& reference) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double diff = static_cast<double>(x[i]) - reference[i];
    num += diff * diff;
    den += static_cast<double>(reference[i]) * reference[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct DeviceInfo {
  std::string name;
  int sms = 1;
  int64_t l2_bytes = 0;
};

// Streaming-read bandwidth: a buffer far larger than the L2, read with 16-byte loads.
void MeasureStream(BenchReport& report, const DeviceInfo& device, int64_t bytes,
                   const BenchConfig& config, std::ostream* progress) {
  size_t free_bytes = 0, total_bytes = 0;
  Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  bytes = std::min<int64_t>(bytes, static_cast<int64_t>(free_bytes) * 6 / 10) / 4096 * 4096;
  const DeviceBuffer buffer(static_cast<size_t>(bytes), "streaming-read buffer");
  const DeviceBuffer sink(sizeof(uint32_t), "streaming-read sink");
  Check(cudaMemset(buffer.as<void>(), 1, static_cast<size_t>(bytes)), "fill streaming buffer");
  const int blocks = device.sms * 4;
  BenchConfig stream_config = config;
  stream_config.iters = 20;
  stream_config.min_total_ms = 0;
  report.stream_bytes = bytes;
  report.stream_time = TimeLaunches(
      [&](int) {
        Check(bench::StreamRead(buffer.as<const void>(), bytes, blocks, sink.as<uint32_t>(), 0),
              "stream read");
      },
      1, stream_config, "stream read");
  report.stream_gbps = static_cast<double>(bytes) / (report.stream_time.median_us * 1e3);
  if (progress != nullptr) {
    *progress << "streaming read: " << report.stream_gbps << " GB/s over " << bytes / kMiB
              << " MiB\n";
  }
}

int64_t DenseCopyBytes(const BenchConfig& config, int64_t tokens, int64_t batch) {
  const int64_t pages = batch * ((tokens + kPageTokens - 1) / kPageTokens);
  return 2 * pages * config.heads_kv * kPageTokens * config.head_dim * 2;
}

// Everything one (tokens, batch) point measures.
void RunPoint(const BenchConfig& config, int64_t tokens, int64_t batch, const Anchor* anchor,
              const DeviceInfo& device, BenchReport& report, std::ostream* progress) {
  const PointGeometry g = MakeGeometry(config, tokens, batch);
  const DecodeShape& s = g.shape;
  const size_t page_elems = PageElements(g);
  const size_t out_elems = static_cast<size_t>(s.batch) * s.heads_q * s.head_dim;
  if (progress != nullptr) {
    *progress << "T=" << tokens << " B=" << batch << ": " << g.context_tokens << " tokens in "
              << g.num_pages << " pages\n";
  }
  const bool want_fp8 = std::any_of(config.kv.begin(), config.kv.end(),
                                    [](const KvSpec& k) { return k.backend == KvBackend::kFp8; });
  std::set<int> readkv_widths;
  for (const KvSpec& k : config.kv) {
    if (k.backend == KvBackend::kReadKv) readkv_widths.insert(k.store_bits);
  }

  // Point-wide scratch.
  const DeviceBuffer queries(out_elems * sizeof(float), "queries");
  Check(bench::FillQueries(queries.as<float>(), s.batch, s.heads_q, s.head_dim,
                           codec::DeriveSeed(config.seed, 103), 0),
        "fill queries");
  const DeviceBuffer out(out_elems * sizeof(float), "output");
  const size_t workspace_bytes =
      std::max(SplitDecodeWorkspaceBytes(s),
               readkv_widths.empty() ? size_t{0} : ReadKvDecodeWorkspaceBytes(s));
  const DeviceBuffer workspace(std::max<size_t>(workspace_bytes, 256), "workspace");

  // Dense pages, generated on the GPU.
  DenseSet dense;
  dense.common.Reserve(dense.set, g);
  dense.k = dense.set.Add(page_elems * sizeof(uint16_t));
  dense.v = dense.set.Add(page_elems * sizeof(uint16_t));
  dense.set.Allocate(device.l2_bytes, "dense set");
  dense.common.Fill(dense.set, g, queries.as<float>());
  {
    const HostDistribution dist = MakeDistribution(config);
    const DeviceBuffer owner = Upload(g.page_owner, "page owners");
    const DeviceBuffer km = Upload(dist.key_mean, "key means");
    const DeviceBuffer ks = Upload(dist.key_scale, "key scales");
    const DeviceBuffer vm = Upload(dist.value_mean, "value means");
    const DeviceBuffer vs = Upload(dist.value_scale, "value scales");
    const int32_t* lens = dense.set.At<const int32_t>(0, dense.common.seq_lens);
    Check(bench::FillPagesBf16(dense.set.At<uint16_t>(0, dense.k), g.num_pages, s.heads_kv,
                               s.head_dim, s.max_pages, owner.as<const int32_t>(), lens,
                               {km.as<const float>(), ks.as<const float>()},
                               codec::DeriveSeed(config.seed, 104), 0),
          "fill dense keys");
    Check(bench::FillPagesBf16(dense.set.At<uint16_t>(0, dense.v), g.num_pages, s.heads_kv,
                               s.head_dim, s.max_pages, owner.as<const int32_t>(), lens,
                               {vm.as<const float>(), vs.as<const float>()},
                               codec::DeriveSeed(config.seed, 105), 0),
          "fill dense values");
    Check(cudaDeviceSynchronize(), "fill dense pages");
  }

  // FP8 pages from the dense ones, per-tensor scales amax / 448 with amax measured on the GPU.
  Fp8Set fp8;
  if (want_fp8) {
    fp8.common.Reserve(fp8.set, g);
    fp8.k = fp8.set.Add(page_elems);
    fp8.v = fp8.set.Add(page_elems);
    fp8.k_scales = fp8.set.Add(static_cast<size_t>(s.heads_kv) * sizeof(float));
    fp8.v_scales = fp8.set.Add(static_cast<size_t>(s.heads_kv) * sizeof(float));
    fp8.set.Allocate(device.l2_bytes, "fp8 set");
    fp8.common.Fill(fp8.set, g, queries.as<float>());
    const DeviceBuffer amax(2 * sizeof(uint32_t), "amax");
    Check(cudaMemset(amax.as<void>(), 0, 2 * sizeof(uint32_t)), "zero amax");
    Check(bench::AbsMaxBf16(dense.set.At<const uint16_t>(0, dense.k),
                            static_cast<int64_t>(page_elems), amax.as<uint32_t>(), 0),
          "key amax");
    Check(bench::AbsMaxBf16(dense.set.At<const uint16_t>(0, dense.v),
                            static_cast<int64_t>(page_elems), amax.as<uint32_t>() + 1, 0),
          "value amax");
    uint32_t amax_bits[2] = {0, 0};
    Check(cudaMemcpy(amax_bits, amax.as<void>(), sizeof(amax_bits), cudaMemcpyDeviceToHost),
          "download amax");
    float amax_values[2];
    std::memcpy(amax_values, amax_bits, sizeof(amax_values));
    const float k_scale = codec::Fp8ScaleFromAmax(amax_values[0]);
    const float v_scale = codec::Fp8ScaleFromAmax(amax_values[1]);
    UploadTo(fp8.set.At<float>(0, fp8.k_scales),
             std::vector<float>(static_cast<size_t>(s.heads_kv), k_scale), "k_scales");
    UploadTo(fp8.set.At<float>(0, fp8.v_scales),
             std::vector<float>(static_cast<size_t>(s.heads_kv), v_scale), "v_scales");
    Check(bench::ConvertBf16ToFp8(dense.set.At<const uint16_t>(0, dense.k),
                                  fp8.set.At<uint8_t>(0, fp8.k), static_cast<int64_t>(page_elems),
                                  k_scale, 0),
          "convert keys to fp8");
    Check(bench::ConvertBf16ToFp8(dense.set.At<const uint16_t>(0, dense.v),
                                  fp8.set.At<uint8_t>(0, fp8.v), static_cast<int64_t>(page_elems),
                                  v_scale, 0),
          "convert values to fp8");
    Check(cudaDeviceSynchronize(), "fp8 conversion");
  }

  // ReadKV planes through the kernels' own append, one set per W.
  std::vector<std::unique_ptr<ReadKvSet> > readkv;
  for (int w : readkv_widths) {
    readkv.push_back(std::make_unique<ReadKvSet>());
    readkv.back()->store_bits = w;
    BuildReadKv(*readkv.back(), g, dense, device.l2_bytes, progress);
  }

  // The anchor's contiguous copies (equal lengths only: it takes no mask).
  AnchorSet anchor_set;
  const bool run_anchor = anchor != nullptr && !config.ragged && report.anchor_note.empty();
  if (run_anchor) {
    const size_t kv_elems = static_cast<size_t>(s.batch) * s.heads_kv * tokens * s.head_dim;
    anchor_set.queries = anchor_set.set.Add(out_elems * sizeof(uint16_t));
    anchor_set.keys = anchor_set.set.Add(kv_elems * sizeof(uint16_t));
    anchor_set.values = anchor_set.set.Add(kv_elems * sizeof(uint16_t));
    anchor_set.set.Allocate(device.l2_bytes, "anchor set");
    const int32_t* table = dense.set.At<const int32_t>(0, dense.common.page_table);
    Check(bench::ConvertFloatToBf16(queries.as<const float>(),
                                    anchor_set.set.At<uint16_t>(0, anchor_set.queries),
                                    static_cast<int64_t>(out_elems), 0),
          "anchor queries");
    Check(bench::GatherContiguousBf16(dense.set.At<const uint16_t>(0, dense.k), table, s.max_pages,
                                      s.batch, s.heads_kv, s.head_dim, tokens,
                                      anchor_set.set.At<uint16_t>(0, anchor_set.keys), 0),
          "anchor keys");
    Check(bench::GatherContiguousBf16(dense.set.At<const uint16_t>(0, dense.v), table, s.max_pages,
                                      s.batch, s.heads_kv, s.head_dim, tokens,
                                      anchor_set.set.At<uint16_t>(0, anchor_set.values), 0),
          "anchor values");
    Check(cudaDeviceSynchronize(), "anchor inputs");
  }

  dense.set.Replicate("dense set");
  if (want_fp8) fp8.set.Replicate("fp8 set");
  for (const auto& rk : readkv) rk->set.Replicate("readkv set");
  if (run_anchor) anchor_set.set.Replicate("anchor set");

  // One untimed launch per backend for the outputs the correctness checks compare; out is
  // poisoned (NaN) first so a launch that writes nothing cannot pass.
  const auto poison = [&] {
    Check(cudaMemset(out.as<void>(), 0xFF, out_elems * sizeof(float)), "poison output");
  };
  float* out_ptr = out.as<float>();
  void* ws = workspace.as<void>();
  poison();
  Check(DenseDecodeAttention(s, dense.common.Inputs(dense.set, 0, out_ptr), dense.Cache(0), ws, 0),
        "DenseDecodeAttention");
  Check(cudaDeviceSynchronize(), "DenseDecodeAttention");
  const std::vector<float> reference = Download(out_ptr, out_elems, "download dense output");

  const size_t first_row = report.rows.size();
  for (const KvSpec& spec : config.kv) {
    BenchRow row;
    row.tokens = tokens;
    row.batch = batch;
    row.kv = spec.Name();
    row.context_tokens = g.context_tokens;
    std::function<void(int)> launch;
    std::vector<float> output;
    if (spec.backend == KvBackend::kDense) {
      launch = [&](int k) {
        Check(DenseDecodeAttention(s, dense.common.Inputs(dense.set, k, out_ptr), dense.Cache(k),
                                   ws, 0),
              "DenseDecodeAttention");
      };
      row.logical_bytes = DenseLogicalBytes(s, g.seq_lens.data());
      row.traffic = DenseDecodeTraffic(s, g.seq_lens.data());
      row.copies = dense.set.copies();
      row.copy_bytes = static_cast<int64_t>(dense.set.copy_bytes());
      row.capacity_bytes = static_cast<int64_t>(2 * page_elems * sizeof(uint16_t));
      row.workspace_bytes = static_cast<int64_t>(SplitDecodeWorkspaceBytes(s));
      output = reference;
    } else if (spec.backend == KvBackend::kFp8) {
      launch = [&](int k) {
        Check(Fp8DecodeAttention(s, fp8.common.Inputs(fp8.set, k, out_ptr), fp8.Cache(k), ws, 0),
              "Fp8DecodeAttention");
      };
      poison();
      launch(0);
      Check(cudaDeviceSynchronize(), "Fp8DecodeAttention");
      output = Download(out_ptr, out_elems, "download fp8 output");
      row.logical_bytes = Fp8LogicalBytes(s, g.seq_lens.data());
      row.traffic = Fp8DecodeTraffic(s, g.seq_lens.data());
      row.copies = fp8.set.copies();
      row.copy_bytes = static_cast<int64_t>(fp8.set.copy_bytes());
      row.capacity_bytes = static_cast<int64_t>(2 * page_elems + 2 * s.heads_kv * sizeof(float));
      row.workspace_bytes = static_cast<int64_t>(SplitDecodeWorkspaceBytes(s));
    } else {
      const ReadKvSet* rk = nullptr;
      for (const auto& candidate : readkv) {
        if (candidate->store_bits == spec.store_bits) rk = candidate.get();
      }
      launch = [&, rk, spec](int k) {
        Check(ReadKvDecodeAttention(s, rk->common.Inputs(rk->set, k, out_ptr), rk->Cache(k),
                                    rk->Codec(k), rk->Policy(k, spec), ws, 0),
              "ReadKvDecodeAttention");
      };
      // The depths this call chooses, for the ledgers, from one extra untimed launch.
      const size_t key_n = static_cast<size_t>(s.batch) * s.heads_kv * s.head_dim;
      const size_t value_n = static_cast<size_t>(s.batch) * s.heads_kv * s.max_tokens;
      const DeviceBuffer key_depths(key_n, "key depths");
      const DeviceBuffer value_depths(value_n, "value depths");
      ReadKvDebug debug;
      debug.key_depths = key_depths.as<uint8_t>();
      debug.value_depths = value_depths.as<uint8_t>();
      poison();
      Check(ReadKvDecodeAttention(s, rk->common.Inputs(rk->set, 0, out_ptr), rk->Cache(0),
                                  rk->Codec(0), rk->Policy(0, spec), ws, 0, debug),
            "ReadKvDecodeAttention (depths)");
      Check(cudaDeviceSynchronize(), "ReadKvDecodeAttention (depths)");
      output = Download(out_ptr, out_elems, "download readkv output");
      std::vector<uint8_t> kd(key_n), vd(value_n);
      Check(cudaMemcpy(kd.data(), key_depths.as<void>(), key_n, cudaMemcpyDeviceToHost),
            "download key depths");
      Check(cudaMemcpy(vd.data(), value_depths.as<void>(), value_n, cudaMemcpyDeviceToHost),
            "download value depths");
      row.logical_bytes = ReadKvLogicalBytes(s, g.seq_lens.data(), kd.data(), vd.data());
      row.traffic =
          ReadKvDecodeTraffic(s, g.seq_lens.data(), spec.store_bits, spec.key_bits, kd.data(),
                              vd.data());
      row.copies = rk->set.copies();
      row.copy_bytes = static_cast<int64_t>(rk->set.copy_bytes());
      row.capacity_bytes = rk->capacity_bytes;
      row.workspace_bytes = static_cast<int64_t>(ReadKvDecodeWorkspaceBytes(s));
      row.chunk_tokens = ReadKvChunkTokens(s);
    }
    if (progress != nullptr) *progress << "  timing " << row.kv << "\n";
    row.time = TimeLaunches(launch, row.copies, config, row.kv);
    row.finite = AllFinite(output);
    if (spec.backend != KvBackend::kDense) row.rel_l2_vs_dense = RelativeL2(output, reference);
    report.rows.push_back(row);
  }

  if (run_anchor) {
    BenchRow row;
    row.tokens = tokens;
    row.batch = batch;
    row.kv = anchor->name;
    row.anchor = true;
    row.context_tokens = g.context_tokens;
    row.logical_bytes = DenseLogicalBytes(s, g.seq_lens.data());
    row.traffic = DenseDecodeTraffic(s, g.seq_lens.data());
    row.copies = anchor_set.set.copies();
    row.copy_bytes = static_cast<int64_t>(anchor_set.set.copy_bytes());
    row.capacity_bytes =
        static_cast<int64_t>(2 * sizeof(uint16_t)) * s.batch * s.heads_kv * tokens * s.head_dim;
    row.workspace_bytes = -1;
    const auto inputs = [&](int k, float* o) {
      AnchorInputs in;
      in.batch = s.batch;
      in.heads_q = s.heads_q;
      in.heads_kv = s.heads_kv;
      in.head_dim = s.head_dim;
      in.tokens = tokens;
      in.queries = anchor_set.set.At<const void>(k, anchor_set.queries);
      in.keys = anchor_set.set.At<const void>(k, anchor_set.keys);
      in.values = anchor_set.set.At<const void>(k, anchor_set.values);
      in.out = o;
      return in;
    };
    try {
      poison();
      anchor->enqueue(inputs(0, out_ptr));
      Check(cudaDeviceSynchronize(), anchor->name);
      const std::vector<float> output = Download(out_ptr, out_elems, "download anchor output");
      if (progress != nullptr) *progress << "  timing " << row.kv << "\n";
      row.time = TimeLaunches([&](int k) { anchor->enqueue(inputs(k, nullptr)); }, row.copies,
                              config, row.kv);
      row.finite = AllFinite(output);
      row.rel_l2_vs_dense = RelativeL2(output, reference);
      report.rows.push_back(row);
    } catch (const std::exception& e) {
      // The outside anchor failing (e.g. torch out of memory) must not lose our own rows.
      cudaGetLastError();
      report.anchor_note = anchor->name + " failed at T=" + std::to_string(tokens) +
                           " B=" + std::to_string(batch) + ": " + e.what();
    }
  }

  // Ratios within the point.
  double fp8_us = 0, dense_us = 0;
  for (size_t i = first_row; i < report.rows.size(); ++i) {
    const BenchRow& r = report.rows[i];
    if (!r.anchor && r.kv == "fp8") fp8_us = r.time.median_us;
    if (!r.anchor && r.kv == "dense") dense_us = r.time.median_us;
  }
  for (size_t i = first_row; i < report.rows.size(); ++i) {
    BenchRow& r = report.rows[i];
    const double us = r.time.median_us;
    r.achieved_gbps = us > 0 ? static_cast<double>(r.traffic.Total()) / (us * 1e3) : 0;
    r.stream_fraction = report.stream_gbps > 0 ? r.achieved_gbps / report.stream_gbps : 0;
    r.time_vs_fp8 = fp8_us > 0 ? us / fp8_us : 0;
    r.time_vs_dense = dense_us > 0 ? us / dense_us : 0;
  }
}

}  // namespace

BenchReport RunAttentionBench(const BenchConfig& config, const Anchor* anchor,
                              std::ostream* progress) {
  config.Validate();
  const DeviceReport devices = QueryDevices();
  if (devices.device_count < 1) throw std::runtime_error("no CUDA device: " + devices.reason);
  Check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  DeviceInfo device;
  device.name = devices.first_device;
  device.sms = std::max(prop.multiProcessorCount, 1);
  device.l2_bytes = std::max<int64_t>(prop.l2CacheSize, kAssumedL2Bytes);

  BenchReport report;
  report.device = device.name;
  report.l2_bytes = prop.l2CacheSize;
  Check(cudaDriverGetVersion(&report.driver_version), "cudaDriverGetVersion");
  Check(cudaRuntimeGetVersion(&report.runtime_version), "cudaRuntimeGetVersion");
  std::ostringstream method;
  method << "rotation: each timed launch reads one of N copies of its whole input set (cache "
            "pages, queries, page table, lengths, scales/codec tables); the other N-1 copies "
            "hold >= 2 x "
         << device.l2_bytes / kMiB << " MiB (N = 1 when one copy is larger); a " << kSpinNs / 1000
         << " us GPU spin precedes each launch outside the timed events";
  report.cold_l2_method = method.str();
  if (anchor != nullptr && config.ragged) {
    report.anchor_note = anchor->name + " skipped: --ragged lengths need a mask it is not given";
  }

  int64_t largest = 4 * 1024 * kMiB;
  for (int64_t t : config.tokens) {
    for (int64_t b : config.batches) largest = std::max(largest, DenseCopyBytes(config, t, b));
  }
  MeasureStream(report, device, largest, config, progress);
  for (int64_t t : config.tokens) {
    for (int64_t b : config.batches) RunPoint(config, t, b, anchor, device, report, progress);
  }
  return report;
}

#endif  // KVGATE_HAVE_CUDA

}  // namespace readkv::cuda
