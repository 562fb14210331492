// `kvgate bench attention`'s input sets (attention_bench_sets.h): built on the device from the
// same seeded bfloat16 pages for every backend. Nothing here without nvcc.
#include "attention_bench_sets.h"

#if defined(KVGATE_HAVE_CUDA)
#include <cstring>
#include <stdexcept>

#include "kvgate/stats/random.h"
#include "bench_kernels.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/fp8.h"

namespace readkv::cuda::bench {
namespace {

constexpr int kAppendTokens = 16384;  // tokens per TileAppend call
constexpr int kCalibrationTokens = 4096;

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
  kvgate::stats::SplitMixRng rng(kvgate::stats::DeriveSeed(config.seed, 102));
  for (int h = 0; h < hkv; ++h) {
    const size_t base = static_cast<size_t>(h) * d;
    for (int c = 0; c < d; ++c) {
      dist.key_mean[base + c] = static_cast<float>(0.5 * rng.Normal());
      dist.value_mean[base + c] = static_cast<float>(0.2 * rng.Normal());
      dist.value_scale[base + c] = static_cast<float>(0.5 + rng.Uniform01());
    }
    for (int k = 0; k < 4; ++k) {
      dist.key_scale[base + static_cast<size_t>(rng.Next() % static_cast<uint64_t>(d))] = 8.0f;
    }
  }
  return dist;
}

float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float x = 0;
  std::memcpy(&x, &word, sizeof(x));
  return x;
}

}  // namespace

void Check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(what + ": " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
  }
}

std::vector<float> Download(const float* device, size_t n, const std::string& what) {
  std::vector<float> host(n);
  Check(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), what);
  return host;
}

PointGeometry MakeGeometry(const BenchConfig& config, int64_t tokens, int64_t batch) {
  PointGeometry g;
  g.shape.batch = static_cast<int>(batch);
  g.shape.heads_q = config.heads_q;
  g.shape.heads_kv = config.heads_kv;
  g.shape.head_dim = config.head_dim;
  g.shape.max_pages = static_cast<int>((tokens + kPageTokens - 1) / kPageTokens);
  kvgate::stats::SplitMixRng rng(kvgate::stats::DeriveSeed(
      config.seed, 101, static_cast<uint64_t>(tokens), static_cast<uint64_t>(batch)));
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

void CommonRegions::Reserve(InputSet& set, const PointGeometry& g) {
  const DecodeShape& s = g.shape;
  queries = set.Add(static_cast<size_t>(s.batch) * s.heads_q * s.head_dim * sizeof(float));
  page_table = set.Add(g.page_table.size() * sizeof(int32_t));
  seq_lens = set.Add(g.seq_lens.size() * sizeof(int32_t));
}

void CommonRegions::Fill(const InputSet& set, const PointGeometry& g,
                         const float* queries_device) const {
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

DecodeInputs CommonRegions::Inputs(const InputSet& set, int copy, float* out) const {
  DecodeInputs in;
  in.queries = set.At<const float>(copy, queries);
  in.page_table = set.At<const int32_t>(copy, page_table);
  in.seq_lens = set.At<const int32_t>(copy, seq_lens);
  in.out = out;
  return in;
}

size_t PageElements(const PointGeometry& g) {
  return static_cast<size_t>(g.num_pages) * g.shape.heads_kv * kPageTokens * g.shape.head_dim;
}

void BuildDense(DenseSet& dense, const PointGeometry& g, const BenchConfig& config,
                const float* queries, int64_t l2_bytes) {
  const DecodeShape& s = g.shape;
  const size_t page_elems = PageElements(g);
  dense.common.Reserve(dense.set, g);
  dense.k = dense.set.Add(page_elems * sizeof(uint16_t));
  dense.v = dense.set.Add(page_elems * sizeof(uint16_t));
  dense.set.Allocate(l2_bytes, "dense set");
  dense.common.Fill(dense.set, g, queries);
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
                             kvgate::stats::DeriveSeed(config.seed, 104), 0),
        "fill dense keys");
  Check(bench::FillPagesBf16(dense.set.At<uint16_t>(0, dense.v), g.num_pages, s.heads_kv,
                             s.head_dim, s.max_pages, owner.as<const int32_t>(), lens,
                             {vm.as<const float>(), vs.as<const float>()},
                             kvgate::stats::DeriveSeed(config.seed, 105), 0),
        "fill dense values");
  Check(cudaDeviceSynchronize(), "fill dense pages");
}

