// `kvgate run [--policy FILE] [--db FILE] [--out DIR] [--resume RUN]`: the go/no-go suite
// (gates/suite).
// Exit status: 0 GO, 1 NO-GO, 2 INCONCLUSIVE, 3 the suite could not run.
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>

#include "kvgate/command.h"
#include "kvgate/serve_binary.h"
#include "kvgate/default_policy.h"
#include "kvgate/policy/policy.h"
#include "kvgate/secrets/redact.h"
#include "kvgate/suite/run_suite.h"
#include "kvgate/version.h"

namespace kvgate {
namespace {

struct RunFlags {
  std::string policy;
  std::string db = "kvgate.db";
  std::string out = "kvgate-out";
  bool json = false;
  bool quiet = false;
  int metrics_port = -1;    // < 0: no live metrics
  std::string pushgateway;  // empty: no push
  int64_t resume = 0;       // > 0: resume this interrupted run
};

int Run(const RunFlags& flags) {
  policy::Policy policy;
  try {
    policy = flags.policy.empty() ? policy::ParsePolicy(kDefaultPolicyToml, "<built-in default.toml>")
                                  : policy::LoadPolicyFile(flags.policy);
    policy::RefuseRetiredKeys(policy);
  } catch (const policy::PolicyError& e) {
    std::cerr << "error: bad policy: " << secrets::RedactText(e.what()) << "\n";
    return 3;
  }
  suite::SuiteOptions options;
  options.db_path = flags.db;
  options.out_dir = flags.out;
  options.kvgate_binary = SelfPath();
  options.version = kVersion;
  options.git_commit = kGitCommit;
  if (flags.resume > 0) options.resume_run_id = flags.resume;
  auto start = std::chrono::steady_clock::now();
  if (!flags.quiet) {
    options.progress = [start](const std::string& line) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "[kvgate %7.1fs] %s\n", s, line.c_str());
    };
  }
  suite::RunMetrics run_metrics;
  if (flags.metrics_port >= 0) {
    const int port = run_metrics.Serve(flags.metrics_port);
    std::fprintf(stderr, "[kvgate] live metrics on http://127.0.0.1:%d/metrics\n", port);
  }
  options.metrics = &run_metrics;
  suite::SuiteOutcome outcome;
  try {
    outcome = suite::RunSuite(policy, options);
  } catch (const std::exception& e) {
    std::cerr << "error: the suite could not run: " << secrets::RedactText(e.what()) << "\n";
    return 3;
  }
  if (!flags.pushgateway.empty()) {
    // The verdict stands whatever the gateway says; a failed push is reported, not fatal.
    try {
      run_metrics.PushToGateway(flags.pushgateway, "kvgate_run");
    } catch (const std::exception& e) {
      std::cerr << "warning: could not push to " << secrets::RedactUrl(flags.pushgateway) << ": "
                << secrets::RedactText(e.what()) << "\n";
    }
  }
  if (outcome.run_id == 0) {  // refused before it began: nothing was stored or written
    if (flags.json) {
      std::cout << nlohmann::json{{"run_id", nullptr}, {"exit_code", outcome.exit_code},
                                  {"error", outcome.error}}.dump(2)
                << "\n";
    } else {
      std::cerr << "error: the suite could not run: " << outcome.error << "\n";
    }
    return outcome.exit_code;
  }
  if (flags.json) {
    nlohmann::json out = {{"run_id", outcome.run_id},
                          {"verdict", gates::ToString(outcome.verdict)},
                          {"exit_code", outcome.exit_code},
                          {"error", outcome.error},
                          {"report_json", outcome.report_json.string()},
                          {"report_html", outcome.report_html.string()},
                          {"gates", nlohmann::json::array()}};
    for (const auto& g : outcome.gates) out["gates"].push_back(gates::ToJson(g));
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("\n%-10s %-13s %10s %10s  %s\n", "gate", "status", "observed", "threshold", "reason");
    for (const auto& g : outcome.gates) {
      std::printf("%-10s %-13s %10.3f %10.3f  %s\n", g.gate.c_str(), gates::ToString(g.status),
                  g.observed, g.threshold, g.reason.c_str());
    }
    if (outcome.exit_code == 3) {
      std::printf("\nrun %lld could not complete: %s\n", static_cast<long long>(outcome.run_id),
                  outcome.error.c_str());
    }
    std::printf("\nreport: %s\nVerdict: %s (run %lld, exit %d)\n", outcome.report_html.c_str(),
                outcome.exit_code == 3 ? "NONE" : gates::ToString(outcome.verdict),
                static_cast<long long>(outcome.run_id), outcome.exit_code);
  }
  return outcome.exit_code;
}

void AddRunCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<RunFlags>();
  auto* cmd = app.add_subcommand(
      "run", "Run the go/no-go suite: quality, interleaved load pairs, gates, history, report");
  cmd->add_option("--policy", flags->policy,
                  "Policy TOML (default: the built-in policies/default.toml)");
  cmd->add_option("--db", flags->db, "Run history (SQLite)")->capture_default_str();
  cmd->add_option("--out", flags->out, "Folder for report.json, report.html and server logs")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print the outcome as JSON on stdout");
  cmd->add_flag("--quiet", flags->quiet, "No progress lines on stderr");
  cmd->add_option("--metrics-port", flags->metrics_port,
                  "Serve live progress on http://127.0.0.1:PORT/metrics (0 = any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--pushgateway", flags->pushgateway,
                  "After the run, push its gate results to this Pushgateway URL (job kvgate_run)");
  cmd->add_option("--resume", flags->resume,
                  "Resume this interrupted run (its id in --db) as its next leg, under the policy "
                  "it began with: what it stored is kept, only the rest is measured")
      ->check(CLI::PositiveNumber);
  cmd->callback([flags, &context] { context.exit_code = Run(*flags); });
}

KVGATE_REGISTER_COMMAND(50, AddRunCommand);

}  // namespace
}  // namespace kvgate
