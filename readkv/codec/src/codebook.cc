#include "readkv/codec/codebook.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "readkv/codec/cache_object.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double Pdf(double x) {
  if (std::isinf(x)) return 0.0;
  return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}

// Upper tail Q(x) = P(Z > x) through erfc, which keeps full relative precision far in the tail
// where 1 - Phi(x) would cancel to zero.
double UpperTail(double x) { return 0.5 * std::erfc(x / std::numbers::sqrt2); }

// P(a < Z < b), written as a difference of two small tails whenever the interval lies on one
// side of 0, so narrow tail cells do not lose their mass to cancellation against 1.
double Mass(double a, double b) {
  if (a >= 0.0) return UpperTail(a) - UpperTail(b);
  if (b <= 0.0) return UpperTail(-b) - UpperTail(-a);
  return 1.0 - UpperTail(-a) - UpperTail(b);
}

// E[Z | a < Z < b] = (phi(a) - phi(b)) / P(a < Z < b).
double Centroid(double a, double b) { return (Pdf(a) - Pdf(b)) / Mass(a, b); }

// The split tau of (a, b) with tau = (E[Z|a<Z<tau] + E[Z|tau<Z<b]) / 2. g(tau) = tau - that mean
// is negative just above a and positive just below b, and the root is unique because a
// truncated Gaussian is log-concave (Fleischer 1964), so bisection to the last representable
// midpoint finds it. Infinite ends get a finite bracket by doubling a step from the centroid.
double LloydSplit(double a, double b) {
  const auto g = [a, b](double tau) { return tau - 0.5 * (Centroid(a, tau) + Centroid(tau, b)); };
  const double c = Centroid(a, b);
  double lo = a;
  double hi = b;
  if (std::isinf(a)) {
    double step = 1.0;
    lo = c - step;
    while (g(lo) >= 0.0) {
      step *= 2.0;
      lo = c - step;
      if (step > 1e6) throw std::logic_error("LloydSplit: no lower bracket");
    }
  }
  if (std::isinf(b)) {
    double step = 1.0;
    hi = c + step;
    while (g(hi) <= 0.0) {
      step *= 2.0;
      hi = c + step;
      if (step > 1e6) throw std::logic_error("LloydSplit: no upper bracket");
    }
  }
  for (int iter = 0; iter < 4096; ++iter) {
    const double mid = lo + 0.5 * (hi - lo);
    if (mid <= lo || mid >= hi) break;
    if (g(mid) < 0.0) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo + 0.5 * (hi - lo);
}

void AppendLittleEndian(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

LloydTree::LloydTree(int store_bits) : store_bits_(store_bits) {
  if (store_bits < 1 || store_bits > kMaxStoreBits) {
    throw InvalidArgument("store_bits", "must be in [1, " + std::to_string(kMaxStoreBits) +
                                            "], got " + std::to_string(store_bits));
  }
  const int w = store_bits;
  offset_.resize(static_cast<size_t>(w) + 1);
  for (int t = 0; t <= w; ++t) offset_[static_cast<size_t>(t)] = (1 << t) - 1;
  centroids_flat_.assign(static_cast<size_t>((1 << (w + 1)) - 1), 0.0f);
  thresholds_flat_.assign(static_cast<size_t>((1 << w) - 1), 0.0f);
  distortion_.assign(static_cast<size_t>(w) + 1, 1.0);

  // Level by level in double. Only the right half of each level is solved; the left half is its
  // mirror image, so the tree is exactly antisymmetric and the root splits at exactly 0. Each
  // node depends only on its own interval, never on W, so every tree of the family shares its
  // first levels bit for bit (the prefix property of the codebook family).
  std::vector<std::pair<double, double>> nodes = {{-kInf, kInf}};
  for (int t = 0; t <= w; ++t) {
    const size_t n = nodes.size();
    std::vector<double> centroid(n);
    if (t == 0) {
      centroid[0] = 0.0;
    } else {
      for (size_t i = n / 2; i < n; ++i) {
        centroid[i] = Centroid(nodes[i].first, nodes[i].second);
        centroid[n - 1 - i] = -centroid[i];
      }
    }
    // D(t) = E[(Z - zhat_t)^2] = 1 - sum P(node) c^2, with the double (unrounded) centroids: the
    // float tables differ by < 1e-7 per centroid, which changes D by < 1e-13.
    double explained = 0.0;
    for (size_t i = n / 2; i < n; ++i) {
      explained += Mass(nodes[i].first, nodes[i].second) * centroid[i] * centroid[i];
    }
    distortion_[static_cast<size_t>(t)] = t == 0 ? 1.0 : 1.0 - 2.0 * explained;
    for (size_t i = 0; i < n; ++i) {
      centroids_flat_[static_cast<size_t>(offset_[static_cast<size_t>(t)]) + i] =
          static_cast<float>(centroid[i]);
    }
    if (t == w) break;

    std::vector<double> split(n);
    if (t == 0) {
      split[0] = 0.0;
    } else {
      for (size_t i = n / 2; i < n; ++i) {
        split[i] = LloydSplit(nodes[i].first, nodes[i].second);
        split[n - 1 - i] = -split[i];
      }
    }
    std::vector<std::pair<double, double>> children;
    children.reserve(2 * n);
    for (size_t i = 0; i < n; ++i) {
      thresholds_flat_[n - 1 + i] = static_cast<float>(split[i]);
      children.emplace_back(nodes[i].first, split[i]);
      children.emplace_back(split[i], nodes[i].second);
    }
    nodes = std::move(children);
  }

  // The leaf boundaries are the union of all levels' thresholds; Encode binary-searches them.
  all_thresholds_ = thresholds_flat_;
  std::sort(all_thresholds_.begin(), all_thresholds_.end());
  for (size_t i = 1; i < all_thresholds_.size(); ++i) {
    if (!(all_thresholds_[i - 1] < all_thresholds_[i])) {
      throw std::logic_error("LloydTree: float thresholds collide");
    }
  }

  std::vector<uint8_t> bytes;
  bytes.reserve(4 + 4 * (thresholds_flat_.size() + centroids_flat_.size()));
  AppendLittleEndian(bytes, static_cast<uint32_t>(w));
  for (float v : thresholds_flat_) AppendLittleEndian(bytes, std::bit_cast<uint32_t>(v));
  for (float v : centroids_flat_) AppendLittleEndian(bytes, std::bit_cast<uint32_t>(v));
  digest_ = ContentDigest(bytes);
}

std::span<const float> LloydTree::thresholds(int depth) const {
  if (depth < 1 || depth > store_bits_) {
    throw InvalidArgument("depth", "thresholds exist for depths 1.." + std::to_string(store_bits_) +
                                       ", got " + std::to_string(depth));
  }
  const size_t begin = (size_t{1} << (depth - 1)) - 1;
  return std::span<const float>(thresholds_flat_).subspan(begin, size_t{1} << (depth - 1));
}

std::span<const float> LloydTree::centroids(int depth) const {
  if (depth < 0 || depth > store_bits_) {
    throw InvalidArgument("depth", "centroids exist for depths 0.." + std::to_string(store_bits_) +
                                       ", got " + std::to_string(depth));
  }
  return std::span<const float>(centroids_flat_)
      .subspan(static_cast<size_t>(offset_[static_cast<size_t>(depth)]), size_t{1} << depth);
}

uint8_t LloydTree::Encode(float z) const {
  if (std::isnan(z)) return 0;
  // Branch-light binary search over the sorted 2^W - 1 boundaries: the code is the number of
  // boundaries <= z, i.e. the leaf rank, which is the root-to-leaf path with bit 1 iff z >= tau.
  unsigned code = 0;
  for (unsigned step = 1u << (store_bits_ - 1); step > 0; step >>= 1) {
    code += step * static_cast<unsigned>(z >= all_thresholds_[code + step - 1]);
  }
  return static_cast<uint8_t>(code);
}

}  // namespace readkv::codec
