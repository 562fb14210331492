// CSV export of one recorded run, for spreadsheets and dataframes (`kvgate history export RUN
// --format csv --table T`). One header row, then one row per item; fields quoted as RFC 4180 says
// (a field holding a comma, quote, CR or LF is enclosed in quotes, quotes doubled), rows ended
// with CRLF. Absent values are empty fields. Times are as stored (ns on the generator's clock,
// relative to the load run's start); derived latencies follow loadgen/record.h.
//
// Tables:
//   requests   one row per request of every load run (warm-up rows included, flagged), with the
//              load run's id, label and pair, the record's fields and its TTFT/TPOT/E2E in ms;
//              chunk arrival times are left to the JSON export (a list per request).
//   load_runs  one row per load run: its metadata and the generator's summary, the summary's
//              nested keys flattened with dots (e.g. ttft.p99_ms).
//   quality    one row per scored quality item (reference and extra as JSON text).
//   gates      one row per gate result (details as JSON text).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/history/history_db.h"

namespace kvgate::history {

enum class CsvTable { kRequests, kLoadRuns, kQuality, kGates };

// "requests" | "load_runs" | "quality" | "gates"; std::invalid_argument naming the choices.
CsvTable ParseCsvTable(std::string_view name);
std::string_view ToString(CsvTable table);

// One field as RFC 4180 writes it.
std::string CsvField(std::string_view text);

// Writes the table of run `run_id`; HistoryError (not_found) when there is no such run. The rows
// come from one HistoryDb read per table.
void WriteCsv(HistoryDb& db, int64_t run_id, CsvTable table, std::ostream& out);

}  // namespace kvgate::history
