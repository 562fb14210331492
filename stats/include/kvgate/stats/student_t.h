// Student-t quantiles and t-intervals of a mean (Boost.Math supplies the distribution).
#pragma once

#include <span>

#include "kvgate/stats/interval.h"

namespace kvgate::stats {

// The p-quantile of Student's t with `dof` degrees of freedom (dof > 0, may be fractional),
// e.g. StudentTQuantile(0.975, 4) = 2.7764… Throws std::invalid_argument when p is not in (0, 1)
// or dof is not a positive finite number.
double StudentTQuantile(double p, double dof);

// The two-sided t-interval of the mean of `values` at `confidence` (in (0, 1)), assuming the
// values are independent draws of one distribution (e.g. one value per interleaved A/B pair).
// Needs at least two finite values; throws std::invalid_argument otherwise. With zero spread the
// interval collapses to the mean.
TInterval MeanTInterval(std::span<const double> values, double confidence = 0.95);

}  // namespace kvgate::stats
