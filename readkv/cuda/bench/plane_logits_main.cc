// readkv_plane_logits: a prototype of the binary-operand key read (docs/performance-notes.md,
// "Planes as binary operands"), to measure the design before a reader is built on it. Not a
// reader: every Key group is read at one depth t (no per-group depths, no Values, no outlier
// lists), and its layout is its own (below), not the tile pools'. It answers two questions:
//   1. Is it exact? The logits of a small problem from b1 MMAs against the CPU reference (the
//      8-bit query's dot product with the Lloyd tree's depth-t centroids, in double), and that
//      reference against the float query (the 8-bit query's own error). `--check` stops there;
//      `--emulate` runs the same check on the kernel's arithmetic emulated on the CPU (no GPU).
//   2. How fast? T x B, 32/8/128 (default 32K x 16), cold L2: the logits with their softmax
//      statistics kept on chip, every pair of channels at depth 1-4 (layouts 0 and 2) and at two
//      synthetic mixes of pair depths (layout 2), each beside the same plane bytes streamed with
//      no MMA, and FP8's key bytes (128 a token and KV head) streamed in the same run. Then the
//      Value side the same way (plane_values.cc): p . V of each 1024-token chunk with the
//      probabilities in 8 bits.
//
// The algebra (readkv/codec's plane_terms.h is its CPU reference): the tree's depth-t read of a
// code is sum over odd-sized plane sets S of a_S chi_S, chi_S = prod_{p in S} s_p, s_p = +-1; as
// bits, b_S = (chi_S + 1) / 2 = XOR of the planes in S (|S| odd). With the query quantised to 8
// bits, q_int = u - 128 (two's complement bits q^(j), weights w_j = 2^j, w_7 = -128):
//   q~ . C_t = scale sum_S a_S (2 sum_j w_j popc(q^(j) AND b_S) - sum_c q_int_c).
// The popcounts are MMA m16n8k128 .b1 AND-popc: A = b_S of 16 tokens x 128 channels, B = the 8
// bit planes of one query head (n = 8 columns, one per bit), masked to the channels read at the
// term's depth (plane_logits.h, "Key depths"). The a_S are applied as integers
// A_S = round(a_S 2^k), k the largest with no int32 overflow possible (an error of 2^-k-1 each,
// far below the 8-bit query's), so a term costs the warp 4 MMAs (the 4 query heads of a KV head)
// and 16 IMADs a lane, and a tile ends with one int-to-float per value.
//
// Layouts (this prototype's; plane_logits.h, PlaneWord): the A fragment of lane L for 16 tokens x
// 128 channels of one plane is a uint2: .x row L / 4, .y row L / 4 + 8, bit i of either the
// channel 32 (L % 4) + i; a tile's plane is 256 contiguous bytes, so nothing past a depth is read.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "plane_bench_host.h"
#include "plane_logits.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/plane_terms.h"

namespace {

using namespace readkv::cuda::plane_logits;
using namespace readkv::cuda::plane_logits::host;

// The keys in one of the prototype's layouts (plane_logits.h, PlaneWord).
std::vector<uint2> PackKeys(const Problem& p, int layout) {
  std::vector<uint2> out(static_cast<size_t>(p.batch) * p.heads * p.tiles() * kStoreBits * 32);
  for (size_t bh = 0; bh < static_cast<size_t>(p.batch) * p.heads; ++bh) {
    for (int tile = 0; tile < p.tiles(); ++tile) {
      for (int plane = 0; plane < kStoreBits; ++plane) {
        for (int lane = 0; lane < 32; ++lane) {
          uint32_t word[2] = {0, 0};
          for (int half = 0; half < 2; ++half) {
            const int token = tile * 16 + lane / 4 + 8 * half;
            const uint8_t* codes = &p.codes[(bh * p.tokens + token) * kDim];
            for (int i = 0; i < 32; ++i) {
              const int c = 32 * (lane % 4) + i;
              word[half] |= static_cast<uint32_t>((codes[c] >> (kStoreBits - 1 - plane)) & 1u) << i;
            }
          }
          out[PlaneWord(layout, bh, p.tiles(), tile, plane, lane)] = {word[0], word[1]};
        }
      }
    }
  }
  return out;
}

// Depths per row and pair ([B][H][kPairs]): every pair at `depth`, or (mix non-empty) each drawn
// with probabilities mix[t - 1] from `seed`.
std::vector<uint8_t> PairDepths(const Problem& p, int depth, const std::vector<double>& mix,
                                uint32_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(p.batch) * p.heads * kPairs,
                           static_cast<uint8_t>(depth));
  if (mix.empty()) return out;
  std::mt19937 rng(seed);
  std::discrete_distribution<int> draw(mix.begin(), mix.end());
  for (auto& d : out) d = static_cast<uint8_t>(1 + draw(rng));
  return out;
}

