// The ReadKV rotation: x' = (1/sqrt(d)) * H_d * diag(s) * x, with H_d the Sylvester
// Walsh-Hadamard matrix and s in {+1,-1}^d drawn from a seed (docs/readkv.md, "Write path").
// The transform is orthogonal, so inner products (q . k) are preserved. Keys and queries share
// one sign vector (s_K); values use another (s_V) and the attention output is mapped back with
// the inverse. Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace readkv::codec {

// In-place unnormalised fast Walsh-Hadamard transform; x.size() must be a power of two.
void Fwht(std::span<float> x);
void Fwht(std::span<double> x);

class HadamardTransform {
 public:
  // Throws InvalidArgument("head_dim") unless d is a power of two >= 8.
  HadamardTransform(int head_dim, uint64_t seed);

  int head_dim() const { return static_cast<int>(signs_.size()); }
  uint64_t seed() const { return seed_; }
  const std::vector<int8_t>& signs() const { return signs_; }

  // out = (1/sqrt(d)) H diag(s) in. `in` and `out` have d elements and may alias.
  void Forward(std::span<const float> in, std::span<float> out) const;
  // out = diag(s) H^T in / sqrt(d) (the exact inverse of Forward). May alias.
  void Inverse(std::span<const float> in, std::span<float> out) const;

 private:
  uint64_t seed_;
  std::vector<int8_t> signs_;
};

}  // namespace readkv::codec
