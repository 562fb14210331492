#include "kvgate/stats/student_t.h"

#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kvgate/stats/moments.h"

namespace kvgate::stats {

double StudentTQuantile(double p, double dof) {
  if (!(p > 0.0 && p < 1.0)) {
    throw std::invalid_argument("t quantile: p must be in (0, 1), got " + std::to_string(p));
  }
  if (!(dof > 0.0) || !std::isfinite(dof)) {
    throw std::invalid_argument("t quantile: dof must be positive and finite, got " +
                                std::to_string(dof));
  }
  // Inputs are validated above, so Boost's default throwing policy cannot fire on them.
  boost::math::students_t distribution(dof);
  return boost::math::quantile(distribution, p);
}

TInterval MeanTInterval(std::span<const double> values, double confidence) {
  if (!(confidence > 0.0 && confidence < 1.0)) {
    throw std::invalid_argument("t-interval: confidence must be in (0, 1), got " +
                                std::to_string(confidence));
  }
  if (values.size() < 2) {
    throw std::invalid_argument("t-interval: needs at least 2 values, got " +
                                std::to_string(values.size()));
  }
  Moments m = ComputeMoments(values);
  TInterval out;
  out.n = m.n;
  out.confidence = confidence;
  out.estimate = m.mean;
  out.std_error = std::sqrt(m.variance / static_cast<double>(m.n));
  out.t_quantile = StudentTQuantile(0.5 + confidence / 2.0, static_cast<double>(m.n - 1));
  out.lo = m.mean - out.t_quantile * out.std_error;
  out.hi = m.mean + out.t_quantile * out.std_error;
  return out;
}

}  // namespace kvgate::stats
