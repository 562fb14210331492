#include "readkv/codec/allocator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <string>

#include "readkv/codec/errors.h"

namespace readkv::codec {

DepthAllocator::DepthAllocator(std::span<const double> distortion, int min_depth, int step)
    : min_depth_(min_depth), step_(step) {
  if (distortion.empty()) throw InvalidArgument("distortion", "needs D(0..W)");
  const int w = static_cast<int>(distortion.size()) - 1;
  if (min_depth < 0 || min_depth > w) {
    throw InvalidArgument(
        "min_depth", "must be in [0, " + std::to_string(w) + "], got " + std::to_string(min_depth));
  }
  if (step < 1) throw InvalidArgument("step", "must be >= 1, got " + std::to_string(step));
  for (int t = min_depth; t + step <= w; t += step) {
    increments_.push_back(distortion[static_cast<size_t>(t)] -
                          distortion[static_cast<size_t>(t + step)]);
  }
  // Greedy optimality and the greedy == threshold equivalence both rest on this shape; a
  // codebook that broke it must not be allocated silently.
  for (size_t k = 0; k < increments_.size(); ++k) {
    if (!(increments_[k] > 0.0) || (k > 0 && increments_[k] > increments_[k - 1])) {
      throw InvalidArgument(
          "distortion",
          "step increments must be positive and non-increasing (step " + std::to_string(k) + ")");
    }
  }
}

int64_t DepthAllocator::Spent(std::span<const uint8_t> depths) {
  int64_t total = 0;
  for (uint8_t t : depths) total += t;
  return total;
}

int64_t DepthAllocator::StepBudget(std::span<const double> weights, int64_t budget,
                                   std::span<const uint8_t> depths) const {
  if (depths.size() != weights.size()) {
    throw InvalidArgument("depths", "size " + std::to_string(depths.size()) + " != weights " +
                                        std::to_string(weights.size()));
  }
  for (size_t j = 0; j < weights.size(); ++j) {
    if (!std::isfinite(weights[j]) || weights[j] < 0.0) {
      throw InvalidArgument("weights", "weight " + std::to_string(j) + " must be finite and >= 0");
    }
  }
  const auto n = static_cast<int64_t>(weights.size());
  const int64_t floor = FloorBudget(n);
  if (floor > budget) {
    throw InvalidArgument("budget", "floor " + std::to_string(floor) + " (t_min " +
                                        std::to_string(min_depth_) + " x " + std::to_string(n) +
                                        " objects) exceeds budget " + std::to_string(budget));
  }
  return std::min((budget - floor) / step_, n * steps_per_object());
}

void DepthAllocator::Greedy(std::span<const double> weights, int64_t budget,
                            std::span<uint8_t> depths) const {
  int64_t steps = StepBudget(weights, budget, depths);
  std::fill(depths.begin(), depths.end(), static_cast<uint8_t>(min_depth_));
  struct Candidate {
    double gain;
    int64_t object;
    int next_step;
  };
  // Max-heap on gain; among equal gains the lowest object index comes first.
  const auto lower = [](const Candidate& a, const Candidate& b) {
    return a.gain < b.gain || (a.gain == b.gain && a.object > b.object);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> heap(lower);
  if (steps_per_object() == 0) return;
  for (size_t j = 0; j < weights.size(); ++j) {
    heap.push({MarginalGain(weights[j], increments_[0]), static_cast<int64_t>(j), 0});
  }
  while (steps > 0 && !heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    if (!(top.gain > 0.0)) break;
    depths[static_cast<size_t>(top.object)] += static_cast<uint8_t>(step_);
    --steps;
    const int k = top.next_step + 1;
    if (k < steps_per_object()) {
      heap.push({MarginalGain(weights[static_cast<size_t>(top.object)],
                              increments_[static_cast<size_t>(k)]),
                 top.object, k});
    }
  }
}

void DepthAllocator::Threshold(std::span<const double> weights, int64_t budget,
                               std::span<uint8_t> depths, AllocatorScratch& scratch) const {
  const int64_t steps = StepBudget(weights, budget, depths);
  const int spo = steps_per_object();
  // Per-object gains are non-increasing in the step index, so "steps with gain > x" is a prefix.
  const auto count_above = [&](double w, double x, int from) {
    int k = from;
    while (k < spo && MarginalGain(w, increments_[static_cast<size_t>(k)]) > x) ++k;
    return k;
  };

  int64_t positive = 0;
  for (size_t j = 0; j < weights.size(); ++j) {
    const int k = count_above(weights[j], 0.0, 0);
    depths[j] = static_cast<uint8_t>(k);  // step counts for now; converted to depths below
    positive += k;
  }
  if (steps == 0) {
    std::fill(depths.begin(), depths.end(), uint8_t{0});
  } else if (positive > steps) {
    // The cut gain: the steps-th largest positive gain, found by selection over all of them.
    scratch.gains.clear();
    scratch.gains.reserve(static_cast<size_t>(positive));
    for (size_t j = 0; j < weights.size(); ++j) {
      for (int k = 0; k < depths[j]; ++k) {
        scratch.gains.push_back(MarginalGain(weights[j], increments_[static_cast<size_t>(k)]));
      }
    }
    const auto nth = scratch.gains.begin() + (steps - 1);
    std::nth_element(scratch.gains.begin(), nth, scratch.gains.end(), std::greater<double>());
    const double cut = *nth;
    int64_t remaining = steps;
    for (size_t j = 0; j < weights.size(); ++j) {
      const int k = count_above(weights[j], cut, 0);
      depths[j] = static_cast<uint8_t>(k);
      remaining -= k;
    }
    // Steps exactly at the cut: greedy takes them object by object in index order.
    for (size_t j = 0; j < weights.size() && remaining > 0; ++j) {
      int k = depths[j];
      while (k < spo && remaining > 0 &&
             MarginalGain(weights[j], increments_[static_cast<size_t>(k)]) == cut) {
        ++k;
        --remaining;
      }
      depths[j] = static_cast<uint8_t>(k);
    }
  }
  for (uint8_t& d : depths) d = static_cast<uint8_t>(min_depth_ + step_ * d);
}

}  // namespace readkv::codec
