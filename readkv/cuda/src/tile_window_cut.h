// The Value cut of one window (tile_attention.h: TileWindowValues, TileWindowPass) found by
// counting against the window's weights sorted, instead of BlockSelect's radix passes: the same
// cut (readkv_device.cuh, "The threshold allocator's cut"), in a few barriers instead of a dozen.
// Host and device, so tests/tile_window_cut_test.cc proves it against the codec's Threshold
// allocator on the CPU; tile_value_cut.cuh runs it with a warp per column.
//
// The elements are each object's (Value block's) leading steps of positive gain rn(w_j inc_s),
// s < spo, inc non-increasing (as the Lloyd tree's increments are). Sorted descending, the
// weights give a matrix rn(sorted[i] inc_s) whose column s is non-increasing in i (a correctly
// rounded product is monotone in w), so the gains of column s above x are a prefix found by a
// binary search, and GainsAbove(x) sums spo of them. The cut's gain x* is the steps-th largest
// gain counted with multiplicity: GainsAbove(x, or_equal) >= steps exactly when x <= x*, which
// makes "column entry i is at or below x*" monotone in i; each column's first such entry is
// found by a search over i, and x* is the largest of them. Which of the elements of gain x* is
// the cut is the key order's (object, then step): usually the first, as gains rarely tie.
// Internal.
#pragma once

#include <cstdint>

#include "host_device.h"
#include "tile_threshold.h"

namespace readkv::cuda::tile {

// A window's Value blocks at most (kTileMaxChunk / 16): the searches below take 8 steps.
inline constexpr int kWindowCutObjects = 128;
inline constexpr int kWindowCutKeyBits = 3;  // key = object << 3 | step (steps < 8)

// Entries of column s above x (or_equal: at or above it), for sorted[0, n) non-increasing, n <=
// kWindowCutObjects: the length of the prefix whose gain rn(sorted[i] inc_s) passes.
KVGATE_TILE_HD int ColumnAbove(const double* sorted, int n, double inc_s, double x, bool or_equal) {
  int pos = 0;
  for (int step = kWindowCutObjects; step > 0; step >>= 1) {
    if (pos + step <= n) {
      const double gain = StepGain(sorted[pos + step - 1], inc_s);
      if (or_equal ? gain >= x : gain > x) pos += step;
    }
  }
  return pos;
}

// Gains of the window above x (or at or above it), over its spo columns. With x >= 0 and
// !or_equal, GainsAbove(0) is the window's positive steps.
KVGATE_TILE_HD long long GainsAbove(const double* sorted, int n, const double* inc, int spo,
                                    double x, bool or_equal) {
  long long total = 0;
  for (int s = 0; s < spo; ++s) total += ColumnAbove(sorted, n, inc[s], x, or_equal);
  return total;
}

// Whether entry i of column s (inc_s = inc[s]) is at or below the cut's gain: at least `steps`
// gains reach it. Entries past the column's end (i >= n) count as below.
KVGATE_TILE_HD bool AtOrBelowCut(const double* sorted, int n, const double* inc, int spo,
                                 long long steps, double inc_s, int i) {
  return i >= n || GainsAbove(sorted, n, inc, spo, StepGain(sorted[i], inc_s), true) >= steps;
}

// The cut's gain by one thread: each column's first entry at or below it (binary search), the
// largest of those. Needs 0 < steps < GainsAbove(sorted, n, inc, spo, 0, false) (a cut exists).
KVGATE_TILE_HD double CutGainOfSorted(const double* sorted, int n, const double* inc, int spo,
                                      long long steps) {
  double cut = -1.0;
  for (int s = 0; s < spo; ++s) {
    int lo = 0, hi = n;  // the first i in [lo, hi] at or below the cut; hi = n: none in the column
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (AtOrBelowCut(sorted, n, inc, spo, steps, inc[s], mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (lo < n) {
      const double gain = StepGain(sorted[lo], inc[s]);
      cut = gain > cut ? gain : cut;
    }
  }
  return cut;
}

// The same search by a warp, in two rounds over a column's n <= kWindowCutObjects entries: lane
// l of round 1 tests entry Round1Entry(l); if f is the first lane whose test passed (none: the
// column has no entry at or below the cut), lane l < 4 of round 2 tests Round2Entry(f, l), and
// Round2Entry(f, f2), f2 its first lane that passed, is the column's first entry at or below the
// cut (none when >= n). Round 1's passing lanes are a suffix, and f's entry passed, so f2 exists.
KVGATE_TILE_HD int Round1Entry(int lane) { return 4 * lane + 3; }
KVGATE_TILE_HD int Round2Entry(int first, int lane) { return 4 * first + lane; }
static_assert(4 * 32 == kWindowCutObjects, "round 1's 32 lanes cover a window's blocks");

// The key of the rank-th (1-based) element of gain x in key order, over the weights in their own
// order w[0, n): object j ascending, then step. 0xFFFFFFFF if there are fewer.
KVGATE_TILE_HD unsigned TieKey(const double* w, int n, const double* inc, int spo, double x,
                               long long rank) {
  for (int j = 0; j < n; ++j) {
    for (int s = 0; s < spo; ++s) {
      if (StepGain(w[j], inc[s]) == x && --rank == 0) {
        return static_cast<unsigned>(j) << kWindowCutKeyBits | static_cast<unsigned>(s);
      }
    }
  }
  return 0xFFFFFFFFu;
}

// Steps object j (weight w) takes under the cut (gain, key): its leading steps whose gain is above
// the cut, or equal to it with a key at or before the cut's (greedy's order).
KVGATE_TILE_HD int StepsAtCut(double w, int j, const double* inc, int spo, double gain,
                              unsigned key) {
  int k = 0;
  while (k < spo) {
    const double g = StepGain(w, inc[k]);
    const unsigned my_key = static_cast<unsigned>(j) << kWindowCutKeyBits | static_cast<unsigned>(k);
    if (!(g > gain || (g == gain && my_key <= key))) break;
    ++k;
  }
  return k;
}

}  // namespace readkv::cuda::tile
