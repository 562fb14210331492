// Runs a quality check against one server over HTTP: generate or take the items, send them
// (a few at a time), score every answer into a QualityRecord, summarise per subset.
//
// Entry points throw only when the check cannot run at all: InvalidSetting (bad settings or URL)
// or ServerUnreachable (the probe got no HTTP answer). Per-item failures (HTTP errors, timeouts,
// malformed answers) become records with `error` set and score 0. Blocking; thread-safe (no
// shared state).
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kvgate/checks/completion_client.h"
#include "kvgate/checks/passkey.h"
#include "kvgate/checks/qa_set.h"
#include "kvgate/checks/quality_record.h"

namespace kvgate::checks {

struct CheckRun {
  std::string check;                   // "passkey" | "qa"
  std::string url;                     // the server, normalised
  std::string model;                   // the "model" sent; "" when none
  std::string endpoint = "completions";  // "completions" | "chat"
  std::string connection;  // http::Describe: TLS verification, "bearer key set"; never a secret
  std::vector<QualityRecord> records;  // in item order
  std::vector<SubsetSummary> summary;  // SummarizeBySubset(records): "all" first
  double seconds = 0.0;                // wall time of the whole check

  const SubsetSummary& all() const { return summary.front(); }
};

// The system messages the checks send through the chat endpoint when ClientOptions::system_prompt
// is empty (the user message is the same prompt the completions endpoint gets).
inline constexpr const char kPasskeySystemPrompt[] =
    "You are a careful assistant. Answer with the pass key only.";
inline constexpr const char kQaSystemPrompt[] =
    "You are a careful assistant. Answer the question with a few words from the text.";

using CheckProgress = std::function<void(size_t done, size_t total)>;
// Each item's record as soon as its answer is scored, from the check's worker threads, one call
// at a time, in completion order; only items that were sent (a stop leaves the rest unsent, and
// they reach CheckRun::records only, with an error saying so). The same records CheckRun holds.
using RecordSink = std::function<void(const QualityRecord& record)>;

CheckRun RunPasskeyCheck(const std::string& url, const PasskeySettings& settings,
                         const ClientOptions& options, const CheckProgress& progress = {},
                         const RecordSink& sink = {});
// Given items (a user's set, LoadPasskeyJsonl), each prompt sent as it is, `max_tokens` each.
CheckRun RunPasskeyItems(const std::string& url, const std::vector<PasskeyItem>& items,
                         int max_tokens, const ClientOptions& options,
                         const CheckProgress& progress = {}, const RecordSink& sink = {});

// `max_tokens` is the completion budget per item (QaSetSettings::max_tokens for generated sets).
CheckRun RunQaCheck(const std::string& url, const std::vector<QaItem>& items, int max_tokens,
                    const ClientOptions& options, const CheckProgress& progress = {},
                    const RecordSink& sink = {});

// Scoring of one answer (exposed so the rules are testable without a server).
QualityRecord ScorePasskeyItem(const PasskeyItem& item, const CompletionOutcome& outcome);
QualityRecord ScoreQaItem(const QaItem& item, const CompletionOutcome& outcome);

// {"check", "url", "model", "seconds", "summary": [...], "items": [QualityRecord...]}.
void to_json(nlohmann::json& j, const CheckRun& run);

}  // namespace kvgate::checks
