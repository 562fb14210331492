// The Gaussian Lloyd binary tree: ReadKV's progressive scalar codebook (docs/readkv.md).
//
// A node is an interval (a, b) of N(0,1); its reconstruction is the centroid E[Z | a<Z<b]. A node
// splits at the tau that satisfies the two-cell Lloyd condition inside it,
// tau = (E[Z|a<Z<tau] + E[Z|tau<Z<b]) / 2; bit 0 is the left child. A W-bit code is the
// root-to-leaf path, most significant bit first, so the code equals the leaf's rank in sorted
// order, and the first t bits (code >> (W - t)) index the depth-t node. Reading 0 bits gives 0.
//
// Built once in double precision, then frozen as float tables; the tables (not the solver) are
// the versioned codebook, and `digest()` covers them. Immutable; safe to share between threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace readkv::codec {

inline constexpr int kMaxStoreBits = 8;

class LloydTree {
 public:
  // The codebook family and version this implementation writes. Stored in every cache identity.
  static constexpr const char* kCodebookId = "gaussian-lloyd-tree";
  static constexpr int kCodebookVersion = 1;

  // Throws InvalidArgument("store_bits") unless 1 <= store_bits <= kMaxStoreBits.
  explicit LloydTree(int store_bits);

  int store_bits() const { return store_bits_; }

  // Thresholds that split the 2^(t-1) nodes of depth t-1, sorted ascending (t in [1, W]).
  std::span<const float> thresholds(int depth) const;
  // Centroids of the 2^t nodes of depth t, sorted ascending (t in [0, W]; depth 0 is {0}).
  std::span<const float> centroids(int depth) const;
  // Exact distortion per unit variance D(t) = E[(Z - zhat_t)^2], t in [0, W]; D(0) = 1.
  double distortion(int depth) const { return distortion_[depth]; }
  const std::vector<double>& distortions() const { return distortion_; }

  // The W-bit code of z (bit 1 iff z >= the node's threshold). NaN encodes as 0 (documented).
  uint8_t Encode(float z) const;
  // The reconstruction of `code` read to depth t (t in [0, W]).
  float Decode(uint8_t code, int depth) const {
    return depth == 0 ? 0.0f : centroids_flat_[offset_[depth] + (code >> (store_bits_ - depth))];
  }

  // Stable 128-bit digest (hex) of the frozen tables and W.
  const std::string& digest() const { return digest_; }

 private:
  int store_bits_;
  std::vector<float> all_thresholds_;    // 2^W - 1 leaf boundaries, sorted (for Encode)
  std::vector<float> thresholds_flat_;   // depth-major: depth t at [2^(t-1) - 1, 2^t - 1)
  std::vector<float> centroids_flat_;    // depth-major: depth t at offset_[t], 2^t entries
  std::vector<int> offset_;              // offset_[t] = 2^t - 1
  std::vector<double> distortion_;       // W + 1 entries
  std::string digest_;
};

}  // namespace readkv::codec
