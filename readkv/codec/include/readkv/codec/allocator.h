// The ReadKV depth allocator (docs/readkv.md, "Allocator"): given objects j (Key channels or
// Value tokens) with weights w_j >= 0 and a budget of depth units, choose integer read depths
// that maximise sum_j w_j * (1 - D(t_j)) subject to sum_j t_j <= B.
//
// Depth grid: t_min, t_min + s, t_min + 2s, ... up to the largest such depth <= W, where s is the
// step (1, or 2 for the constrained reader's Value packets). With t_min = 1, W = 8, s = 2 the
// depths are 1, 3, 5, 7: plane 8 is never read by that reader. The budget counts depth units
// including the t_min floor of every object; a floor above the budget is an error.
//
// Two forms, which return bit-identical depths:
// - Greedy: repeatedly give one more step to the object whose next step has the largest gain
//   g = w_j * (D(t) - D(t+s)) (ties: lowest index), while steps fit the budget and g > 0.
// - Threshold (water-filling, what a GPU kernel uses): find the cut gain g* = the k-th largest
//   positive increment gain (k = the steps that fit the budget) by selection, give every step
//   with gain > g*, then the steps with gain == g* in index order until the budget is used.
// Both read gains from one precomputed increment table through MarginalGain(), so they compare
// the very same doubles. Greedy is optimal for the proxy objective because the increments are
// positive and non-increasing (checked at construction); not for the true attention error.
//
// Immutable after construction; safe to share between threads. Scratch is caller-owned.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace readkv::codec {

// The one expression both allocator forms use for the gain of a step.
inline double MarginalGain(double weight, double increment) { return weight * increment; }

// Reusable scratch of DepthAllocator::Threshold; its byte size is the allocator's workspace.
struct AllocatorScratch {
  std::vector<double> gains;
  int64_t Bytes() const { return static_cast<int64_t>(gains.capacity() * sizeof(double)); }
};

class DepthAllocator {
 public:
  // distortion: D(0..W) per unit variance (LloydTree::distortions()); W = distortion.size() - 1.
  // Throws InvalidArgument("min_depth") unless 0 <= t_min <= W, InvalidArgument("step") unless
  // step >= 1, InvalidArgument("distortion") unless the step increments are positive and
  // non-increasing.
  DepthAllocator(std::span<const double> distortion, int min_depth, int step);

  int min_depth() const { return min_depth_; }
  int step() const { return step_; }
  // Largest reachable depth: t_min + step * steps_per_object() <= W.
  int max_depth() const { return min_depth_ + step_ * steps_per_object(); }
  int steps_per_object() const { return static_cast<int>(increments_.size()); }
  // D(t_min + k s) - D(t_min + (k+1) s), k in [0, steps_per_object()).
  double increment(int k) const { return increments_[static_cast<size_t>(k)]; }
  // Depth units spent by the floor alone.
  int64_t FloorBudget(int64_t objects) const { return objects * min_depth_; }

  // Both forms write one depth per weight into `depths` (same size as `weights`).
  // Throw InvalidArgument("weights") for a negative or NaN weight, InvalidArgument("depths") on a
  // size mismatch, InvalidArgument("budget") when FloorBudget(n) > budget.
  void Greedy(std::span<const double> weights, int64_t budget, std::span<uint8_t> depths) const;
  void Threshold(std::span<const double> weights, int64_t budget, std::span<uint8_t> depths,
                 AllocatorScratch& scratch) const;

  // Sum of depths (depth units spent) of an allocation.
  static int64_t Spent(std::span<const uint8_t> depths);

 private:
  // Steps that fit after the floor; validates the inputs.
  int64_t StepBudget(std::span<const double> weights, int64_t budget,
                     std::span<const uint8_t> depths) const;

  int min_depth_;
  int step_;
  std::vector<double> increments_;
};

}  // namespace readkv::codec
