// readkv_plane_logits' Value half (plane_logits.h, "The Value side"; plane_bench_host.h): the
// check of PlaneValues against the CPU reference and its timing beside the same bytes streamed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "plane_bench_host.h"
#include "plane_logits.h"
#include "readkv/codec/codebook.h"

namespace readkv::cuda::plane_logits::host {
namespace {

// The codes in ValueWord's layout.
std::vector<uint2> PackValues(const Problem& p) {
  std::vector<uint2> out(static_cast<size_t>(p.batch) * p.heads * p.blocks() * kChannelGroups *
                         kStoreBits * 32);
  for (size_t bh = 0; bh < static_cast<size_t>(p.batch) * p.heads; ++bh) {
    for (int block = 0; block < p.blocks(); ++block) {
      for (int cg = 0; cg < kChannelGroups; ++cg) {
        for (int plane = 0; plane < kStoreBits; ++plane) {
          for (int lane = 0; lane < 32; ++lane) {
            uint32_t word[2] = {0, 0};
            for (int half = 0; half < 2; ++half) {
              const int c = 16 * cg + lane / 4 + 8 * half;
              for (int i = 0; i < 32; ++i) {
                const int token = kBlockTokens * block + 32 * (lane % 4) + i;
                const uint8_t code = p.codes[(bh * p.tokens + token) * kDim + c];
                word[half] |= static_cast<uint32_t>((code >> (kStoreBits - 1 - plane)) & 1u) << i;
              }
            }
            out[ValueWord(bh, p.blocks(), block, cg, plane, lane)] = {word[0], word[1]};
          }
        }
      }
    }
  }
  return out;
}

// Every int the kernel forms is at most sum|A_S| x 255 (u) x 1024 (a chunk's tokens).
Coefficients ValueCoefficients(int depth) {
  const double sum_abs = IntegerCoefficients(depth, 0).sum_abs;
  return IntegerCoefficients(depth, ShiftFor(sum_abs, 255.0 * kBlockTokens * kChunkBlocks));
}

ValueArgs ArgsOf(const Problem& p, const Coefficients& c, const uint2* values, float* out) {
  ValueArgs a;
  a.values = values;
  std::copy(std::begin(c.coeff), std::end(c.coeff), std::begin(a.coeff));
  a.unit = static_cast<float>(std::ldexp(1.0, -c.shift) / 255.0);
  a.heads_kv = p.heads;
  a.blocks = p.blocks();
  a.out = out;
  return a;
}

// PlaneValues' arithmetic on the CPU from the packed words (the ballots as the kernel forms them).
std::vector<float> EmulateValues(const Problem& p, const std::vector<uint2>& packed,
                                 const Coefficients& c, int depth) {
  int masks[kMaxTerms];
  OddMasks(depth, masks);
  const int chunks = p.blocks() / kChunkBlocks;
  std::vector<float> out(static_cast<size_t>(p.batch) * p.heads * chunks * kGroup * kDim);
  const float unit = static_cast<float>(std::ldexp(1.0, -c.shift) / 255.0);
  for (size_t bh = 0; bh < static_cast<size_t>(p.batch) * p.heads; ++bh) {
    for (int chunk = 0; chunk < chunks; ++chunk) {
      for (int g = 0; g < kGroup; ++g) {
        long long u_sum = 0;
        std::vector<long long> v(kDim, 0);
        for (int blk = chunk * kChunkBlocks; blk < (chunk + 1) * kChunkBlocks; ++blk) {
          uint32_t ubits[8][4] = {};  // bit j of u over tokens 32 q + i
          for (int t = 0; t < kBlockTokens; ++t) {
            const uint32_t u = ProbabilityByte(bh, g, blk * kBlockTokens + t);
            u_sum += u;
            for (int j = 0; j < 8; ++j) ubits[j][t / 32] |= ((u >> j) & 1u) << (t % 32);
          }
          for (int s = 0; s < c.terms; ++s) {
            for (int ch = 0; ch < kDim; ++ch) {
              const int cg = ch / 16, row = ch % 16;
              for (int q = 0; q < 4; ++q) {
                const int lane = 4 * (row % 8) + q;
                uint32_t word = 0;
                for (int plane = 0; plane < depth; ++plane) {
                  if ((masks[s] >> plane) & 1) {
                    const uint2 w = packed[ValueWord(bh, p.blocks(), blk, cg, plane, lane)];
                    word ^= row < 8 ? w.x : w.y;
                  }
                }
                for (int j = 0; j < 8; ++j) {
                  v[ch] += static_cast<long long>(c.coeff[s]) * (1 << j) *
                           __builtin_popcount(word & ubits[j][q]);
                }
              }
            }
          }
        }
        for (int ch = 0; ch < kDim; ++ch) {
          if (v[ch] > 2147483647LL || v[ch] < -2147483648LL) {
            std::fprintf(stderr, "readkv_plane_logits: int32 overflow (values, depth %d)\n", depth);
            std::exit(1);
          }
          out[((bh * chunks + chunk) * kGroup + g) * kDim + ch] =
              unit * (2.0f * static_cast<float>(static_cast<int>(v[ch])) -
                      static_cast<float>(c.sum) * static_cast<float>(u_sum));
        }
      }
    }
  }
  return out;
}

}  // namespace

bool CheckValues(bool emulate) {
  const Problem p = MakeProblem(2, 2, 2048, 13, /*with_codes=*/true);
  const std::vector<uint2> packed = PackValues(p);
  const int chunks = p.blocks() / kChunkBlocks;
  const size_t outs = static_cast<size_t>(p.batch) * p.heads * chunks * kGroup * kDim;
  uint2* d_values = nullptr;
  float* d_out = nullptr;
  if (!emulate) {
    OK(cudaMalloc(&d_values, packed.size() * sizeof(uint2)));
    OK(cudaMemcpy(d_values, packed.data(), packed.size() * sizeof(uint2), cudaMemcpyHostToDevice));
    OK(cudaMalloc(&d_out, outs * sizeof(float)));
  }
  const readkv::codec::LloydTree tree(kStoreBits);
  bool ok = true;
  for (int depth = 1; depth <= 4; ++depth) {
    const Coefficients c = ValueCoefficients(depth);
    std::vector<float> got(outs);
    if (emulate) {
      got = EmulateValues(p, packed, c, depth);
    } else {
      OK(LaunchPlaneValues(depth, ArgsOf(p, c, d_values, d_out), p.batch));
      OK(cudaMemcpy(got.data(), d_out, outs * sizeof(float), cudaMemcpyDeviceToHost));
    }
    // The reference: sum_r (u_r / 255) C_t(code_{r,c}) in double, per chunk.
    double max_ref = 0.0, max_err = 0.0;
    for (size_t bh = 0; bh < static_cast<size_t>(p.batch) * p.heads; ++bh) {
      for (int chunk = 0; chunk < chunks; ++chunk) {
        for (int g = 0; g < kGroup; ++g) {
          for (int ch = 0; ch < kDim; ++ch) {
            double ref = 0.0;
            const int first = chunk * kChunkBlocks * kBlockTokens;
            for (int t = first; t < first + kChunkBlocks * kBlockTokens; ++t) {
              ref += ProbabilityByte(bh, g, t) / 255.0 *
                     tree.Decode(p.codes[(bh * p.tokens + t) * kDim + ch], depth);
            }
            const double x = got[((bh * chunks + chunk) * kGroup + g) * kDim + ch];
            max_ref = std::max(max_ref, std::fabs(ref));
            max_err = std::max(max_err, std::fabs(x - ref));
          }
        }
      }
    }
    // The integer coefficients (k = 11-13 here: a chunk sums 1024 tokens' u) and the f32 end.
    const double rel = max_err / max_ref;
    const bool pass = rel < 2e-3;
    ok = ok && pass;
    std::printf("check values, depth %d (%s): max |out - reference| / max |out| = %.2e (%s; k = "
                "%d)\n",
                depth, emulate ? "CPU emulation" : "GPU", rel, pass ? "ok" : "FAIL", c.shift);
  }
  if (!emulate) {
    cudaFree(d_values);
    cudaFree(d_out);
  }
  return ok;
}

std::string TimeValues(int batch, int heads, int tokens, int reps, void* flush,
                       size_t flush_bytes, uint32_t* sink, float fp8_us) {
  const Problem p = MakeProblem(batch, heads, tokens, 14, /*with_codes=*/false);
  const size_t words =
      static_cast<size_t>(batch) * heads * p.blocks() * kChannelGroups * kStoreBits * 32;
  uint2* values = nullptr;
  float* out = nullptr;
  const int chunks = p.blocks() / kChunkBlocks;
  OK(cudaMalloc(&values, words * sizeof(uint2)));
  OK(LaunchFillRandom(values, words));
  OK(cudaMalloc(&out, static_cast<size_t>(batch) * heads * chunks * kGroup * kDim * 4));
  std::string rows;
  for (int depth = 1; depth <= 4; ++depth) {
    const Coefficients c = ValueCoefficients(depth);
    // The same bytes as a tile-major stream: (block, group) units of W planes x 256 bytes.
    const float read_us = 1e3f * Median(reps, flush, flush_bytes, [&] {
      OK(LaunchStreamRead(values, batch, heads, p.blocks() * kChannelGroups, depth, 0, nullptr,
                          sink));
    });
    const float mma_us = 1e3f * Median(reps, flush, flush_bytes, [&] {
      OK(LaunchPlaneValues(depth, ArgsOf(p, c, values, out), batch));
    });
    const double bytes = static_cast<double>(words) / kStoreBits * depth * sizeof(uint2);
    std::printf("  values, depth %d (%d terms): planes streamed %7.1f us; b1 p.V %7.1f us (%6.0f "
                "GB/s, %.2fx the planes' read, %.3fx FP8's value read)\n",
                depth, c.terms, read_us, mma_us, bytes / mma_us / 1e3, mma_us / read_us,
                mma_us / fp8_us);
    char row[256];
    std::snprintf(row, sizeof row,
                  "%s{\"kind\":\"values\",\"depth\":%d,\"terms\":%d,\"plane_read_us\":%.2f,"
                  "\"us\":%.2f,\"bytes\":%.0f}",
                  rows.empty() ? "" : ",", depth, c.terms, read_us, mma_us, bytes);
    rows += row;
  }
  cudaFree(values);
  cudaFree(out);
  return rows;
}

}  // namespace readkv::cuda::plane_logits::host