int MaxDepth(const std::vector<uint8_t>& depths) {
  return *std::max_element(depths.begin(), depths.end());
}

// Device inputs: per-depth query bit fragments, scales, constants, integer coefficients.
struct Query {
  std::vector<uint8_t> pair_depth;
  std::vector<uint32_t> bits;  // [B][H][kMaxDepth][G][32]
  std::vector<float> scale, constant;
  int coeff[kMaxDepth][kMaxTerms] = {};
  int shift = 0;
  std::vector<readkv::codec::QuantizedQuery> quantized;  // per (b, h, g), for the reference
};

Query MakeQuery(const Problem& p, std::vector<uint8_t> pair_depth) {
  // Every int32 the kernel forms, a lane's two weighted bits or the quad's sum of all eight, is
  // at most 2^k sum_t sum_S |a_{t,S}| 128 (popcounts) 255 (sum of |w_j|): one k for all depths.
  double sum_abs = 0.0;
  for (int t = 1; t <= kMaxDepth; ++t) sum_abs += IntegerCoefficients(t, 0).sum_abs;
  Query q;
  q.shift = ShiftFor(sum_abs, 128.0 * 255.0);
  long long coeff_sum[kMaxDepth] = {};
  for (int t = 1; t <= kMaxDepth; ++t) {
    const Coefficients c = IntegerCoefficients(t, q.shift);
    std::copy(std::begin(c.coeff), std::end(c.coeff), std::begin(q.coeff[t - 1]));
    coeff_sum[t - 1] = c.sum;
  }
  const size_t rows = static_cast<size_t>(p.batch) * p.heads, n = rows * kGroup;
  q.pair_depth = std::move(pair_depth);
  q.bits.assign(rows * kMaxDepth * kGroup * 32, 0);
  q.scale.resize(n);
  q.constant.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t bh = i / kGroup;
    const int g = static_cast<int>(i % kGroup);
    const std::span<const float> row(&p.queries[i * kDim], kDim);
    readkv::codec::QuantizedQuery qq = readkv::codec::QuantizeQuery(row);
    double constant = 0.0;
    for (int c = 0; c < kDim; ++c) {
      const int t = q.pair_depth[bh * kPairs + c / 32];
      const int q_int = static_cast<int>(qq.u[c]) - 128;
      constant += static_cast<double>(coeff_sum[t - 1]) * q_int;
      const auto byte = static_cast<uint8_t>(static_cast<int8_t>(q_int));
      uint32_t* bits = &q.bits[((bh * kMaxDepth + (t - 1)) * kGroup + g) * 32];
      for (int j = 0; j < 8; ++j) {
        // Lane L holds column L / 4 (bit j = L / 4) over channels 32 (L % 4) + bit.
        if ((byte >> j) & 1u) bits[4 * j + c / 32] |= 1u << (c % 32);
      }
    }
    const double unit = qq.scale * std::ldexp(1.0, -q.shift);
    q.scale[i] = static_cast<float>(2.0 * unit);
    q.constant[i] = static_cast<float>(unit * constant);
    q.quantized.push_back(std::move(qq));
  }
  return q;
}

struct DeviceProblem {
  uint2* keys = nullptr;
  uint8_t* pair_depth = nullptr;
  uint32_t* qbits = nullptr;
  float *scale = nullptr, *constant = nullptr, *out = nullptr;
};

// One call of the logits kernel over the problem.
cudaError_t Launch(int layout, bool write, const Problem& p, const DeviceProblem& d,
                   const Query& q) {
  Args a;
  a.layout = layout;
  a.keys = d.keys;
  a.pair_depth = d.pair_depth;
  a.qbits = d.qbits;
  a.scale = d.scale;
  a.constant = d.constant;
  std::memcpy(a.coeff, q.coeff, sizeof a.coeff);
  a.heads_kv = p.heads;
  a.tiles = p.tiles();
  a.logits = d.out;
  a.stats = d.out;
  return LaunchPlaneLogits(MaxDepth(q.pair_depth), write, a, p.batch);
}

