// readkv_plane_logits' host side shared by its key half (plane_logits_main.cc, with main) and its
// Value half (plane_values.cc): CUDA error checks, the synthetic problem, the integer term
// coefficients and the cold-L2 timer. C++20 (it takes the codec).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "plane_logits.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/plane_terms.h"

namespace readkv::cuda::plane_logits::host {

inline bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "readkv_plane_logits: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
#define OK(expr)                                                                  \
  do {                                                                            \
    if (!::readkv::cuda::plane_logits::host::Check((expr), #expr)) std::exit(1); \
  } while (0)

// A problem: codes [B][H][tokens][d] (W bits; empty for speed runs) of standard Gaussian values
// (what the tree encodes after the transform), used as keys or as values, and queries
// [B][H][G][d].
struct Problem {
  int batch, heads, tokens;
  std::vector<uint8_t> codes;
  std::vector<float> queries;
  int tiles() const { return tokens / 16; }
  int blocks() const { return tokens / kBlockTokens; }
};

inline Problem MakeProblem(int batch, int heads, int tokens, uint32_t seed, bool with_codes) {
  Problem p{batch, heads, tokens, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const readkv::codec::LloydTree tree(kStoreBits);
  if (with_codes) p.codes.resize(static_cast<size_t>(batch) * heads * tokens * kDim);
  for (auto& c : p.codes) c = tree.Encode(normal(rng));
  p.queries.resize(static_cast<size_t>(batch) * heads * kGroup * kDim);
  for (auto& q : p.queries) q = normal(rng);
  return p;
}

// The depth-t tree's odd-term coefficients a_S as integers A_S = round(a_S 2^shift), in OddMasks
// order. Terms: their count; sum: the sum of the A_S; sum_abs: the sum of |a_S| (to choose shift).
struct Coefficients {
  int coeff[kMaxTerms] = {};
  int terms = 0, shift = 0;
  long long sum = 0;
  double sum_abs = 0.0;
};
inline Coefficients IntegerCoefficients(int depth, int shift) {
  const readkv::codec::LloydTree tree(kStoreBits);
  const std::vector<double> a = readkv::codec::PlaneTermCoefficients(tree, depth);
  int masks[kMaxTerms];
  Coefficients c;
  c.terms = OddMasks(depth, masks);
  c.shift = shift;
  for (int s = 0; s < c.terms; ++s) {
    c.coeff[s] = static_cast<int>(std::lround(a[masks[s]] * std::ldexp(1.0, shift)));
    c.sum += c.coeff[s];
    c.sum_abs += std::fabs(a[masks[s]]);
  }
  return c;
}
// The largest shift (<= 24) that keeps sum_abs 2^shift x `bound` below 2^31 (0.1% spare for
// the rounding of the A_S): every int32 a kernel forms is at most that.
inline int ShiftFor(double sum_abs, double bound) {
  return std::min(24, static_cast<int>(std::floor(
                          std::log2(2147483647.0 / (sum_abs * 1.001 * bound)))));
}

// Median of `reps` timed launches of `run`, each after a write of `flush` (L2 cold).
template <typename Run>
float Median(int reps, void* flush, size_t flush_bytes, Run run) {
  cudaEvent_t start, stop;
  OK(cudaEventCreate(&start));
  OK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int r = 0; r < reps + 1; ++r) {
    OK(cudaMemsetAsync(flush, r & 0xff, flush_bytes));
    OK(cudaEventRecord(start));
    run();
    OK(cudaEventRecord(stop));
    OK(cudaEventSynchronize(stop));
    OK(cudaGetLastError());
    float t = 0.0f;
    OK(cudaEventElapsedTime(&t, start, stop));
    if (r > 0) ms.push_back(t);  // the first warms clocks
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// plane_values.cc: every partial output of a small problem at depths 1-4 against the CPU
// reference (from the GPU, or the kernel's arithmetic emulated on the CPU when `emulate`).
bool CheckValues(bool emulate);
// plane_values.cc: T x B at depths 1-4 beside the same plane bytes streamed; prints a line per
// depth and returns the rows as JSON objects (comma-separated). fp8_us: FP8's value bytes
// streamed, for the ratio.
std::string TimeValues(int batch, int heads, int tokens, int reps, void* flush,
                       size_t flush_bytes, uint32_t* sink, float fp8_us);

}  // namespace readkv::cuda::plane_logits::host
