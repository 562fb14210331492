#include "kvgate/history/export_csv.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace kvgate::history {
namespace {

using Rows = std::vector<std::vector<std::string>>;

// An RFC 4180 reader, independent of the writer: quoted fields may hold commas, doubled quotes
// and line breaks; rows end with CRLF.
Rows ParseCsv(const std::string& text) {
  Rows rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        rows.back().back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        rows.back().back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      rows.emplace_back(1);
      ++i;
    } else {
      rows.back().back() += c;
    }
  }
  rows.pop_back();  // after the last CRLF
  return rows;
}

std::string Column(const Rows& rows, size_t row, const std::string& name) {
  for (size_t c = 0; c < rows.at(0).size(); ++c) {
    if (rows[0][c] == name) return rows.at(row).at(c);
  }
  ADD_FAILURE() << "no column " << name;
  return "";
}

class ExportCsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RunInfo info;
    info.kind = "run";
    info.policy_text = "[gates]\n";
    info.policy_digest = "sha256:abc";
    info.server_commands = nlohmann::json::array();
    run_ = db_.BeginRun(info);
    LoadRunMeta meta;
    meta.label = "candidate";
    meta.pair_index = 1;
    meta.arrival = "closed";
    meta.duration_s = 2.5;
    meta.summary = {{"requests", 2}, {"ttft", {{"p99_ms", 12.5}, {"count", 1}}}};
    loadgen::RequestRecord ok;
    ok.index = 0;
    ok.scheduled_ns = 1'000'000;
    ok.issued_ns = 1'000'100;
    ok.sent_ns = 1'000'500;
    ok.first_token_ns = 13'500'000;
    ok.end_ns = 43'500'000;
    ok.chunk_ns = {13'500'000, 23'500'000, 43'500'000};
    ok.prompt_tokens = 100;
    ok.completion_tokens = 4;
    ok.max_tokens = 4;
    ok.http_status = 200;
    loadgen::RequestRecord failed;
    failed.index = 1;
    failed.scheduled_ns = 2'000'000;
    failed.max_tokens = 4;
    failed.http_status = 400;
    failed.error_cause = "http_4xx";
    failed.error_text = "bad \"prompt\", line 1\r\nline 2";
    const std::vector<loadgen::RequestRecord> records = {ok, failed};
    db_.AddLoadRun(run_, meta, records);
    QualityItem item;
    item.check = "qa";
    item.label = "candidate";
    item.item_id = "qa-1";
    item.prediction = " Paris, France";
    item.reference = {"Paris"};
    item.score = 66.7;
    db_.AddQualityItems(run_, std::vector<QualityItem>{item});
  }

  Rows Table(CsvTable table) {
    std::ostringstream out;
    WriteCsv(db_, run_, table, out);
    return ParseCsv(out.str());
  }

  testing::TempDir dir_;
  HistoryDb db_ = HistoryDb::Open(dir_.File("h.db"));
  int64_t run_ = 0;
};

TEST_F(ExportCsvTest, RequestsRowsCarryTheRecordAndItsLatencies) {
  const Rows rows = Table(CsvTable::kRequests);
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) EXPECT_EQ(row.size(), rows[0].size());
  EXPECT_EQ(Column(rows, 1, "label"), "candidate");
  EXPECT_EQ(Column(rows, 1, "pair_index"), "1");
  EXPECT_EQ(Column(rows, 1, "ttft_ms"), "12.5");  // 13.5 ms - 1 ms scheduled
  EXPECT_EQ(Column(rows, 1, "e2e_ms"), "42.5");
  EXPECT_EQ(Column(rows, 1, "tpot_ms"), "10");    // (42.5 - 12.5) / (4 - 1)
  EXPECT_EQ(Column(rows, 1, "chunks"), "3");
  // A failed request: no latencies, and its text survives commas, quotes and a line break.
  EXPECT_EQ(Column(rows, 2, "ttft_ms"), "");
  EXPECT_EQ(Column(rows, 2, "error_text"), "bad \"prompt\", line 1\r\nline 2");
  EXPECT_EQ(Column(rows, 2, "http_status"), "400");
}

TEST_F(ExportCsvTest, LoadRunsFlattenTheSummary) {
  const Rows rows = Table(CsvTable::kLoadRuns);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(Column(rows, 1, "summary.ttft.p99_ms"), "12.5");
  EXPECT_EQ(Column(rows, 1, "summary.requests"), "2");
  EXPECT_EQ(Column(rows, 1, "request_count"), "2");
  EXPECT_EQ(Column(rows, 1, "offered_rate"), "");  // closed loop: no offered rate
}

TEST_F(ExportCsvTest, QualityKeepsPredictionsVerbatim) {
  const Rows rows = Table(CsvTable::kQuality);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(Column(rows, 1, "prediction"), " Paris, France");
  EXPECT_EQ(Column(rows, 1, "reference"), "[\"Paris\"]");
  EXPECT_EQ(Column(rows, 1, "correct"), "");
}

TEST_F(ExportCsvTest, GatesTableHasAHeaderEvenWhenEmpty) {
  const Rows rows = Table(CsvTable::kGates);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].front(), "gate");
}

TEST_F(ExportCsvTest, UnknownRunAndTableAreRefused) {
  std::ostringstream out;
  EXPECT_THROW(WriteCsv(db_, run_ + 1, CsvTable::kRequests, out), HistoryError);
  EXPECT_TRUE(out.str().empty());
  EXPECT_THROW(ParseCsvTable("requestz"), std::invalid_argument);
  EXPECT_EQ(ParseCsvTable(ToString(CsvTable::kLoadRuns)), CsvTable::kLoadRuns);
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a\"b"), "\"a\"\"b\"");
}

}  // namespace
}  // namespace kvgate::history