// The device side; keys from `keys`, or random words when it is empty.
DeviceProblem Upload(const Problem& p, const std::vector<uint2>& keys, size_t out_floats) {
  DeviceProblem d;
  const size_t words = static_cast<size_t>(p.batch) * p.heads * p.tiles() * kStoreBits * 32;
  OK(cudaMalloc(&d.keys, words * sizeof(uint2)));
  if (keys.empty()) {
    OK(LaunchFillRandom(d.keys, words));
  } else {
    OK(cudaMemcpy(d.keys, keys.data(), words * sizeof(uint2), cudaMemcpyHostToDevice));
  }
  const size_t rows = static_cast<size_t>(p.batch) * p.heads, n = rows * kGroup;
  OK(cudaMalloc(&d.pair_depth, rows * kPairs));
  OK(cudaMalloc(&d.qbits, rows * kMaxDepth * kGroup * 32 * 4));
  OK(cudaMalloc(&d.scale, n * 4));
  OK(cudaMalloc(&d.constant, n * 4));
  OK(cudaMalloc(&d.out, out_floats * 4));
  return d;
}

void SetQuery(const DeviceProblem& d, const Query& q) {
  OK(cudaMemcpy(d.pair_depth, q.pair_depth.data(), q.pair_depth.size(), cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d.qbits, q.bits.data(), q.bits.size() * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d.scale, q.scale.data(), q.scale.size() * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d.constant, q.constant.data(), q.constant.size() * 4, cudaMemcpyHostToDevice));
}

void Free(const DeviceProblem& d) {
  cudaFree(d.keys);
  cudaFree(d.pair_depth);
  cudaFree(d.qbits);
  cudaFree(d.scale);
  cudaFree(d.constant);
  cudaFree(d.out);
}

// The kernel's arithmetic on the CPU, from the same packed keys and query words, with the
// fragment layout plane_logits.h assumes (a pair's planes past its depth read as zero): what
// `--emulate` checks without a GPU (packing, coefficients, constants; ProbeLayout checks the
// layout itself on the GPU).
std::vector<float> EmulateLogits(const Problem& p, const std::vector<uint2>& keys, int layout,
                                 const Query& q) {
  std::vector<float> out(static_cast<size_t>(p.batch) * p.heads * kGroup * p.tokens);
  for (size_t bh = 0; bh < static_cast<size_t>(p.batch) * p.heads; ++bh) {
    for (int tile = 0; tile < p.tiles(); ++tile) {
      for (int g = 0; g < kGroup; ++g) {
        const size_t qi = bh * kGroup + g;
        for (int row = 0; row < 16; ++row) {
          long long v = 0;
          for (int t = 1; t <= kMaxDepth; ++t) {
            int masks[kMaxTerms];
            const int terms = OddMasks(t, masks);
            const uint32_t* bits = &q.bits[((bh * kMaxDepth + (t - 1)) * kGroup + g) * 32];
            for (int s = 0; s < terms; ++s) {
              for (int j = 0; j < 8; ++j) {
                int popc = 0;
                for (int k = 0; k < 4; ++k) {
                  const int lane = 4 * (row % 8) + k, pair_depth = q.pair_depth[bh * kPairs + k];
                  uint32_t word = 0;
                  for (int plane = 0; plane < t && plane < pair_depth; ++plane) {
                    if ((masks[s] >> plane) & 1) {
                      const uint2 w = keys[PlaneWord(layout, bh, p.tiles(), tile, plane, lane)];
                      word ^= row < 8 ? w.x : w.y;
                    }
                  }
                  popc += __builtin_popcount(word & bits[4 * j + k]);
                }
                v += static_cast<long long>(q.coeff[t - 1][s]) * (j == 7 ? -128 : 1 << j) * popc;
              }
            }
          }
          if (v > 2147483647LL || v < -2147483648LL) {
            std::fprintf(stderr, "readkv_plane_logits: int32 overflow (keys)\n");
            std::exit(1);
          }
          out[qi * p.tokens + tile * 16 + row] =
              static_cast<float>(static_cast<int>(v)) * q.scale[qi] - q.constant[qi];
        }
      }
    }
  }
  return out;
}

