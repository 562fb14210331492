// The Threshold allocator (codec::DepthAllocator::Threshold) over a handful of objects: the tile
// reader's Key group depths (d / 16 <= 8 groups, t_min 1, step 1), host and device, so
// tests/tile_threshold_test.cc proves it equal to the codec's on the CPU. The cut (the steps-th
// largest gain) is found by counting, not nth_element: the same value, the same ties by object,
// and on the GPU one thread per candidate gain instead of one thread sorting.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace readkv::cuda::tile {

inline constexpr int kSmallObjects = 8;
inline constexpr int kSmallSteps = 7;  // W - 1 steps of depth 1 at most

// codec::MarginalGain: one correctly rounded product (no contraction on either side).
KVGATE_TILE_HD double StepGain(double weight, double increment) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(weight, increment);
#else
  return weight * increment;
#endif
}

// Leading steps of an object whose gain exceeds x.
KVGATE_TILE_HD int StepsAbove(double w, double x, const double* inc, int spo) {
  int k = 0;
  while (k < spo && StepGain(w, inc[k]) > x) ++k;
  return k;
}

// What a budget buys before any cut: each object's leading positive steps (k), their total
// (positive) and the steps the budget allows above t_min (steps, clamped to objects x spo).
// Trivially constructible (TilePrepare keeps one in shared memory): CountSmallSteps fills it.
struct SmallCount {
  int k[kSmallObjects];
  long long positive;
  long long steps;
  // A cut is needed when the budget buys fewer steps than are positive.
  KVGATE_TILE_HD bool NeedsCut() const { return steps > 0 && positive > steps; }
};

KVGATE_TILE_HD SmallCount CountSmallSteps(const double* w, int objects, long long budget,
                                          const double* inc, int spo) {
  SmallCount c;
  for (int j = 0; j < kSmallObjects; ++j) c.k[j] = 0;
  c.positive = 0;
  c.steps = budget - objects;
  if (c.steps > static_cast<long long>(objects) * spo) c.steps = static_cast<long long>(objects) * spo;
  for (int j = 0; j < objects; ++j) {
    c.k[j] = StepsAbove(w[j], 0.0, inc, spo);
    c.positive += c.k[j];
  }
  return c;
}

// Whether gain x is the steps-th largest of gains[0, n) (entries < 0 are absent): fewer than
// `steps` gains exceed it and at least `steps` are >= it. The steps-th value of the list sorted
// descending, found by counting so that threads can test candidates in parallel.
KVGATE_TILE_HD bool IsStepsThLargest(double x, const double* gains, int n, long long steps) {
  long long above = 0, at_least = 0;
  for (int i = 0; i < n; ++i) {
    above += gains[i] > x;
    at_least += gains[i] >= x;
  }
  return above < steps && at_least >= steps;
}

// The gain of object j's step s, or -1 (absent) past its positive steps; index i = j spo + s.
KVGATE_TILE_HD double SmallGain(const double* w, const SmallCount& c, const double* inc, int spo,
                                int i) {
  const int j = i / spo, s = i % spo;
  return s < c.k[j] ? StepGain(w[j], inc[s]) : -1.0;
}

// The depths once the cut is known (any cut when !c.NeedsCut()): steps above the cut, then the
// cut's ties in object order.
KVGATE_TILE_HD void ApplySmallCut(const double* w, int objects, const double* inc, int spo,
                                  const SmallCount& c, double cut, uint8_t* depths) {
  int k[kSmallObjects] = {};
  if (c.steps > 0 && !c.NeedsCut()) {
    for (int j = 0; j < objects; ++j) k[j] = c.k[j];
  } else if (c.NeedsCut()) {
    long long remaining = c.steps;
    for (int j = 0; j < objects; ++j) {
      k[j] = StepsAbove(w[j], cut, inc, spo);
      remaining -= k[j];
    }
    for (int j = 0; j < objects && remaining > 0; ++j) {  // the cut's ties in object order
      while (k[j] < spo && remaining > 0 && StepGain(w[j], inc[k[j]]) == cut) {
        ++k[j];
        --remaining;
      }
    }
  }
  for (int j = 0; j < objects; ++j) depths[j] = static_cast<uint8_t>(1 + k[j]);
}

// Depths 1 + steps for `objects` <= 8 weights (finite, >= 0) under `budget` depth units
// (>= objects), spo <= 7 steps of increments inc: codec::DepthAllocator::Threshold's answer, by
// one thread (TilePrepare finds the cut with a thread per candidate gain instead).
KVGATE_TILE_HD void SmallThreshold(const double* w, int objects, long long budget,
                                   const double* inc, int spo, uint8_t* depths) {
  const SmallCount c = CountSmallSteps(w, objects, budget, inc, spo);
  double cut = 0.0;
  if (c.NeedsCut()) {
    double gains[kSmallObjects * kSmallSteps];
    const int n = objects * spo;
    for (int i = 0; i < n; ++i) gains[i] = SmallGain(w, c, inc, spo, i);
    for (int i = 0; i < n; ++i) {
      if (gains[i] >= 0.0 && IsStepsThLargest(gains[i], gains, n, c.steps)) {
        cut = gains[i];
        break;
      }
    }
  }
  ApplySmallCut(w, objects, inc, spo, c, cut, depths);
}

}  // namespace readkv::cuda::tile
