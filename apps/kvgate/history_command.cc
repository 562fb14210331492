// `kvgate history list|show|export|compare|regate`: read the SQLite run history (gates/history).
//
//   kvgate history list [--db FILE] [--limit N] [--json]
//   kvgate history show RUN [--db FILE] [--json]      metadata, gate results, load-run summaries
//   kvgate history export RUN [--db FILE] [--format json|csv] [--table T]
//                                                     everything about a run as JSON, or one
//                                                     table (requests, load_runs, quality,
//                                                     gates) as CSV
//   kvgate history compare A B [--db FILE] [--json]   gates and ledgers side by side with deltas,
//                                                     and what changed in policy/commit/machine
//   kvgate history regate RUN [--db FILE] [--json]    decide every gate again from the run's raw
//                                                     rows and its stored policy; exit code of
//                                                     that verdict (0/1/2), and say whether it
//                                                     matches what was recorded
//   kvgate history report RUN --out DIR [--db FILE]   write the run's report.json and report.html
//                                                     again, with this kvgate's report (e.g. for
//                                                     runs recorded before a section existed)
// RUN is a run id or `latest`. Before reading, runs whose owner process is gone are marked
// `interrupted`, so a crashed run never shows as `running`.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kvgate/command.h"
#include "kvgate/gates/gates.h"
#include "kvgate/history/compare.h"
#include "kvgate/history/export_csv.h"
#include "kvgate/history/history_db.h"
#include "kvgate/suite/run_suite.h"