// Every logit of a small problem at depths 1-4 and at mixed depths against the CPU reference:
// from the GPU, or from EmulateLogits when `emulate` (no CUDA call at all).
bool CheckLogits(bool emulate, int layout) {
  const Problem p = MakeProblem(2, 2, 1024, 11, /*with_codes=*/true);
  const std::vector<uint2> keys = PackKeys(p, layout);
  const size_t logits = static_cast<size_t>(p.batch) * p.heads * kGroup * p.tokens;
  DeviceProblem d;
  if (!emulate) d = Upload(p, keys, logits);
  const readkv::codec::LloydTree tree(kStoreBits);
  bool ok = true;
  for (int depth = 1; depth <= kMaxDepth + 1; ++depth) {  // kMaxDepth + 1: mixed
    const bool mixed = depth > kMaxDepth;
    const Query q = MakeQuery(
        p, PairDepths(p, depth, mixed ? std::vector<double>{1, 1, 1, 1} : std::vector<double>{},
                      17));
    std::vector<float> got(logits);
    if (emulate) {
      got = EmulateLogits(p, keys, layout, q);
    } else {
      SetQuery(d, q);
      OK(Launch(layout, /*write=*/true, p, d, q));
      OK(cudaMemcpy(got.data(), d.out, logits * 4, cudaMemcpyDeviceToHost));
    }
    double max_ref = 0.0, max_err = 0.0, err2 = 0.0, ref2 = 0.0;
    for (size_t bh = 0; bh < static_cast<size_t>(p.batch) * p.heads; ++bh) {
      for (int g = 0; g < kGroup; ++g) {
        const size_t qi = bh * kGroup + g;
        const readkv::codec::QuantizedQuery& qq = q.quantized[qi];
        for (int t = 0; t < p.tokens; ++t) {
          const uint8_t* codes = &p.codes[(bh * p.tokens + t) * kDim];
          double ref = 0.0, exact = 0.0;
          for (int c = 0; c < kDim; ++c) {
            const double centroid = tree.Decode(codes[c], q.pair_depth[bh * kPairs + c / 32]);
            ref += qq.Value(c) * centroid;
            exact += static_cast<double>(p.queries[qi * kDim + c]) * centroid;
          }
          const double x = got[qi * p.tokens + t];
          max_ref = std::max(max_ref, std::fabs(ref));
          max_err = std::max(max_err, std::fabs(x - ref));
          err2 += (ref - exact) * (ref - exact);
          ref2 += exact * exact;
        }
      }
    }
    const double rel = max_err / max_ref;
    // The integer coefficients' rounding (2^-k-1 each) is the only error besides f32 sums.
    const bool pass = rel < 1e-3;
    ok = ok && pass;
    char what[32];
    std::snprintf(what, sizeof what, mixed ? "mixed depths" : "depth %d", depth);
    std::printf("check keys, %s, layout %d (%s): max |logit - reference| / max |logit| = %.2e "
                "(%s; k = %d); 8-bit query against float: relative L2 %.2e\n",
                what, layout, emulate ? "CPU emulation" : "GPU", rel, pass ? "ok" : "FAIL",
                q.shift, std::sqrt(err2 / ref2));
  }
  if (!emulate) Free(d);
  return ok;
}

