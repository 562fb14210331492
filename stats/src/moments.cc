#include "kvgate/stats/moments.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace kvgate::stats {

Moments ComputeMoments(std::span<const double> values) {
  if (values.empty()) throw std::invalid_argument("moments: values must not be empty");
  Moments m;
  double m2 = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    double x = values[i];
    if (!std::isfinite(x)) {
      throw std::invalid_argument("moments: value " + std::to_string(i) + " is not finite");
    }
    ++m.n;
    double delta = x - m.mean;
    m.mean += delta / static_cast<double>(m.n);
    m2 += delta * (x - m.mean);
  }
  m.variance = m.n > 1 ? m2 / static_cast<double>(m.n - 1) : 0.0;
  return m;
}

double Mean(std::span<const double> values) { return ComputeMoments(values).mean; }

double SampleVariance(std::span<const double> values) {
  if (values.size() < 2) {
    throw std::invalid_argument("variance: needs at least 2 values, got " +
                                std::to_string(values.size()));
  }
  return ComputeMoments(values).variance;
}

}  // namespace kvgate::stats