namespace kvgate {
namespace {

using history::HistoryDb;
using history::HistoryError;
using nlohmann::json;

struct HistoryOptions {
  std::string db = "kvgate.db";
  int limit = 30;
  bool json = false;
  std::string run_a;
  std::string run_b;
  std::string out_dir;
  std::string format = "json";     // export
  std::string table = "requests";  // export --format csv
};

HistoryDb OpenExisting(const std::string& path) {
  HistoryDb::Options options;
  options.create_if_missing = false;
  try {
    HistoryDb db = HistoryDb::Open(path, options);
    db.MarkInterruptedRuns();
    return db;
  } catch (const HistoryError& e) {
    if (e.kind() == HistoryError::Kind::kCannotOpen)
      throw UsageError(std::string("--db: ") + e.what());
    throw;
  }
}

int64_t ResolveRun(HistoryDb& db, const std::string& text) {
  if (text == "latest") {
    auto latest = db.LatestRunId();
    if (!latest) throw UsageError("RUN: no runs recorded in " + db.path().string());
    return *latest;
  }
  int64_t id = 0;
  size_t used = 0;
  try {
    id = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || id <= 0) {
    throw UsageError("RUN must be a run id (a positive integer) or 'latest', got '" + text + "'");
  }
  try {
    db.GetRun(id);
  } catch (const HistoryError& e) {
    if (e.kind() == HistoryError::Kind::kNotFound) {
      throw UsageError("RUN: no run " + text + " in " + db.path().string());
    }
    throw;
  }
  return id;
}

// --- formatting ---

// Left-aligned text columns, two spaces apart.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out, const std::string& indent = "") const {
    std::vector<size_t> widths;
    for (const auto& row : rows_) {
      widths.resize(std::max(widths.size(), row.size()), 0);
      for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
      }
      out << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Num(std::optional<double> value, const char* format = "%.4g") {
  if (!value) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, *value);
  return buffer;
}

std::optional<double> JsonNumber(const json& object, const std::vector<std::string>& keys) {
  const json* node = &object;
  for (const std::string& key : keys) {
    if (!node->is_object() || !node->contains(key)) return std::nullopt;
    node = &(*node)[key];
  }
  if (!node->is_number()) return std::nullopt;
  return node->get<double>();
}

// Seconds since the epoch of our "YYYY-MM-DDTHH:MM:SS.mmmZ" timestamps.
std::optional<double> ParseUtc(const std::string& text) {
  std::tm tm{};
  std::istringstream in(text);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return std::nullopt;
  double millis = 0;
  if (in.peek() == '.') {
    in.get();
    int value = 0;
    in >> value;
    millis = value;
  }
  return static_cast<double>(timegm(&tm)) + millis / 1000.0;
}

std::string Duration(const history::RunRow& run) {
  if (!run.ended_at) return "-";
  auto start = ParseUtc(run.started_at);
  auto end = ParseUtc(*run.ended_at);
  if (!start || !end) return "?";
  double seconds = *end - *start;
  char buffer[32];
  if (seconds < 120) {
    std::snprintf(buffer, sizeof(buffer), "%.1fs", seconds);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%dm%02ds", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  }
  return buffer;
}

std::string GateCounts(const std::vector<history::GateResult>& gates) {
  if (gates.empty()) return "-";
  int pass = 0, fail = 0, inconclusive = 0;
  for (const auto& g : gates) {
    if (g.status == "PASS") ++pass;
    if (g.status == "FAIL") ++fail;
    if (g.status == "INCONCLUSIVE") ++inconclusive;
  }
  return std::to_string(pass) + "/" + std::to_string(fail) + "/" + std::to_string(inconclusive);
}

std::string Interval(const history::GateResult& g) {
  if (!g.interval_lo && !g.interval_hi) return "-";
  return "[" + Num(g.interval_lo) + ", " + Num(g.interval_hi) + "]";
}

std::string StatusText(const history::RunRow& run) { return std::string(ToString(run.status)); }

// "baseline on CPUs 1, candidate on CPUs 1; the suite and its load generator on CPUs 0" from a
// leg's recorded servers (RunLeg::servers), as report.html words it; "" when none has CPUs
// (external servers, runs stored before placement was recorded).
std::string PlacementText(const nlohmann::json& servers) {
  std::string text, client;
  for (const auto& server : servers) {
    const std::string cpus = server.is_object() ? server.value("cpus", "") : "";
    if (cpus.empty()) continue;
    text += (text.empty() ? "" : ", ") + server.value("label", "?") + " on CPUs " + cpus;
    if (client.empty()) client = server.value("client_cpus", "");
  }
  if (!text.empty() && !client.empty()) {
    text += "; the suite and its load generator on CPUs " + client;
  }
  return text;
}

// --- list ---

void List(const HistoryOptions& o) {
  if (o.limit <= 0) throw UsageError("--limit must be > 0, got " + std::to_string(o.limit));
  if (!std::filesystem::exists(o.db)) {
    if (o.json) {
      std::cout << "[]\n";
    } else {
      std::cout << "no runs recorded in " << o.db << "\n";
    }
    return;
  }
  HistoryDb db = OpenExisting(o.db);
  std::vector<history::RunRow> runs = db.ListRuns(o.limit);
  if (o.json) {
    json out = json::array();
    for (const auto& run : runs) {
      json entry = history::ToJson(run);
      entry.erase("policy_text");  // `show`/`export` have it; a listing stays small
      entry["gates"] = GateCounts(db.GateResults(run.id));
      out.push_back(std::move(entry));
    }
    std::cout << out.dump(2) << "\n";
    return;
  }
  if (runs.empty()) {
    std::cout << "no runs recorded in " << o.db << "\n";
    return;
  }
  TextTable table(
      {"ID", "STARTED (UTC)", "DURATION", "KIND", "STATUS", "VERDICT", "GATES P/F/I", "COMMIT"});
  for (const auto& run : runs) {
    std::string started = run.started_at.substr(0, 19);
    std::replace(started.begin(), started.end(), 'T', ' ');
    table.Add({std::to_string(run.id), started, Duration(run), run.info.kind, StatusText(run),
               run.verdict.value_or("-"), GateCounts(db.GateResults(run.id)),
               run.info.git_commit.empty() ? "-" : run.info.git_commit});
  }
  table.Print(std::cout);
}

// --- show ---

void PrintGates(const std::vector<history::GateResult>& gates) {
  if (gates.empty()) {
    std::cout << "\ngates: none recorded\n";
    return;
  }
  std::cout << "\ngates:\n";
  TextTable table({"GATE", "STATUS", "OBSERVED", "THRESHOLD", "INTERVAL", "REASON"});
  for (const auto& g : gates) {
    table.Add({g.gate, g.status, Num(g.observed), Num(g.threshold), Interval(g),
               g.reason.empty() ? "-" : g.reason});
  }
  table.Print(std::cout, "  ");
}

void PrintLoadRuns(const std::vector<history::LoadRunRow>& load_runs) {
  if (load_runs.empty()) {
    std::cout << "\nload runs: none recorded\n";
    return;
  }
  std::cout << "\nload runs:\n";
  TextTable table({"ID", "LABEL", "PAIR", "ARRIVAL", "RATE/S", "SEED", "DURATION", "REQS", "ERR",
                   "GOODPUT/S", "P99 TTFT ms", "P99 TPOT ms", "RESULT"});
  for (const auto& lr : load_runs) {
    const json& s = lr.meta.summary;
    table.Add({std::to_string(lr.id), lr.meta.label,
               lr.meta.pair_index ? std::to_string(*lr.meta.pair_index) : "-", lr.meta.arrival,
               Num(lr.meta.offered_rate), std::to_string(lr.meta.seed),
               Num(lr.meta.duration_s, "%.1fs"), std::to_string(lr.request_count),
               Num(JsonNumber(s, {"errored"}), "%.0f"), Num(JsonNumber(s, {"goodput_rps"})),
               Num(JsonNumber(s, {"ttft", "p99_ms"})), Num(JsonNumber(s, {"tpot", "p99_ms"})),
               (lr.superseded_in_leg
                    ? "SUPERSEDED (pair measured again in leg " +
                          std::to_string(*lr.superseded_in_leg) + "); "
                    : std::string()) +
                   (lr.meta.valid ? "VALID" : "INVALID: " + lr.meta.invalid_reason)});
  }
  table.Print(std::cout, "  ");
}

void Show(const HistoryOptions& o) {
  HistoryDb db = OpenExisting(o.db);
  const int64_t id = ResolveRun(db, o.run_a);
  history::RunRow run = db.GetRun(id);
  std::vector<history::GateResult> gates = db.GateResults(id);
  std::vector<history::LoadRunRow> load_runs = db.LoadRuns(id);
  std::vector<history::Ledger> ledgers = db.Ledgers(id);
  std::vector<history::CheckResult> checks = db.CheckResults(id);
  const std::vector<history::RunLeg> legs = db.Legs(id);
  if (o.json) {
    json out = history::ToJson(run);
    out["legs"] = json::array();
    for (const auto& leg : legs) out["legs"].push_back(history::ToJson(leg));
    out["gate_results"] = json::array();
    for (const auto& g : gates) out["gate_results"].push_back(history::ToJson(g));
    out["load_runs"] = json::array();
    for (const auto& lr : load_runs) out["load_runs"].push_back(history::ToJson(lr));
    out["ledgers"] = json::array();
    for (const auto& l : ledgers) out["ledgers"].push_back(history::ToJson(l));
    out["check_results"] = json::array();
    for (const auto& c : checks) out["check_results"].push_back(history::ToJson(c));
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "run " << run.id << " (" << run.info.kind << ")\n";
  std::cout << "  status:    " << StatusText(run)
            << (run.status_reason.empty() ? "" : " — " + run.status_reason) << "\n";
  std::cout << "  verdict:   " << run.verdict.value_or("-")
            << "   exit code: " << (run.exit_code ? std::to_string(*run.exit_code) : "-") << "\n";
  std::cout << "  started:   " << run.started_at << "\n";
  std::cout << "  ended:     " << run.ended_at.value_or("-") << "   (" << Duration(run) << ")\n";
  std::cout << "  commit:    " << (run.info.git_commit.empty() ? "-" : run.info.git_commit) << "\n";
  std::cout << "  policy:    " << (run.info.policy_digest.empty() ? "-" : run.info.policy_digest)
            << " (" << std::count(run.info.policy_text.begin(), run.info.policy_text.end(), '\n')
            << " lines; `export` prints it)\n";
  std::cout << "  machine:   " << run.info.machine.dump() << "\n";
  std::cout << "  device:    " << run.info.device.dump() << "\n";
  for (const auto& command : run.info.server_commands) {
    std::cout << "  server:    "
              << (command.is_string() ? command.get<std::string>() : command.dump()) << "\n";
  }
  // Where the local servers ran (`kvgate run`'s [placement], recorded with each leg; the
  // report's words): one line, or one per leg when the legs differ.
  std::vector<std::string> placed;
  for (const auto& leg : legs) placed.push_back(PlacementText(leg.servers));
  const bool same = std::all_of(placed.begin(), placed.end(),
                                [&](const std::string& p) { return p == placed.front(); });
  for (size_t i = 0; i < placed.size(); ++i) {
    if (placed[i].empty() || (same && i > 0)) continue;
    std::cout << "  placement: "
              << (same ? "" : "leg " + std::to_string(legs[i].leg) + ": ") << placed[i] << "\n";
  }
  if (run.info.owner) {
    std::cout << "  owner:     pid " << run.info.owner->pid << " on " << run.info.owner->host
              << "\n";
  }
  if (!run.info.notes.empty()) std::cout << "  notes:     " << run.info.notes << "\n";
  if (legs.size() > 1) {  // a resumed run (`kvgate run --resume`)
    std::cout << "\nlegs:\n";
    TextTable table({"LEG", "STARTED", "ENDED", "COMMIT", "HOST", "ENDED BECAUSE"});
    for (const auto& leg : legs) {
      table.Add({std::to_string(leg.leg), leg.started_at, leg.ended_at.value_or("-"),
                 leg.git_commit.empty() ? "-" : leg.git_commit, leg.machine.value("host", "-"),
                 leg.end_reason.empty() ? "-" : leg.end_reason});
    }
    table.Print(std::cout, "  ");
  }
  PrintGates(gates);
  PrintLoadRuns(load_runs);
  if (!ledgers.empty()) {
    std::cout << "\nledgers:\n";
    TextTable table({"LABEL", "NAME", "VALUE"});
    for (const auto& l : ledgers) table.Add({l.label, l.name, Num(l.value, "%.6g")});
    table.Print(std::cout, "  ");
  }
  if (!checks.empty()) {
    std::cout << "\nchecks:\n";
    TextTable table({"CHECK", "STATUS", "REASON"});
    for (const auto& c : checks) table.Add({c.name, c.status, c.reason.empty() ? "-" : c.reason});
    table.Print(std::cout, "  ");
  }
}

// --- export ---

void Export(const HistoryOptions& o) {
  HistoryDb db = OpenExisting(o.db);
  const int64_t id = ResolveRun(db, o.run_a);
  if (o.format == "csv") {
    history::WriteCsv(db, id, history::ParseCsvTable(o.table), std::cout);
  } else {
    std::cout << db.Export(id).dump(2) << "\n";
  }
}

// --- regate ---

json GateJson(const std::optional<history::GateResult>& g) {
  if (!g) return nullptr;
  auto opt = [](const std::optional<double>& v) -> json { return v ? json(*v) : json(nullptr); };
  return {{"status", g->status},       {"observed", opt(g->observed)},
          {"threshold", opt(g->threshold)}, {"interval_lo", opt(g->interval_lo)},
          {"interval_hi", opt(g->interval_hi)}, {"reason", g->reason}};
}

int Regate(const HistoryOptions& o) {
  HistoryDb db = OpenExisting(o.db);
  const int64_t id = ResolveRun(db, o.run_a);
  const suite::RegateComparison c = suite::CompareRegate(db, id);
  const std::string verdict = gates::ToString(c.verdict);
  if (o.json) {
    json rows = json::array();
    for (const auto& row : c.rows) {
      rows.push_back({{"gate", row.gate},
                      {"recorded", GateJson(row.recorded)},
                      {"recomputed", GateJson(row.recomputed)},
                      {"differences", row.differences}});
    }
    std::cout << json{{"run", id},
                      {"verdict", verdict},
                      {"recorded_verdict", c.recorded_verdict ? json(*c.recorded_verdict)
                                                              : json(nullptr)},
                      {"identical", c.identical},
                      {"gates", rows}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "run " << id << ": gates decided again from its stored rows and policy\n\n";
    TextTable table({"GATE", "RECORDED", "NOW", "OBSERVED (REC)", "OBSERVED (NOW)", "INTERVAL (NOW)",
                     "DIFFERENCES"});
    for (const auto& row : c.rows) {
      std::string differences;
      for (const auto& d : row.differences) differences += (differences.empty() ? "" : ", ") + d;
      table.Add({row.gate, row.recorded ? row.recorded->status : "-",
                 row.recomputed ? row.recomputed->status : "-",
                 Num(row.recorded ? row.recorded->observed : std::nullopt),
                 Num(row.recomputed ? row.recomputed->observed : std::nullopt),
                 row.recomputed ? Interval(*row.recomputed) : "-",
                 differences.empty() ? "none" : differences});
    }
    table.Print(std::cout, "  ");
    std::cout << "\nverdict now: " << verdict << " (recorded: "
              << c.recorded_verdict.value_or("none") << "); "
              << (c.identical ? "identical to the recorded gates"
                              : "DIFFERS from the recorded gates (see DIFFERENCES)")
              << "\n";
  }
  return gates::ExitCode(c.verdict);
}

// --- compare ---

void Compare(const HistoryOptions& o) {
  HistoryDb db = OpenExisting(o.db);
  const history::RunComparison c =
      history::CompareRuns(db, ResolveRun(db, o.run_a), ResolveRun(db, o.run_b));
  if (o.json) {
    std::cout << history::ToJson(c).dump(2) << "\n";
    return;
  }
  const history::RunRow& a = c.a;
  const history::RunRow& b = c.b;
  std::cout << "A = run " << a.id << " (" << a.started_at << ", " << StatusText(a) << ", verdict "
            << a.verdict.value_or("-") << ")\n";
  std::cout << "B = run " << b.id << " (" << b.started_at << ", " << StatusText(b) << ", verdict "
            << b.verdict.value_or("-") << ")\n";

  std::cout << "\nwhat changed:\n";
  if (c.changed.empty()) std::cout << "  nothing: same commit, policy, machine, device and servers\n";
  if (c.changed.contains("git_commit")) {
    auto commit = [](const std::string& text) { return text.empty() ? std::string("-") : text; };
    std::cout << "  commit:  " << commit(a.info.git_commit) << " -> " << commit(b.info.git_commit)
              << "\n";
  }
  if (c.changed.contains("policy")) {
    std::cout << "  policy:  " << (a.info.policy_digest.empty() ? "?" : a.info.policy_digest)
              << " -> " << (b.info.policy_digest.empty() ? "?" : b.info.policy_digest) << "\n";
    for (const auto& line : c.changed["policy"]["diff"]) {
      std::cout << "    " << line.get<std::string>() << "\n";
    }
  }
  for (const char* section : {"machine", "device"}) {
    if (!c.changed.contains(section)) continue;
    for (const auto& [key, values] : c.changed[section].items()) {
      std::cout << "  " << section << "." << key << ": " << values["a"].dump() << " -> "
                << values["b"].dump() << "\n";
    }
  }
  if (c.changed.contains("server_commands")) {
    std::cout << "  servers: " << a.info.server_commands.dump() << " -> "
              << b.info.server_commands.dump() << "\n";
  }

  if (c.gates.empty()) {
    std::cout << "\ngates: none recorded in either run\n";
  } else {
    std::cout << "\ngates:\n";
    TextTable table(
        {"GATE", "A", "B", "A OBSERVED", "B OBSERVED", "DELTA", "A INTERVAL", "B INTERVAL"});
    for (const history::GateComparison& g : c.gates) {
      table.Add({g.gate, g.a ? g.a->status : "-", g.b ? g.b->status : "-",
                 Num(g.a ? g.a->observed : std::nullopt), Num(g.b ? g.b->observed : std::nullopt),
                 Num(g.observed_delta, "%+.4g"), g.a ? Interval(*g.a) : "-",
                 g.b ? Interval(*g.b) : "-"});
    }
    table.Print(std::cout, "  ");
  }
  if (!c.ledgers.empty()) {
    std::cout << "\nledgers:\n";
    TextTable table({"LABEL", "NAME", "A", "B", "DELTA"});
    for (const history::LedgerComparison& l : c.ledgers) {
      table.Add({l.label, l.name, Num(l.a, "%.6g"), Num(l.b, "%.6g"), Num(l.delta, "%+.6g")});
    }
    table.Print(std::cout, "  ");
  }
}

void AddHistoryCommand(CLI::App& app, CommandContext& context) {
  auto* history_cmd =
      app.add_subcommand("history", "List, show, export, compare and regate recorded runs (SQLite)");
  history_cmd->require_subcommand(1);
  auto options = std::make_shared<HistoryOptions>();
  auto add_common = [options](CLI::App* cmd) {
    cmd->add_option("--db", options->db, "History file")->capture_default_str();
    cmd->add_flag("--json", options->json, "Print JSON");
  };

  auto* list = history_cmd->add_subcommand("list", "List recorded runs, newest first");
  add_common(list);
  list->add_option("--limit", options->limit, "Most runs to list")->capture_default_str();
  list->callback([options, &context] {
    List(*options);
    context.exit_code = 0;
  });

  auto* show = history_cmd->add_subcommand(
      "show", "Show a run's metadata, gate results and load-run summaries");
  add_common(show);
  show->add_option("RUN", options->run_a, "Run id or 'latest'")->required();
  show->callback([options, &context] {
    Show(*options);
    context.exit_code = 0;
  });

  auto* export_cmd = history_cmd->add_subcommand(
      "export", "Print a run: everything as JSON (raw samples included), or one table as CSV");
  add_common(export_cmd);
  export_cmd->add_option("RUN", options->run_a, "Run id or 'latest'")->required();
  export_cmd->add_option("--format", options->format, "json (everything) or csv (one table)")
      ->check(CLI::IsMember({"json", "csv"}))
      ->capture_default_str();
  export_cmd
      ->add_option("--table", options->table,
                   "With --format csv: requests | load_runs | quality | gates")
      ->check(CLI::IsMember({"requests", "load_runs", "quality", "gates"}))
      ->capture_default_str();
  export_cmd->callback([options, &context] {
    Export(*options);
    context.exit_code = 0;
  });

  auto* compare = history_cmd->add_subcommand(
      "compare", "Compare two runs: gate metrics side by side, and what changed");
  add_common(compare);
  compare->add_option("A", options->run_a, "First run id or 'latest'")->required();
  compare->add_option("B", options->run_b, "Second run id or 'latest'")->required();
  compare->callback([options, &context] {
    Compare(*options);
    context.exit_code = 0;
  });

  auto* regate = history_cmd->add_subcommand(
      "regate", "Decide a run's gates again from its stored raw rows; exit 0/1/2 by that verdict");
  add_common(regate);
  regate->add_option("RUN", options->run_a, "Run id or 'latest'")->required();
  regate->callback([options, &context] { context.exit_code = Regate(*options); });

  auto* report = history_cmd->add_subcommand(
      "report", "Write a recorded run's report.json and report.html again (this kvgate's report)");
  add_common(report);
  report->add_option("RUN", options->run_a, "Run id or 'latest'")->required();
  report->add_option("--out", options->out_dir, "Folder to write them into (created)")->required();
  report->callback([options, &context] {
    HistoryDb db = OpenExisting(options->db);
    const int64_t id = ResolveRun(db, options->run_a);
    const auto [json_path, html_path] = suite::WriteReports(db, id, options->out_dir);
    std::cout << "run " << id << ": " << json_path.string() << ", " << html_path.string() << "\n";
    context.exit_code = 0;
  });
}

KVGATE_REGISTER_COMMAND(600, AddHistoryCommand);

}  // namespace
}  // namespace kvgate
