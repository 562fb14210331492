// A two-sided confidence interval around a point estimate, as every kvgate gate consumes it.
// Units are those of the estimated quantity.
#pragma once

#include <cstddef>

namespace kvgate::stats {

struct Interval {
  double estimate = 0.0;    // the point estimate on the full sample
  double lo = 0.0;          // lower bound, inclusive
  double hi = 0.0;          // upper bound, inclusive
  double confidence = 0.0;  // nominal coverage, e.g. 0.95

  bool Contains(double x) const { return lo <= x && x <= hi; }
  // True when the whole interval lies strictly above (below) x: the evidence decides.
  bool EntirelyAbove(double x) const { return lo > x; }
  bool EntirelyBelow(double x) const { return hi < x; }
  double Width() const { return hi - lo; }
};

// A Student-t interval of a mean: estimate ± t_quantile × std_error, with n - 1 degrees of
// freedom.
struct TInterval : Interval {
  size_t n = 0;
  double std_error = 0.0;   // sample standard deviation / sqrt(n)
  double t_quantile = 0.0;  // the t quantile at (1 + confidence) / 2 with n - 1 dof
};

}  // namespace kvgate::stats
