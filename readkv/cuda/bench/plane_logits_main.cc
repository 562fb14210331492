// readkv_plane_logits: a prototype of the binary-operand key read (docs/performance-notes.md,
// "Planes as binary operands"), to measure the design before a reader is built on it. Not a
// reader: every Key group is read at one depth t (no per-group depths, no Values, no outlier
// lists), and its layout is its own (below), not the tile pools'. It answers two questions:
//   1. Is it exact? The logits of a small problem from b1 MMAs against the CPU reference (the
//      8-bit query's dot product with the Lloyd tree's depth-t centroids, in double), and that
//      reference against the float query (the 8-bit query's own error). `--check` stops there;
//      `--emulate` runs the same check on the kernel's arithmetic emulated on the CPU (no GPU).
//   2. How fast? The logits of T x B, 32/8/128 (default 32K x 16) at depths 1-4 with their
//      softmax statistics kept on chip, in two layouts (plane_logits.h, PlaneWord), beside two
//      streaming reads in the same run: the same plane bytes with no MMA (the layout's memory
//      floor) and FP8's key bytes (128 a token and KV head: the Key half of the FP8 reader's
//      traffic). Then the Value side the same way (plane_values.cc): p . V of each 1024-token
//      chunk with the probabilities in 8 bits.
//
// The algebra (readkv/codec's plane_terms.h is its CPU reference): the tree's depth-t read of a
// code is sum over odd-sized plane sets S of a_S chi_S, chi_S = prod_{p in S} s_p, s_p = +-1; as
// bits, b_S = (chi_S + 1) / 2 = XOR of the planes in S (|S| odd). With the query quantised to 8
// bits, q_int = u - 128 (two's complement bits q^(j), weights w_j = 2^j, w_7 = -128):
//   q~ . C_t = scale sum_S a_S (2 sum_j w_j popc(q^(j) AND b_S) - sum_c q_int_c).
// The popcounts are MMA m16n8k128 .b1 AND-popc: A = b_S of 16 tokens x 128 channels, B = the 8
// bit planes of one query head (n = 8 columns, one per bit). The a_S are applied as integers
// A_S = round(a_S 2^k), k the largest with no int32 overflow possible (an error of 2^-k-1 each,
// far below the 8-bit query's), so a term costs the warp 4 MMAs (the 4 query heads of a KV head)
// and 16 IMADs a lane, and a tile ends with one int-to-float per value.
//
// Layout (this prototype's): keys[b][h][tile][plane][lane] as uint2, the A fragment of lane L for
// 16 tokens x 128 channels of one plane: .x row L / 4, .y row L / 4 + 8, bit i of either the
// channel 32 (L % 4) + i. A plane of a tile is 256 contiguous bytes: depth t reads t x 256 bytes
// a tile and nothing past it.
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

// Device inputs of one depth: query bit fragments, scales, constants, integer coefficients.
struct Query {
  std::vector<uint32_t> bits;
  std::vector<float> scale, constant;
  int coeff[kMaxTerms] = {};
  int shift = 0;
  std::vector<readkv::codec::QuantizedQuery> quantized;  // per (b, h, g), for the reference
};

Query MakeQuery(const Problem& p, int depth) {
  // Every int32 the kernel forms, a lane's two weighted bits or the quad's sum of all eight, is
  // at most 2^k sum|a_S| 128 (popcounts) 255 (sum of |w_j|).
  const Coefficients coeffs = IntegerCoefficients(depth, 128.0 * 255.0);
  Query q;
  q.shift = coeffs.shift;
  std::copy(std::begin(coeffs.coeff), std::end(coeffs.coeff), std::begin(q.coeff));
  const size_t n = static_cast<size_t>(p.batch) * p.heads * kGroup;
  q.bits.assign(n * 32, 0);
  q.scale.resize(n);
  q.constant.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::span<const float> row(&p.queries[i * kDim], kDim);
    readkv::codec::QuantizedQuery qq = readkv::codec::QuantizeQuery(row);
    long long sum_q = 0;
    for (int c = 0; c < kDim; ++c) {
      const int q_int = static_cast<int>(qq.u[c]) - 128;
      sum_q += q_int;
      const auto byte = static_cast<uint8_t>(static_cast<int8_t>(q_int));
      for (int j = 0; j < 8; ++j) {
        // Lane L holds column L / 4 (bit j = L / 4) over channels 32 (L % 4) + bit.
        if ((byte >> j) & 1u) q.bits[i * 32 + 4 * j + c / 32] |= 1u << (c % 32);
      }
    }
    const double unit = qq.scale * std::ldexp(1.0, -q.shift);
    q.scale[i] = static_cast<float>(2.0 * unit);
    q.constant[i] = static_cast<float>(unit * static_cast<double>(coeffs.sum) * sum_q);
    q.quantized.push_back(std::move(qq));
  }
  return q;
}

