// `kvgate check passkey|qa|f1|ledgers`: the quality checks of kvgate::checks against one
// OpenAI-compatible server, by hand. Exit 0 when the check ran (whatever the score), 2 on bad
// arguments, 3 when the server cannot be reached at all or a dataset cannot be read.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvgate/checks/check_runner.h"
#include "kvgate/checks/errors.h"
#include "kvgate/checks/f1.h"
#include "kvgate/checks/ledgers.h"
#include "kvgate/command.h"
#include "kvgate/connection_options.h"
#include "kvgate/policy/policy.h"

namespace kvgate {
namespace {

struct ServerArgs {
  std::string url;
  int concurrency = 4;
  double timeout_s = 600.0;
  std::string model;
  std::string json_file;
  ConnectionArgs connection;
};

void AddServerOptions(CLI::App* cmd, ServerArgs& args) {
  cmd->add_option("--url", args.url, "Server base URL, e.g. http://127.0.0.1:8000")->required();
  cmd->add_option("--concurrency", args.concurrency, "Requests in flight at once (default 4)");
  cmd->add_option("--timeout", args.timeout_s, "Seconds allowed per request (default 600)");
  cmd->add_option("--model", args.model,
                  "The request's \"model\" (default: the first id of GET /v1/models)");
  cmd->add_option("--json", args.json_file,
                  "Also write the full result as JSON to FILE (- = stdout)");
  AddConnectionOptions(cmd, args.connection);
}

checks::ClientOptions ClientOptionsFrom(const ServerArgs& args) {
  if (!(args.timeout_s > 0.0)) throw UsageError("--timeout: must be > 0 seconds");
  checks::ClientOptions options;
  options.concurrency = args.concurrency;
  options.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  options.model = args.model;
  options.client = ClientConfigFrom(args.connection);
  options.endpoint = EndpointFrom(args.connection);
  return options;
}

void WriteJson(const std::string& file, const nlohmann::json& j) {
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (file.empty()) return;
  if (file == "-") {
    std::cout << text;
    return;
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write --json file '" + file + "'");
}

// A one-line progress counter on a terminal; silent when stderr is not one.
checks::CheckProgress TerminalProgress(const std::string& label) {
  if (::isatty(2) == 0) return {};
  return [label](size_t done, size_t total) {
    std::fprintf(stderr, "\r%s %zu/%zu", label.c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\n");
  };
}

void PrintRun(const checks::CheckRun& run, std::ostream& out) {
  const checks::SubsetSummary& all = run.all();
  char line[256];
  out << run.check << " on " << run.url << (run.model.empty() ? "" : " (model " + run.model + ")")
      << " via " << run.endpoint << ", " << run.connection << "\n";
  if (run.connection.find("verification OFF") != std::string::npos) {
    out << "WARNING: TLS certificate verification was OFF (--insecure)\n";
  }
  std::snprintf(line, sizeof line, "  %lld/%lld correct, mean score %.2f, %lld errors, %.1f s\n",
                static_cast<long long>(all.correct), static_cast<long long>(all.count),
                all.mean_score, static_cast<long long>(all.errors), run.seconds);
  out << line;
  std::snprintf(line, sizeof line, "  %-24s %7s %8s %7s %11s\n", "subset", "items", "correct",
                "errors", "mean score");
  out << line;
  for (const checks::SubsetSummary& s : run.summary) {
    std::snprintf(line, sizeof line, "  %-24s %7lld %8lld %7lld %11.2f\n", s.subset.c_str(),
                  static_cast<long long>(s.count), static_cast<long long>(s.correct),
                  static_cast<long long>(s.errors), s.mean_score);
    out << line;
  }
  int shown = 0;
  for (const checks::QualityRecord& r : run.records) {
    if (r.ok()) continue;
    if (shown++ == 3) {
      out << "  (more errors in the records)\n";
      break;
    }
    out << "  error on " << r.item_id << ": " << r.error << "\n";
  }
}

// Settings errors are the user's arguments: exit 2 with the field named.
template <typename Fn>
auto AsUsage(Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const checks::InvalidSetting& e) {
    throw UsageError(e.what());
  }
}

void AddPasskey(CLI::App* check, CommandContext& context) {
  auto* cmd = check->add_subcommand(
      "passkey", "Passkey retrieval (Landmark/LongLoRA template) on a seeded length x depth grid");
  auto args = std::make_shared<ServerArgs>();
  auto settings = std::make_shared<checks::PasskeySettings>();
  auto dataset = std::make_shared<std::string>();
  AddServerOptions(cmd, *args);
  cmd->add_option("--dataset", *dataset,
                  "JSONL file of {id, prompt, key, subset?}, prompts sent as given "
                  "(default: the generated grid)");
  cmd->add_option("--items", settings->items, "Number of items (default 200)");
  cmd->add_option("--lengths", settings->lengths,
                  "Prompt lengths in bytes, comma-separated (default 1024,2048,4096,8192)")
      ->delimiter(',');
  cmd->add_option("--depths", settings->depths,
                  "Needle depths in [0,1], comma-separated (default 0,0.1,...,1)")
      ->delimiter(',');
  cmd->add_option("--seed", settings->seed, "Seed of the keys (default 0)");
  cmd->add_option("--key-digits", settings->key_digits, "Digits per key (default 5)");
  cmd->add_option("--max-tokens", settings->max_tokens, "Completion tokens per item (default 10)");
  cmd->callback([args, settings, dataset, &context] {
    checks::ClientOptions options = ClientOptionsFrom(*args);
    checks::CheckRun run = AsUsage([&] {
      if (dataset->empty()) {
        return checks::RunPasskeyCheck(args->url, *settings, options, TerminalProgress("passkey"));
      }
      // DatasetError → exit 3 with FILE:LINE, as for QA's --dataset.
      return checks::RunPasskeyItems(args->url, checks::LoadPasskeyJsonl(*dataset),
                                     settings->max_tokens, options, TerminalProgress("passkey"));
    });
    PrintRun(run, args->json_file == "-" ? std::cerr : std::cout);
    nlohmann::json j = run;
    if (dataset->empty()) {
      j["settings"] = {{"items", settings->items},           {"lengths", settings->lengths},
                       {"depths", settings->depths},         {"seed", settings->seed},
                       {"key_digits", settings->key_digits}, {"max_tokens", settings->max_tokens}};
    } else {
      j["settings"] = {{"dataset", *dataset}, {"max_tokens", settings->max_tokens}};
    }
    WriteJson(args->json_file, j);
    context.exit_code = 0;
  });
}

void AddQa(CLI::App* check, CommandContext& context) {
  auto* cmd = check->add_subcommand(
      "qa", "QA token F1 (SQuAD) on the generated long-context set or a JSONL dataset");
  auto args = std::make_shared<ServerArgs>();
  auto settings = std::make_shared<checks::QaSetSettings>();
  auto dataset = std::make_shared<std::string>();
  AddServerOptions(cmd, *args);
  cmd->add_option("--dataset", *dataset,
                  "JSONL file of {id, context, question, answers, subset?} (default: generated)");
  cmd->add_option("--items", settings->items, "Generated items (default 120)");
  cmd->add_option("--lengths", settings->lengths,
                  "Generated prompt lengths in bytes, comma-separated (default 1024,2048,4096)")
      ->delimiter(',');
  cmd->add_option("--depth-buckets", settings->depth_buckets,
                  "Answer-depth subsets of the generated set (default 3)");
  cmd->add_option("--seed", settings->seed, "Seed of the generated set (default 0)");
  cmd->add_option("--max-tokens", settings->max_tokens, "Completion tokens per item (default 24)");
  cmd->callback([args, settings, dataset, &context] {
    checks::ClientOptions options = ClientOptionsFrom(*args);
    std::vector<checks::QaItem> items;
    if (dataset->empty()) {
      items = AsUsage([&] { return checks::GenerateQaSet(*settings); });
    } else {
      items = checks::LoadQaJsonl(*dataset);  // DatasetError → exit 3 with FILE:LINE
    }
    checks::CheckRun run = AsUsage([&] {
      return checks::RunQaCheck(args->url, items, settings->max_tokens, options,
                                TerminalProgress("qa"));
    });
    PrintRun(run, args->json_file == "-" ? std::cerr : std::cout);
    nlohmann::json j = run;
    if (dataset->empty()) {
      j["settings"] = {{"items", settings->items},
                       {"lengths", settings->lengths},
                       {"depth_buckets", settings->depth_buckets},
                       {"seed", settings->seed},
                       {"max_tokens", settings->max_tokens}};
    } else {
      j["settings"] = {{"dataset", *dataset}, {"max_tokens", settings->max_tokens}};
    }
    WriteJson(args->json_file, j);
    context.exit_code = 0;
  });
}

void AddF1(CLI::App* check, CommandContext& context) {
  auto* cmd = check->add_subcommand(
      "f1", "SQuAD token F1 (x100) of a prediction against gold answers (max over answers)");
  auto prediction = std::make_shared<std::string>();
  auto answers = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--prediction", *prediction, "The predicted answer")->required();
  cmd->add_option("--answer", *answers, "A gold answer (repeat for several)")->required();
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([prediction, answers, json, &context] {
    const double f1 = 100.0 * checks::MaxTokenF1(*prediction, *answers);
    const bool exact = checks::ExactMatch(*prediction, *answers);
    if (*json) {
      nlohmann::json normal_answers = nlohmann::json::array();
      for (const std::string& a : *answers) normal_answers.push_back(checks::NormalizeAnswer(a));
      nlohmann::json j = {{"f1", f1},
                          {"exact_match", exact},
                          {"prediction_normalized", checks::NormalizeAnswer(*prediction)},
                          {"answers_normalized", normal_answers}};
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      char line[64];
      std::snprintf(line, sizeof line, "%.2f", f1);
      std::cout << line << "\n";
    }
    context.exit_code = 0;
  });
}

void AddLedgers(CLI::App* check, CommandContext& context) {
  auto* cmd = check->add_subcommand(
      "ledgers",
      "Read the resource ledgers (<prefix>*, vllm:*) from a server's /metrics (docs/contract.md)");
  auto url = std::make_shared<std::string>();
  // The policy's default, the reference server's prefix: one value for the CLI and `kvgate run`.
  auto prefix = std::make_shared<std::string>(policy::ServerSpec().ledger_prefix);
  auto json_file = std::make_shared<std::string>();
  auto connection = std::make_shared<ConnectionArgs>();
  cmd->add_option("--url", *url, "Server base URL, e.g. http://127.0.0.1:8000")->required();
  cmd->add_option("--ledger-prefix", *prefix,
                  "The server's ledger series are <prefix>capacity_bytes, ... (policy: "
                  "ledger_prefix)")
      ->capture_default_str();
  cmd->add_option("--json", *json_file, "Also write the ledgers as JSON to FILE (- = stdout)");
  AddConnectionOptions(cmd, *connection, /*with_endpoint=*/false);
  cmd->callback([url, prefix, json_file, connection, &context] {
    const http::ClientConfig config = ClientConfigFrom(*connection);
    checks::LedgerSnapshot s =
        AsUsage([&] { return checks::ScrapeLedgers(*url, *prefix, config); });
    std::ostream& out = *json_file == "-" ? std::cerr : std::cout;
    out << "ledgers from " << s.url << "\n";
    for (const auto& [series, value] : s.values) out << "  " << series << " " << value << "\n";
    for (const std::string& name : s.missing) out << "  (not exposed: " << name << ")\n";
    WriteJson(*json_file, {{"url", s.url}, {"values", s.values}, {"missing", s.missing}});
    context.exit_code = 0;
  });
}

void AddCheckCommand(CLI::App& app, CommandContext& context) {
  auto* check = app.add_subcommand(
      "check", "Quality checks against one OpenAI-compatible server (http or https)");
  check->require_subcommand(1);
  AddPasskey(check, context);
  AddQa(check, context);
  AddF1(check, context);
  AddLedgers(check, context);
}

KVGATE_REGISTER_COMMAND(300, AddCheckCommand);

}  // namespace
}  // namespace kvgate
