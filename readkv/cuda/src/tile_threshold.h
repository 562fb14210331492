// The Threshold allocator (codec::DepthAllocator::Threshold) over a handful of objects by one
// thread: the tile reader's Key group depths (d / 16 <= 8 groups, t_min 1, step 1), host and
// device, so tests/tile_fragment_test.cc proves it equal to the codec's on the CPU. The gains are
// sorted instead of nth_element'd: the same steps-th largest value, the same ties by object.
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

// Depths 1 + steps for `objects` <= 8 weights (finite, >= 0) under `budget` depth units
// (>= objects), spo <= 7 steps of increments inc.
KVGATE_TILE_HD void SmallThreshold(const double* w, int objects, long long budget,
                                   const double* inc, int spo, uint8_t* depths) {
  long long steps = budget - objects;
  if (steps > static_cast<long long>(objects) * spo) steps = static_cast<long long>(objects) * spo;
  int k[kSmallObjects] = {};
  long long positive = 0;
  for (int j = 0; j < objects; ++j) {
    k[j] = StepsAbove(w[j], 0.0, inc, spo);
    positive += k[j];
  }
  if (steps <= 0) {
    for (int j = 0; j < objects; ++j) k[j] = 0;
  } else if (positive > steps) {
    double gains[kSmallObjects * kSmallSteps];
    int n = 0;
    for (int j = 0; j < objects; ++j) {
      for (int s = 0; s < k[j]; ++s) gains[n++] = StepGain(w[j], inc[s]);
    }
    for (int i = 1; i < n; ++i) {  // insertion sort, descending
      const double x = gains[i];
      int at = i;
      while (at > 0 && gains[at - 1] < x) {
        gains[at] = gains[at - 1];
        --at;
      }
      gains[at] = x;
    }
    const double cut = gains[steps - 1];
    long long remaining = steps;
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

}  // namespace readkv::cuda::tile
