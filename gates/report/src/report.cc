#include "kvgate/report/report.h"

#include <string_view>

#include "report_assets.h"

namespace kvgate::report {
namespace {

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

std::string EscapeHtml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string EmbeddableJson(const nlohmann::json& json) {
  // error_handler replace: invalid UTF-8 in a model's output must not abort the report.
  const std::string text = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // '<', '>' and '&' can only stand inside JSON strings, where \uXXXX is the same character: so
  // the text keeps its meaning while no "</script", "<!--" or character reference can form in
  // it. U+2028 and U+2029 (E2 80 A8/A9) too, which older JavaScript parsers take as line ends.
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xE2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
               (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderHtml(const nlohmann::json& report_json) {
  std::string html(kReportTemplate);
  std::string title = "kvgate run";
  if (report_json.contains("run") && report_json["run"].contains("id")) {
    title += " " + report_json["run"]["id"].dump();
  }
  if (report_json.contains("verdict") && report_json["verdict"].is_string()) {
    title += ": " + report_json["verdict"].get<std::string>();
  }
  // Order matters: the data goes in last so no placeholder inside it is ever replaced.
  ReplaceAll(html, "@KVGATE_TITLE@", EscapeHtml(title));
  ReplaceAll(html, "@KVGATE_CHART_JS@", kChartJs);
  size_t at = html.find("@KVGATE_REPORT_JSON@");
  if (at != std::string::npos) html.replace(at, 20, EmbeddableJson(report_json));
  return html;
}

}  // namespace kvgate::report
