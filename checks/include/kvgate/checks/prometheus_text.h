// A parser for the Prometheus text exposition format 0.0.4 (what every /metrics endpoint of
// vLLM, prometheus-cpp and our server speaks): `# HELP` / `# TYPE` lines, other comments, samples
// `name{label="value",...} value [timestamp_ms]` with escaped label values (\\, \", \n), values in
// Go float syntax including exponents, +Inf, -Inf and NaN. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvgate::checks {

struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in exposition order, unescaped
  double value = 0.0;
  std::optional<int64_t> timestamp_ms;

  // The label's value, or nullopt when the sample has no such label.
  std::optional<std::string> Label(std::string_view label) const;
};

struct Exposition {
  std::vector<MetricSample> samples;         // in exposition order
  std::map<std::string, std::string> types;  // family → "counter", "gauge", "histogram", ...
  std::map<std::string, std::string> help;   // family → docstring, unescaped

  // The declared type of the family a sample belongs to, resolving the _total, _bucket, _sum,
  // _count and _created suffixes; "untyped" when no TYPE line covers it.
  std::string TypeOf(std::string_view sample_name) const;
};

// Parses the whole text. Throws ExpositionError naming the 1-based line on malformed input.
Exposition ParsePrometheusText(std::string_view text);

// A canonical series name: `name{a="x",b="y"}` with labels sorted by name and values escaped as
// in the format; just `name` without labels. Equal series give equal keys.
std::string SeriesKey(const MetricSample& sample);

}  // namespace kvgate::checks
