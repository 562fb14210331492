// Plane terms: the Lloyd tree's depth-t reads written as a polynomial in the plane signs, and a
// key logit computed from the planes by AND + popcount alone (docs/performance-notes.md, "Planes
// as binary operands"): the CPU reference of a reader that would take the bit planes as b1
// operands of tensor-core MMAs and decode nothing.
//
// Signs. Plane p (p = 0 the most significant, as stored) of a code gives s_p = +1 where its bit
// is 1 and -1 where it is 0. A subset S of the t planes read is a mask (bit p of the mask = plane
// p); chi_S(code) = prod_{p in S} s_p, and chi_S as a vector over channels is the XNOR of the
// planes in S (a run of bitwise operations, one per 64 channels here).
//
// Expansion. Any function of t signs is exactly sum_S a_S chi_S with a_S = 2^-t sum over the
// 2^t codes of C_t(code) chi_S(code) (the Walsh-Hadamard transform). The tree is antisymmetric
// (C_t(~code) = -C_t(code)), so every a_S with |S| even is 0 and 2^(t-1) terms remain. Exact in
// double for the frozen float tables (tested for every code at every depth, W = 8).
//
// Logit. With the query quantised per row to 8-bit offset binary, q~_c = scale (u_c - 128),
// u_c in [0, 255], bits u^(j) (j = 0..7):
//   q~ . C_t = sum_S a_S (2 q~ . b_S - sum_c q~_c),  b_S = (chi_S + 1) / 2 in {0, 1},
//   q~ . b_S = scale (sum_j 2^j popc(u^(j) AND b_S) - 128 popc(b_S)),
// integer popcounts only, so the result equals the float dot product of the quantised query with
// the tree's centroids up to the double rounding of the final sums. Pure and thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "readkv/codec/codebook.h"

namespace readkv::codec {

// a_S for every mask S in [0, 2^t), t in [1, tree.store_bits()]; InvalidArgument("depth")
// outside. Masks with an even count of planes hold exactly 0.
std::vector<double> PlaneTermCoefficients(const LloydTree& tree, int depth);

// sum_S a_S chi_S(code) for one code read at depth t (code's top t bits of store_bits), the
// expansion evaluated: equal to tree.Decode(code, t) (tests bound the difference).
double EvaluatePlaneTerms(std::span<const double> coefficients, int store_bits, int depth,
                          uint8_t code);

// A query row quantised to 8-bit offset binary: q~_c = scale (u_c - 128). scale = max|q| / 127
// (1 for a zero row); u_c = 128 + round(q_c / scale), in [1, 255].
struct QuantizedQuery {
  double scale = 1.0;
  std::vector<uint8_t> u;
  double Value(size_t c) const { return scale * (static_cast<int>(u[c]) - 128); }
};
QuantizedQuery QuantizeQuery(std::span<const float> q);

// The key logit sum_c q~_c C_t(code_c) of one token from its d codes (store_bits each) read at
// depth t = log2(coefficients.size()), the coefficients PlaneTermCoefficients(tree, t) gave
// (computed once per depth, not per token), from plane words by XNOR, AND and popcount only
// (the formula above). InvalidArgument("channels") unless codes and the query have the same
// size, ("depth") unless coefficients.size() is 2^t for t in [1, store_bits].
double PlaneTermLogit(std::span<const double> coefficients, int store_bits,
                      const QuantizedQuery& q, std::span<const uint8_t> codes);

}  // namespace readkv::codec
