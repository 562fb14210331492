#include "kvgate/checks/check_runner.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "kvgate/checks/errors.h"
#include "kvgate/checks/f1.h"

namespace kvgate::checks {
namespace {

QualityRecord BaseRecord(const std::string& check, const std::string& id,
                         const std::vector<std::string>& subsets, size_t prompt_bytes,
                         const CompletionOutcome& outcome) {
  QualityRecord record;
  record.check = check;
  record.item_id = id;
  record.subsets = subsets;
  record.prompt_bytes = static_cast<int64_t>(prompt_bytes);
  record.prompt_tokens = outcome.prompt_tokens;
  record.latency_s = outcome.latency_s;
  record.error = outcome.error;
  return record;
}

template <typename Item, typename Score>
CheckRun Run(const std::string& check, const std::string& url, const std::vector<Item>& items,
             const std::vector<CompletionRequest>& requests, const ClientOptions& options,
             const CheckProgress& progress, const RecordSink& sink, Score score) {
  const auto start = std::chrono::steady_clock::now();
  ClientOptions with_system = options;
  if (options.endpoint == http::Endpoint::kChat && options.system_prompt.empty()) {
    with_system.system_prompt = check == "passkey" ? kPasskeySystemPrompt : kQaSystemPrompt;
  }
  CompletionClient client(url, with_system);
  client.Probe();
  std::function<void(size_t, const CompletionOutcome&)> on_outcome;
  if (sink) {
    on_outcome = [&](size_t i, const CompletionOutcome& outcome) { sink(score(items[i], outcome)); };
  }
  std::vector<CompletionOutcome> outcomes = client.CompleteAll(requests, progress, on_outcome);
  CheckRun run;
  run.check = check;
  run.url = client.url().text;
  run.model = client.model();
  run.endpoint = std::string(http::EndpointName(options.endpoint));
  run.connection = client.connection();
  run.records.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) run.records.push_back(score(items[i], outcomes[i]));
  run.summary = SummarizeBySubset(run.records);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace

QualityRecord ScorePasskeyItem(const PasskeyItem& item, const CompletionOutcome& outcome) {
  QualityRecord record = BaseRecord("passkey", item.id, item.subsets, item.prompt.size(), outcome);
  record.gold = {item.key};
  if (!outcome.ok()) return record;
  record.prediction = outcome.text;
  record.correct = PasskeyCorrect(outcome.text, item.key);
  record.score = record.correct ? 100.0 : 0.0;
  return record;
}

QualityRecord ScoreQaItem(const QaItem& item, const CompletionOutcome& outcome) {
  QualityRecord record = BaseRecord("qa", item.id, item.subsets, QaPrompt(item).size(), outcome);
  record.gold = item.answers;
  if (!outcome.ok()) return record;
  record.prediction = QaPrediction(outcome.text);
  record.score = 100.0 * MaxTokenF1(record.prediction, item.answers);
  record.correct = ExactMatch(record.prediction, item.answers);
  return record;
}

CheckRun RunPasskeyCheck(const std::string& url, const PasskeySettings& settings,
                         const ClientOptions& options, const CheckProgress& progress,
                         const RecordSink& sink) {
  return RunPasskeyItems(url, GeneratePasskeyItems(settings), settings.max_tokens, options,
                         progress, sink);
}

CheckRun RunPasskeyItems(const std::string& url, const std::vector<PasskeyItem>& items,
                         int max_tokens, const ClientOptions& options,
                         const CheckProgress& progress, const RecordSink& sink) {
  if (items.empty()) throw InvalidSetting("items", "the passkey set is empty");
  if (max_tokens < 1) {
    throw InvalidSetting("max_tokens", "must be ≥ 1, got " + std::to_string(max_tokens));
  }
  std::vector<CompletionRequest> requests;
  requests.reserve(items.size());
  for (const PasskeyItem& item : items) {
    requests.push_back(CompletionRequest{item.prompt, max_tokens, {}});
  }
  return Run("passkey", url, items, requests, options, progress, sink, ScorePasskeyItem);
}

CheckRun RunQaCheck(const std::string& url, const std::vector<QaItem>& items, int max_tokens,
                    const ClientOptions& options, const CheckProgress& progress,
                    const RecordSink& sink) {
  if (items.empty()) throw InvalidSetting("items", "the QA set is empty");
  if (max_tokens < 1) {
    throw InvalidSetting("max_tokens", "must be ≥ 1, got " + std::to_string(max_tokens));
  }
  std::vector<CompletionRequest> requests;
  requests.reserve(items.size());
  // The answer ends at the line break (the model's training text ends it with EOS; a general
  // model may run on): asking the server to stop there saves decode time.
  for (const QaItem& item : items) {
    requests.push_back(CompletionRequest{QaPrompt(item), max_tokens, {"\n"}});
  }
  return Run("qa", url, items, requests, options, progress, sink, ScoreQaItem);
}

void to_json(nlohmann::json& j, const CheckRun& run) {
  j = nlohmann::json{{"check", run.check},
                     {"url", run.url},
                     {"model", run.model},
                     {"endpoint", run.endpoint},
                     {"connection", run.connection},
                     {"tls_verification_off",
                      run.connection.find("verification OFF") != std::string::npos},
                     {"seconds", run.seconds},
                     {"summary", run.summary},
                     {"items", run.records}};
}

}  // namespace kvgate::checks
