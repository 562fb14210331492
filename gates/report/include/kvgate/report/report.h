// The human report of a run: one self-contained HTML file (no network needed to view it) drawn
// from the run's report JSON — the same document `kvgate run` writes as report.json, which is
// itself built from the history rows, so a report can be redrawn from the database alone.
//
// Charts are drawn by Chart.js (embedded at build time from gates/report/node_modules): latency
// CDFs baseline vs candidate, goodput per pair with the interval, F1 per subset with intervals,
// and the four resource ledgers. The page marks itself `data-charts-drawn="N"` once N charts have
// painted non-blank canvases, which the end-to-end test checks in headless Chromium.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace kvgate::report {

// Renders the HTML report of `report_json` (see docs in report_template.html for the fields it
// reads; missing sections are shown as "not run"). Pure function; thread-safe.
std::string RenderHtml(const nlohmann::json& report_json);

// The JSON text embedded in a <script type="application/json"> element: '<', '>', '&', U+2028
// and U+2029 are written as \uXXXX escapes, so no text in the data can end the element, open an
// HTML comment or form markup, and JSON.parse of the element's text gives the data back exactly.
std::string EmbeddableJson(const nlohmann::json& json);

}  // namespace kvgate::report