struct DeviceProblem {
  uint2* keys = nullptr;
  uint32_t* qbits = nullptr;
  float *scale = nullptr, *constant = nullptr, *out = nullptr;
};

// One call of the logits kernel at `depth` over the problem.
cudaError_t Launch(int depth, int layout, bool write, const Problem& p, const DeviceProblem& d,
                   const Query& q) {
  Args a;
  a.layout = layout;
  a.keys = d.keys;
  a.qbits = d.qbits;
  a.scale = d.scale;
  a.constant = d.constant;
  std::memcpy(a.coeff, q.coeff, sizeof a.coeff);
  a.heads_kv = p.heads;
  a.tiles = p.tiles();
  a.logits = d.out;
  a.stats = d.out;
  return LaunchPlaneLogits(depth, write, a, p.batch);
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
  const size_t n = static_cast<size_t>(p.batch) * p.heads * kGroup;
  OK(cudaMalloc(&d.qbits, n * 32 * 4));
  OK(cudaMalloc(&d.scale, n * 4));
  OK(cudaMalloc(&d.constant, n * 4));
  OK(cudaMalloc(&d.out, out_floats * 4));
  return d;
}

void SetQuery(const DeviceProblem& d, const Query& q) {
  OK(cudaMemcpy(d.qbits, q.bits.data(), q.bits.size() * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d.scale, q.scale.data(), q.scale.size() * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d.constant, q.constant.data(), q.constant.size() * 4, cudaMemcpyHostToDevice));
}

