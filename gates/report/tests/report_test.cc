#include "kvgate/report/report.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace kvgate::report {
namespace {

nlohmann::json SampleReport() {
  nlohmann::json ttft_b = nlohmann::json::array(), ttft_c = nlohmann::json::array();
  for (int i = 1; i <= 50; ++i) {
    ttft_b.push_back(0.100 + 0.002 * i);
    ttft_c.push_back(0.090 + 0.002 * i);
  }
  return {
      {"verdict", "INCONCLUSIVE"},
      {"exit_code", 2},
      {"run", {{"id", 7}, {"policy_name", "test"}, {"status", "complete"}, {"git_commit", "abc"}}},
      {"legs",
       {{{"leg", 1},
         {"machine", {{"host", "gpu-a"}, {"gpus", {"NVIDIA H200"}}}},
         {"servers",
          {{{"label", "baseline"}, {"kind", "local"}, {"cpus", "4-15"}, {"client_cpus", "0-3"}},
           {{"label", "candidate"}, {"kind", "local"}, {"cpus", "4-15"}, {"client_cpus", "0-3"}}}}},
        {{"leg", 2},
         {"machine", {{"host", "gpu-b"}, {"gpus", {"NVIDIA H100 80GB HBM3"}}}},
         {"servers",
          {{{"label", "baseline"}, {"kind", "local"}, {"cpus", "1"}, {"client_cpus", "0"}},
           {{"label", "candidate"}, {"kind", "url"}}}}}}},
      {"gates",
       {{{"gate", "passkey"}, {"status", "PASS"}, {"observed", 200}, {"threshold", 200},
         {"interval", nullptr}, {"reason", "found 200/200 passkeys </script><b>x</b>"}}}},
      {"quality",
       {{"passkey", {{"baseline", {{"correct", 200}, {"items", 200}}},
                     {"candidate", {{"correct", 200}, {"items", 200}}}}},
        {"qa", {{"subsets", {{{"subset", "len=1k"}, {"baseline_f1", 95.0}, {"candidate_f1", 94.5},
                              {"drop", {{"estimate", 0.5}, {"lo", -0.2}, {"hi", 1.3}}}}}}}}}},
      {"load",
       {{"pairs", {{{"pair_index", 0}, {"baseline", {{"goodput_rps", 1.0}}},
                    {"candidate", {{"goodput_rps", 1.2}}}}}},
        {"goodput_ratio", {{"estimate", 1.2}, {"lo", 1.1}, {"hi", 1.3}}},
        {"cdf", {{"baseline", {{"ttft_s", ttft_b}, {"tpot_s", ttft_b}}},
                 {"candidate", {{"ttft_s", ttft_c}, {"tpot_s", ttft_c}}}}}}},
      {"ledgers", {{"baseline", {{"capacity_bytes", 1e6}}}, {"candidate", {{"capacity_bytes", 2e6}}}}},
  };
}

TEST(ReportTest, EmbeddedJsonCannotCloseItsScriptElement) {
  std::string text = EmbeddableJson({{"reason", "</script><script>alert(1)</script>"}});
  EXPECT_EQ(text.find("</"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(text)["reason"], "</script><script>alert(1)</script>");
}

// Any text a model or a user can put in the data -- an HTML comment opener, a script end tag,
// a CDATA end, U+2028 -- must come back out of the page's data element as the same JSON.
TEST(ReportTest, EmbeddedDataParsesBackWhateverTheTextHolds) {
  const std::vector<std::string> hostile = {
      "<!--", "<!-- x -->", "</script>", "<script>", "]]>", "&lt;", "a<b>c&d",
      "\u2028 \u2029", "<\\!--", "\"</ScRiPt>", "<!--<script>"};
  for (const std::string& text : hostile) {
    nlohmann::json report = SampleReport();
    report["gates"][0]["reason"] = text;
    report["quality"]["disagreements"] = {{"items", {{{"baseline", {{"prediction", text}}}}}}};
    const std::string html = RenderHtml(report);
    const std::string open = "<script type=\"application/json\" id=\"report-data\">";
    const size_t begin = html.find(open);
    ASSERT_NE(begin, std::string::npos);
    const size_t end = html.find("</script>", begin + open.size());
    ASSERT_NE(end, std::string::npos);
    const std::string embedded = html.substr(begin + open.size(), end - begin - open.size());
    // An HTML parser ends the script element's text only at "</script"; "<!--" inside it
    // changes how that end is found, so neither may appear.
    EXPECT_EQ(embedded.find("<!--"), std::string::npos) << text;
    EXPECT_EQ(embedded.find("</"), std::string::npos) << text;
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(embedded)) << "not JSON for " << text;
    EXPECT_EQ(parsed, report) << text;
  }
}

TEST(ReportTest, PageIsSelfContainedAndCarriesTheData) {
  std::string html = RenderHtml(SampleReport());
  EXPECT_NE(html.find("Chart.js v4"), std::string::npos);  // the library is inline
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);   // nothing fetched from a network
  EXPECT_EQ(html.find("@KVGATE_"), std::string::npos);     // every placeholder filled
  EXPECT_NE(html.find("<title>kvgate run 7: INCONCLUSIVE</title>"), std::string::npos);
}

// Opens the report in headless Chromium (installed by scripts/deps.sh) and reads the DOM after
// the page's script ran: every chart must have painted a non-blank canvas.
TEST(ReportTest, HeadlessChromiumDrawsEveryChart) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvgate_report_test";
  std::filesystem::create_directories(dir);
  std::filesystem::path page = dir / "report.html";
  std::ofstream(page) << RenderHtml(SampleReport());
  std::string command =
      "chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--user-data-dir=" + (dir / "profile").string() +
      " --virtual-time-budget=5000 --dump-dom file://" + page.string() + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  ASSERT_TRUE(pipe) << "could not start chromium";
  std::string dom;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe.get())) dom.append(buffer.data(), n);
  ASSERT_FALSE(dom.empty()) << "chromium printed no DOM; is it installed (scripts/deps.sh)?";
  std::smatch drawn, expected;
  ASSERT_TRUE(std::regex_search(dom, drawn, std::regex("data-charts-drawn=\"(\\d+)\"")));
  ASSERT_TRUE(std::regex_search(dom, expected, std::regex("data-charts-expected=\"(\\d+)\"")));
  EXPECT_EQ(expected[1].str(), "6");  // TTFT CDF, TPOT CDF, goodput, F1, F1 drop, ledgers
  EXPECT_EQ(drawn[1].str(), expected[1].str());
  // A run whose legs ran on two machines names each leg's.
  EXPECT_NE(dom.find("leg 1 machine: gpu-a · NVIDIA H200"), std::string::npos);
  EXPECT_NE(dom.find("leg 2 machine: gpu-b · NVIDIA H100 80GB HBM3"), std::string::npos);
  // ... and where each leg's local servers and the suite's clients ran (an external one: nowhere).
  EXPECT_NE(dom.find("leg 1 placement: baseline on CPUs 4-15, candidate on CPUs 4-15; the suite "
                     "and its load generator on CPUs 0-3"),
            std::string::npos);
  EXPECT_NE(dom.find("leg 2 placement: baseline on CPUs 1; the suite and its load generator on "
                     "CPUs 0<"),
            std::string::npos);
  // The reason text is shown as text, not markup.
  EXPECT_NE(dom.find("found 200/200 passkeys &lt;/script&gt;&lt;b&gt;x&lt;/b&gt;"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::report