void BuildFp8(Fp8Set& fp8, const PointGeometry& g, const DenseSet& dense, const float* queries,
              int64_t l2_bytes) {
  const DecodeShape& s = g.shape;
  const size_t page_elems = PageElements(g);
  fp8.common.Reserve(fp8.set, g);
  fp8.k = fp8.set.Add(page_elems);
  fp8.v = fp8.set.Add(page_elems);
  fp8.k_scales = fp8.set.Add(static_cast<size_t>(s.heads_kv) * sizeof(float));
  fp8.v_scales = fp8.set.Add(static_cast<size_t>(s.heads_kv) * sizeof(float));
  fp8.set.Allocate(l2_bytes, "fp8 set");
  fp8.common.Fill(fp8.set, g, queries);
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

void ForEachTokenChunk(const PointGeometry& g, const DenseSet& dense,
                       const std::function<void(const TokenChunk&)>& body) {
  const DecodeShape& s = g.shape;
  const size_t hd = static_cast<size_t>(s.heads_kv) * s.head_dim;
  std::vector<int32_t> seq_ids, positions;
  seq_ids.reserve(static_cast<size_t>(g.context_tokens));
  positions.reserve(static_cast<size_t>(g.context_tokens));
  for (int b = 0; b < s.batch; ++b) {
    for (int32_t i = 0; i < g.seq_lens[static_cast<size_t>(b)]; ++i) {
      seq_ids.push_back(b);
      positions.push_back(i);
    }
  }
  const DeviceBuffer seq_ids_d = Upload(seq_ids, "gather seq_ids");
  const DeviceBuffer positions_d = Upload(positions, "gather positions");
  const auto chunk = static_cast<size_t>(std::min<int64_t>(kAppendTokens, g.context_tokens));
  const DeviceBuffer keys_f(chunk * hd * sizeof(float), "gathered keys");
  const DeviceBuffer values_f(chunk * hd * sizeof(float), "gathered values");
  const int32_t* table = dense.set.At<const int32_t>(0, dense.common.page_table);
  for (int64_t begin = 0; begin < g.context_tokens; begin += kAppendTokens) {
    TokenChunk c;
    c.begin = begin;
    c.n = static_cast<int>(std::min<int64_t>(kAppendTokens, g.context_tokens - begin));
    c.seq_ids = seq_ids_d.as<const int32_t>() + begin;
    c.positions = positions_d.as<const int32_t>() + begin;
    Check(bench::GatherTokensFloat(dense.set.At<const uint16_t>(0, dense.k), table, s.max_pages,
                                   s.heads_kv, s.head_dim, c.n, c.seq_ids, c.positions,
                                   keys_f.as<float>(), 0),
          "gather keys");
    Check(bench::GatherTokensFloat(dense.set.At<const uint16_t>(0, dense.v), table, s.max_pages,
                                   s.heads_kv, s.head_dim, c.n, c.seq_ids, c.positions,
                                   values_f.as<float>(), 0),
          "gather values");
    c.keys = keys_f.as<const float>();
    c.values = values_f.as<const float>();
    body(c);
  }
}

// Up to kCalibrationTokens tokens downloaded from the dense pages.
codec::Calibration CalibrateFromPages(const PointGeometry& g, const DenseSet& dense) {
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

void BuildAnchor(AnchorSet& anchor, const PointGeometry& g, const DenseSet& dense,
                 const float* queries, int64_t tokens, int64_t l2_bytes) {
  const DecodeShape& s = g.shape;
  const auto out_elems = static_cast<size_t>(s.batch) * s.heads_q * s.head_dim;
  const size_t kv_elems = static_cast<size_t>(s.batch) * s.heads_kv * tokens * s.head_dim;
  anchor.queries = anchor.set.Add(out_elems * sizeof(uint16_t));
  anchor.keys = anchor.set.Add(kv_elems * sizeof(uint16_t));
  anchor.values = anchor.set.Add(kv_elems * sizeof(uint16_t));
  anchor.set.Allocate(l2_bytes, "anchor set");
  const int32_t* table = dense.set.At<const int32_t>(0, dense.common.page_table);
  Check(bench::ConvertFloatToBf16(queries,
                                  anchor.set.At<uint16_t>(0, anchor.queries),
                                  static_cast<int64_t>(out_elems), 0),
        "anchor queries");
  Check(bench::GatherContiguousBf16(dense.set.At<const uint16_t>(0, dense.k), table, s.max_pages,
                                    s.batch, s.heads_kv, s.head_dim, tokens,
                                    anchor.set.At<uint16_t>(0, anchor.keys), 0),
        "anchor keys");
  Check(bench::GatherContiguousBf16(dense.set.At<const uint16_t>(0, dense.v), table, s.max_pages,
                                    s.batch, s.heads_kv, s.head_dim, tokens,
                                    anchor.set.At<uint16_t>(0, anchor.values), 0),
        "anchor values");
  Check(cudaDeviceSynchronize(), "anchor inputs");
}

}  // namespace readkv::cuda::bench

#endif  // KVGATE_HAVE_CUDA
