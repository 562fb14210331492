// Follows the exposition format document (prometheus.io/docs/instrumenting/exposition_formats)
// and the behaviour of the reference Go parser (prometheus/common expfmt.TextParser) where the
// document is silent: blanks/tabs separate tokens, a trailing comma in a label set is allowed,
// unknown escapes are an error, lines whose first non-blank character is '#' are comments.
#include "kvgate/checks/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "kvgate/checks/errors.h"

namespace kvgate::checks {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

class LineParser {
 public:
  LineParser(std::string_view line, int64_t number) : line_(line), number_(number) {}

  [[noreturn]] void Fail(const std::string& what) const { throw ExpositionError(number_, what); }

  void SkipBlanks() {
    while (pos_ < line_.size() && IsBlank(line_[pos_])) ++pos_;
  }
  bool AtEnd() const { return pos_ >= line_.size(); }
  bool Consume(char c) {
    if (AtEnd() || line_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  std::string_view Rest() const { return line_.substr(pos_); }

  // Metric names allow ':'; label names do not.
  std::string Name(bool allow_colon, const char* what) {
    size_t start = pos_;
    while (pos_ < line_.size() && IsNameChar(line_[pos_]) && (allow_colon || line_[pos_] != ':')) {
      ++pos_;
    }
    if (pos_ == start || (line_[start] >= '0' && line_[start] <= '9') ||
        (!allow_colon && line_[start] == ':')) {
      Fail(std::string("expected a ") + what + " at column " + std::to_string(start + 1));
    }
    return std::string(line_.substr(start, pos_ - start));
  }

  std::string Token() {
    size_t start = pos_;
    while (pos_ < line_.size() && !IsBlank(line_[pos_])) ++pos_;
    return std::string(line_.substr(start, pos_ - start));
  }

  std::string QuotedLabelValue(const std::string& label) {
    if (!Consume('"')) Fail("label " + label + ": value must start with '\"'");
    std::string value;
    while (true) {
      if (AtEnd()) Fail("label " + label + ": unterminated quoted value");
      char c = line_[pos_++];
      if (c == '"') return value;
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (AtEnd()) Fail("label " + label + ": unterminated escape");
      char e = line_[pos_++];
      if (e == '\\' || e == '"') {
        value.push_back(e);
      } else if (e == 'n') {
        value.push_back('\n');
      } else {
        Fail("label " + label + ": invalid escape '\\" + std::string(1, e) + "'");
      }
    }
  }

 private:
  std::string_view line_;
  int64_t number_;
  size_t pos_ = 0;
};

std::optional<double> ParseValue(std::string_view token) {
  if (token == "+Inf" || token == "Inf" || token == "+inf" || token == "inf") {
    return std::numeric_limits<double>::infinity();
  }
  if (token == "-Inf" || token == "-inf") return -std::numeric_limits<double>::infinity();
  if (token == "NaN" || token == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);
  if (token.empty() || token.front() == '+') return std::nullopt;
  // from_chars would accept "inf"/"nan" spellings other than the ones above; refuse them.
  if (std::any_of(token.begin(), token.end(),
                  [](char c) { return c == 'i' || c == 'I' || c == 'n' || c == 'N'; })) {
    return std::nullopt;
  }
  double value = 0.0;
  auto [end, ec] =
      std::from_chars(token.data(), token.data() + token.size(), value, std::chars_format::general);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return value;
}

std::string UnescapeHelp(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == '\\' || text[i + 1] == 'n')) {
      out.push_back(text[i + 1] == 'n' ? '\n' : '\\');
      ++i;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

void ParseComment(LineParser& p, Exposition& out) {
  // After '#': only "HELP" and "TYPE" carry meaning; anything else is a free comment.
  p.SkipBlanks();
  std::string keyword = p.Token();
  if (keyword != "HELP" && keyword != "TYPE") return;
  p.SkipBlanks();
  std::string family = p.Name(true, "metric name");
  if (keyword == "HELP") {
    p.SkipBlanks();
    if (out.help.count(family) != 0) p.Fail("second HELP line for " + family);
    out.help[family] = UnescapeHelp(p.Rest());
    return;
  }
  p.SkipBlanks();
  std::string type = p.Token();
  p.SkipBlanks();
  if (!p.AtEnd()) p.Fail("unexpected text after the type of " + family);
  static const char* const kTypes[] = {"counter", "gauge", "histogram", "summary", "untyped"};
  if (std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes)) {
    p.Fail("unknown metric type '" + type + "' for " + family);
  }
  if (out.types.count(family) != 0) p.Fail("second TYPE line for " + family);
  out.types[family] = type;
}

void ParseSample(LineParser& p, Exposition& out) {
  MetricSample sample;
  sample.name = p.Name(true, "metric name");
  p.SkipBlanks();
  if (p.Consume('{')) {
    while (true) {
      p.SkipBlanks();
      if (p.Consume('}')) break;
      std::string label = p.Name(false, "label name");
      p.SkipBlanks();
      if (!p.Consume('=')) p.Fail("label " + label + ": expected '='");
      p.SkipBlanks();
      std::string value = p.QuotedLabelValue(label);
      for (const auto& existing : sample.labels) {
        if (existing.first == label) p.Fail("label " + label + " appears twice");
      }
      sample.labels.emplace_back(std::move(label), std::move(value));
      p.SkipBlanks();
      if (p.Consume(',')) continue;
      if (p.Consume('}')) break;
      p.Fail("expected ',' or '}' after label " + sample.labels.back().first);
    }
    p.SkipBlanks();
  }
  if (p.AtEnd()) p.Fail("sample " + sample.name + " has no value");
  std::string token = p.Token();
  std::optional<double> value = ParseValue(token);
  if (!value) p.Fail("sample " + sample.name + ": '" + token + "' is not a number");
  sample.value = *value;
  p.SkipBlanks();
  if (!p.AtEnd()) {
    std::string stamp = p.Token();
    int64_t ms = 0;
    auto [end, ec] = std::from_chars(stamp.data(), stamp.data() + stamp.size(), ms);
    if (ec != std::errc() || end != stamp.data() + stamp.size()) {
      p.Fail("sample " + sample.name + ": '" + stamp + "' is not a timestamp in milliseconds");
    }
    sample.timestamp_ms = ms;
    p.SkipBlanks();
    if (!p.AtEnd()) p.Fail("sample " + sample.name + ": unexpected text after the timestamp");
  }
  out.samples.push_back(std::move(sample));
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> MetricSample::Label(std::string_view label) const {
  for (const auto& [name, value] : labels) {
    if (name == label) return value;
  }
  return std::nullopt;
}

std::string Exposition::TypeOf(std::string_view sample_name) const {
  std::string name(sample_name);
  if (auto it = types.find(name); it != types.end()) return it->second;
  struct Suffix {
    std::string_view text;
    std::initializer_list<std::string_view> family_types;
  };
  static const Suffix kSuffixes[] = {{"_total", {"counter"}},
                                     {"_created", {"counter", "histogram", "summary"}},
                                     {"_bucket", {"histogram"}},
                                     {"_sum", {"histogram", "summary"}},
                                     {"_count", {"histogram", "summary"}}};
  for (const Suffix& suffix : kSuffixes) {
    if (name.size() <= suffix.text.size() ||
        name.compare(name.size() - suffix.text.size(), suffix.text.size(), suffix.text) != 0) {
      continue;
    }
    auto it = types.find(name.substr(0, name.size() - suffix.text.size()));
    if (it == types.end()) continue;
    for (std::string_view type : suffix.family_types) {
      if (it->second == type) return it->second;
    }
  }
  return "untyped";
}

Exposition ParsePrometheusText(std::string_view text) {
  Exposition out;
  int64_t number = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++number;
    // Tolerate CRLF line ends (some proxies add them); the format itself uses '\n'.
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineParser p(line, number);
    p.SkipBlanks();
    if (p.AtEnd()) continue;
    if (p.Consume('#')) {
      ParseComment(p, out);
    } else {
      ParseSample(p, out);
    }
  }
  return out;
}

std::string SeriesKey(const MetricSample& sample) {
  if (sample.labels.empty()) return sample.name;
  auto labels = sample.labels;
  std::sort(labels.begin(), labels.end());
  std::string key = sample.name + "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) key += ",";
    key += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
  }
  return key + "}";
}

}  // namespace kvgate::checks