// T x B at uniform depths 1-4 (layouts 0 and 2) and at two mixes of pair depths (layout 2),
// each beside the same plane bytes streamed; prints a line each and appends JSON rows.
void TimeKeys(const Problem& p, int reps, void* flush, size_t flush_bytes, uint32_t* sink,
              float fp8_us, std::string& rows) {
  const int warps = WarpsPerRow(p.tiles());
  const size_t stats = static_cast<size_t>(p.batch) * p.heads * warps * kGroup * 2;
  DeviceProblem d = Upload(p, {}, stats);
  const double tiles = static_cast<double>(p.batch) * p.heads * p.tiles();
  struct Case {
    const char* name;
    int layout, depth;
    std::vector<double> mix;
  };
  // Two synthetic mixes of pair depths (not an allocator's output): mean 2.0 and mean 2.8.
  const std::vector<Case> cases = {
      {"depth 1", 0, 1, {}}, {"depth 2", 0, 2, {}}, {"depth 3", 0, 3, {}}, {"depth 4", 0, 4, {}},
      {"depth 1", 2, 1, {}}, {"depth 2", 2, 2, {}}, {"depth 3", 2, 3, {}}, {"depth 4", 2, 4, {}},
      {"mix 35/40/15/10", 2, 0, {0.35, 0.40, 0.15, 0.10}},
      {"mix 10/30/30/30", 2, 0, {0.10, 0.30, 0.30, 0.30}}};
  for (const Case& c : cases) {
    const Query q = MakeQuery(p, PairDepths(p, c.depth, c.mix, 23));
    SetQuery(d, q);
    const bool mixed = !c.mix.empty();
    const float read_us = 1e3f * Median(reps, flush, flush_bytes, [&] {
      OK(LaunchStreamRead(d.keys, p.batch, p.heads, p.tiles(), mixed ? 1 : c.depth, c.layout,
                          mixed ? d.pair_depth : nullptr, sink));
    });
    const float us = 1e3f * Median(reps, flush, flush_bytes, [&] {
      OK(Launch(c.layout, /*write=*/false, p, d, q));
    });
    double planes = 0.0;  // mean planes read per pair
    for (const uint8_t t : q.pair_depth) planes += t;
    planes /= static_cast<double>(q.pair_depth.size());
    const double bytes = tiles * 256.0 * planes;
    std::printf("  keys, layout %d, %-16s (%.2f planes): planes streamed %7.1f us; b1 logits + "
                "softmax stats %7.1f us (%6.0f GB/s, %.2fx the planes' read, %.3fx FP8's key "
                "read)\n",
                c.layout, c.name, planes, read_us, us, bytes / us / 1e3, us / read_us, us / fp8_us);
    char row[320];
    std::snprintf(row, sizeof row,
                  "%s{\"kind\":\"keys\",\"case\":\"%s\",\"layout\":%d,\"mean_depth\":%.3f,"
                  "\"plane_read_us\":%.2f,\"us\":%.2f,\"bytes\":%.0f}",
                  rows.empty() ? "" : ",", c.name, c.layout, planes, read_us, us, bytes);
    rows += row;
  }
  Free(d);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  bool check_only = false, emulate = false;
  int tokens = 32768, batch = 16, heads = 8, reps = 15;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--check") == 0) {
      check_only = true;
    } else if (std::strcmp(argv[i], "--emulate") == 0) {
      emulate = true;
    } else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      tokens = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      batch = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: readkv_plane_logits [--emulate | --check] [--tokens N] [--batch B] "
                   "[--json PATH]\n");
      return 2;
    }
  }
  if (tokens < 1024 || tokens % 1024 != 0 || batch < 1) {
    std::fprintf(stderr, "readkv_plane_logits: --tokens must be a positive multiple of 1024 (a "
                         "Value chunk), --batch positive\n");
    return 2;
  }
  if (emulate) {  // no GPU needed
    bool ok = CheckValues(/*emulate=*/true);
    for (int layout = 0; layout <= 2; ++layout) ok = CheckLogits(/*emulate=*/true, layout) && ok;
    return ok ? 0 : 1;
  }
  cudaDeviceProp prop{};
  OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (!ProbeLayout()) return 1;
  bool checked = CheckValues(/*emulate=*/false);
  for (int layout = 0; layout <= 2; ++layout) {
    checked = CheckLogits(/*emulate=*/false, layout) && checked;
  }
  if (check_only || !checked) return checked ? 0 : 1;

  // Speed: T x B, 32/8/128, random codes (the time does not depend on values).
  const Problem p = MakeProblem(batch, heads, tokens, 12, /*with_codes=*/false);
  const int warps = WarpsPerRow(p.tiles());
  const size_t flush_bytes = size_t{256} << 20;
  void* flush = nullptr;
  OK(cudaMalloc(&flush, flush_bytes));
  // FP8's keys: 128 bytes per token and KV head, 16 tokens a tile = 256 uint2, the same size as
  // the W = 8 planes: read as every plane of layout 0.
  uint2* fp8 = nullptr;
  const size_t fp8_words = static_cast<size_t>(batch) * heads * p.tiles() * 256;
  OK(cudaMalloc(&fp8, fp8_words * sizeof(uint2)));
  OK(cudaMemset(fp8, 0x5a, fp8_words * sizeof(uint2)));
  uint32_t* sink = nullptr;
  OK(cudaMalloc(&sink, static_cast<size_t>(batch) * heads * warps * 4 + 4096));
  const double tiles = static_cast<double>(batch) * heads * p.tiles();
  const float fp8_us = 1e3f * Median(reps, flush, flush_bytes, [&] {
    OK(LaunchStreamRead(fp8, batch, heads, p.tiles(), kStoreBits, 0, nullptr, sink));
  });
  const double fp8_bytes = tiles * 2048.0;
  std::printf("T=%d B=%d, 32/8/128, cold L2, median of %d:\n", tokens, batch, reps);
  std::printf("  FP8 key bytes, streamed:        %8.1f us  %7.1f MB  %6.0f GB/s\n", fp8_us,
              fp8_bytes / 1e6, fp8_bytes / fp8_us / 1e3);
  std::string rows;
  TimeKeys(p, reps, flush, flush_bytes, sink, fp8_us, rows);
  const std::string value_rows =
      TimeValues(batch, heads, tokens, reps, flush, flush_bytes, sink, fp8_us);
  rows += (rows.empty() ? "" : ",") + value_rows;
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "readkv_plane_logits: cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"device\":\"%s\",\"tokens\":%d,\"batch\":%d,\"heads_q\":32,\"heads_kv\":8,"
                 "\"head_dim\":128,\"fp8_key_read_us\":%.2f,\"rows\":[%s]}\n",
                 prop.name, tokens, batch, fp8_us, rows.c_str());
    std::fclose(f);
  }
  return 0;
}
