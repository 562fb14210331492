#include "file_workloads.h"

#include <algorithm>

#include "kvgate/loadgen/datasets.h"
#include "token_sizer.h"

namespace kvgate::loadgen::internal {

BuiltWorkload BuildShareGpt(const LoadSettings& settings, int64_t count, const http::Url& url,
                            const Target& target, const std::string& model) {
  const std::string& path = settings.workload.dataset;
  int64_t skipped = 0;
  std::string sha256;
  const std::vector<ShareGptPair> pairs = ReadShareGpt(path, &skipped, &sha256);
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
                      "", server_counts, std::move(sha256)};
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

BuiltTrace BuildTrace(const LoadSettings& settings) {
  const WorkloadSettings& w = settings.workload;
  std::string sha256;
  std::vector<TraceEntry> trace = ReadTrace(w.trace, w.trace_block_tokens, &sha256);
  std::vector<int64_t> arrivals = TraceArrivals(trace, w.time_scale);
  size_t keep = arrivals.size();
  if (settings.requests > 0) keep = std::min(keep, static_cast<size_t>(settings.requests));
  if (settings.duration_s > 0) {
    const auto within = static_cast<int64_t>(settings.duration_s * 1e9);
    keep = std::min(keep, static_cast<size_t>(std::lower_bound(arrivals.begin(), arrivals.end(),
                                                               within) -
                                              arrivals.begin()));
  }
  if (keep == 0) throw SettingsError("duration", "the trace sends nothing within the duration");
  arrivals.resize(keep);
  std::vector<Workload::FileEntry> entries(keep);
  for (size_t i = 0; i < keep; ++i) {
    entries[i].prompt = TracePrompt(trace[i], w.trace_block_tokens, settings.seed);
    entries[i].max_tokens = trace[i].output_length;
  }
  BuiltTrace out{
      {Workload::FromEntries(w, settings.seed, std::move(entries)), "", false, std::move(sha256)},
      std::move(arrivals)};
  out.built.input_lengths = "words standing for tokens (trace blocks of " +
                            std::to_string(w.trace_block_tokens) +
                            " vocabulary words, about one token each): " + std::to_string(keep) +
                            " of " + std::to_string(trace.size()) + " trace requests";
  return out;
}

}  // namespace kvgate::loadgen::internal