// The kernel's arithmetic on the CPU, from the same packed keys and query words, with the
// fragment layout plane_logits.h assumes: what `--emulate` checks without a GPU (the host side's
// packing, coefficients and constants; ProbeLayout checks the layout itself on the GPU).
std::vector<float> EmulateLogits(const Problem& p, const std::vector<uint2>& keys, int layout,
                                 const Query& q, int depth) {
  int masks[kMaxTerms];
  const int terms = OddMasks(depth, masks);
  std::vector<float> out(static_cast<size_t>(p.batch) * p.heads * kGroup * p.tokens);
  for (size_t bh = 0; bh < static_cast<size_t>(p.batch) * p.heads; ++bh) {
    for (int tile = 0; tile < p.tiles(); ++tile) {
      for (int g = 0; g < kGroup; ++g) {
        const size_t qi = bh * kGroup + g;
        for (int row = 0; row < 16; ++row) {
          long long v = 0;
          for (int s = 0; s < terms; ++s) {
            for (int j = 0; j < 8; ++j) {
              int popc = 0;
              for (int k = 0; k < 4; ++k) {
                const int lane = 4 * (row % 8) + k;
                uint32_t word = 0;
                for (int plane = 0; plane < depth; ++plane) {
                  if ((masks[s] >> plane) & 1) {
                    const uint2 w = keys[PlaneWord(layout, bh, p.tiles(), tile, plane, lane)];
                    word ^= row < 8 ? w.x : w.y;
                  }
                }
                popc += __builtin_popcount(word & q.bits[qi * 32 + 4 * j + k]);
              }
              v += static_cast<long long>(q.coeff[s]) * (j == 7 ? -128 : 1 << j) * popc;
            }
          }
          if (v > 2147483647LL || v < -2147483648LL) {
            std::fprintf(stderr, "readkv_plane_logits: int32 overflow at depth %d\n", depth);
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

// Every logit of a small problem at depths 1-4 against the CPU reference: from the GPU, or from
// EmulateLogits when `emulate` (no CUDA call at all).
bool CheckLogits(bool emulate, int layout) {
  const Problem p = MakeProblem(2, 2, 1024, 11, /*with_codes=*/true);
  const std::vector<uint2> keys = PackKeys(p, layout);
  const size_t logits = static_cast<size_t>(p.batch) * p.heads * kGroup * p.tokens;
  DeviceProblem d;
  if (!emulate) d = Upload(p, keys, logits);
  const readkv::codec::LloydTree tree(kStoreBits);
  bool ok = true;
  for (int depth = 1; depth <= 4; ++depth) {
    const Query q = MakeQuery(p, depth);
    std::vector<float> gpu(logits);
    if (emulate) {
      gpu = EmulateLogits(p, keys, layout, q, depth);
    } else {
      SetQuery(d, q);
      OK(Launch(depth, layout, /*write=*/true, p, d, q));
      OK(cudaMemcpy(gpu.data(), d.out, logits * 4, cudaMemcpyDeviceToHost));
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
            const double centroid = tree.Decode(codes[c], depth);
            ref += qq.Value(c) * centroid;
            exact += static_cast<double>(p.queries[qi * kDim + c]) * centroid;
          }
          const double got = gpu[qi * p.tokens + t];
          max_ref = std::max(max_ref, std::fabs(ref));
          max_err = std::max(max_err, std::fabs(got - ref));
          err2 += (ref - exact) * (ref - exact);
          ref2 += exact * exact;
        }
      }
    }
    const double rel = max_err / max_ref;
    // The integer coefficients' rounding (2^-k-1 each) is the only error besides f32 sums.
    const bool pass = rel < 1e-3;
    ok = ok && pass;
    std::printf("check depth %d, layout %d (%s): max |logit - reference| / max |logit| = %.2e "
                "(%s; k = %d); 8-bit query against float: relative L2 %.2e\n",
                depth, layout, emulate ? "CPU emulation" : "GPU", rel, pass ? "ok" : "FAIL",
                q.shift, std::sqrt(err2 / ref2));
  }
  if (emulate) return ok;
  cudaFree(d.keys);
  cudaFree(d.qbits);
  cudaFree(d.scale);
  cudaFree(d.constant);
  cudaFree(d.out);
  return ok;
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
    const bool ok0 = CheckLogits(/*emulate=*/true, 0), ok1 = CheckLogits(/*emulate=*/true, 1);
    const bool ok2 = CheckValues(/*emulate=*/true);
    return ok0 && ok1 && ok2 ? 0 : 1;
  }
  cudaDeviceProp prop{};
  OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (!ProbeLayout()) return 1;
  const bool checked0 = CheckLogits(/*emulate=*/false, 0);
  const bool checked1 = CheckLogits(/*emulate=*/false, 1);
  const bool checked = CheckValues(/*emulate=*/false) && checked0 && checked1;
  if (check_only || !checked) return checked ? 0 : 1;

  // Speed: T x B, 32/8/128, random codes (the time does not depend on values).
  const Problem p = MakeProblem(batch, heads, tokens, 12, /*with_codes=*/false);
  const std::vector<uint2> keys;  // random words on the device
  const int warps = WarpsPerRow(p.tiles());
  const size_t stats = static_cast<size_t>(batch) * heads * warps * kGroup * 2;
  DeviceProblem d = Upload(p, keys, stats);
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
    OK(LaunchStreamRead(fp8, batch, heads, p.tiles(), kStoreBits, 0, sink));
  });
  const double fp8_bytes = tiles * 2048.0;
  std::printf("T=%d B=%d, 32/8/128, cold L2, median of %d:\n", tokens, batch, reps);
  std::printf("  FP8 key bytes, streamed:        %8.1f us  %7.1f MB  %6.0f GB/s\n", fp8_us,
              fp8_bytes / 1e6, fp8_bytes / fp8_us / 1e3);
  std::string rows;
  const int layouts = p.tiles() % 16 == 0 ? 2 : 1;
  for (int layout = 0; layout < layouts; ++layout) {
    for (int depth = 1; depth <= 4; ++depth) {
      const Query q = MakeQuery(p, depth);
      SetQuery(d, q);
      const float read_us = 1e3f * Median(reps, flush, flush_bytes, [&] {
        OK(LaunchStreamRead(d.keys, batch, heads, p.tiles(), depth, layout, sink));
      });
      const float mma_us = 1e3f * Median(reps, flush, flush_bytes, [&] {
        OK(Launch(depth, layout, /*write=*/false, p, d, q));
      });
      const double bytes = tiles * 256.0 * depth;
      const int terms = 1 << (depth - 1);
      std::printf("  layout %d, depth %d (%d terms): planes streamed %7.1f us; b1 logits + softmax "
                  "stats %7.1f us (%6.0f GB/s, %.2fx the planes' read, %.3fx FP8's key read)\n",
                  layout, depth, terms, read_us, mma_us, bytes / mma_us / 1e3, mma_us / read_us,
                  mma_us / fp8_us);
      char row[320];
      std::snprintf(row, sizeof row,
                    "%s{\"layout\":%d,\"depth\":%d,\"terms\":%d,\"plane_read_us\":%.2f,"
                    "\"logits_us\":%.2f,\"bytes\":%.0f}",
                    rows.empty() ? "" : ",", layout, depth, terms, read_us, mma_us, bytes);
      rows += row;
    }
  }
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
