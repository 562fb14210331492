#include "file_workloads.h"

#include "kvgate/loadgen/datasets.h"
#include "token_sizer.h"

namespace kvgate::loadgen::internal {

BuiltWorkload BuildShareGpt(const LoadSettings& settings, int64_t count, const http::Url& url,
                            const Target& target, const std::string& model) {
  const std::string& path = settings.workload.dataset;
  int64_t skipped = 0;
  const std::vector<ShareGptPair> pairs = ReadShareGpt(path, &skipped);
  TokenSizer sizer(url, target, model);
  const bool server_counts = sizer.Available();
  auto prompt_tokens = [&](const std::string& text) {
    return server_counts ? sizer.Count(text) : ApproximateTokens(text);
  };
  auto reply_tokens = [&](const std::string& text) {
    return server_counts ? sizer.CountText(text) : ApproximateTokens(text);
  };
  ShareGptSelection selection =
      SelectShareGpt(pairs, count, settings.seed, prompt_tokens, reply_tokens);
  const int64_t chosen = static_cast<int64_t>(selection.requests.size());
  BuiltWorkload built{Workload::FromEntries(settings.workload, settings.seed,
                                            std::move(selection.requests)),
                      "", server_counts};
  built.input_lengths =
      (server_counts ? "tokens (server /tokenize, " + std::to_string(sizer.calls()) + " calls)"
                     : std::string("tokens approximated as bytes / 4 (the server has no POST "
                                   "/tokenize)")) +
      ": " + std::to_string(chosen) + " ShareGPT pairs; " + std::to_string(selection.pruned) +
      " of " + std::to_string(selection.examined) + " examined pruned by vLLM's limits; " +
      std::to_string(skipped) + " conversations without a human->gpt pair";
  if (chosen < count) {
    built.input_lengths += "; " + std::to_string(chosen) + " pairs reused for " +
                           std::to_string(count) + " requests";
  }
  return built;
}

}  // namespace kvgate::loadgen::internal
