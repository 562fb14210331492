// Internal: workloads whose requests depend on the server's tokenizer, built before the run:
// Mooncake traces replayed at their timestamps; ShareGPT pairs measured in the server's tokens (or approximated) and pruned as vLLM does.
// Runs before the schedule starts (never inside the event loop). Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvgate/http/client_config.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/schedule.h"

namespace kvgate::loadgen::internal {

struct BuiltWorkload {
  Workload workload;
  std::string input_lengths;  // what the lengths count, for LoadResult::input_lengths
  bool input_tokens_exact = false;
  std::string sha256;  // of the file's bytes that were parsed
};

// The ShareGPT workload of `settings` with `count` distinct requests (request i uses i % count).
BuiltWorkload BuildShareGpt(const LoadSettings& settings, int64_t count, const http::Url& url,
                            const Target& target, const std::string& model);

// The trace workload of `settings` and its send times, cut to settings.requests (> 0) and to
// send times before settings.duration_s (> 0).
struct BuiltTrace {
  BuiltWorkload built;
  std::vector<int64_t> arrivals;
};
BuiltTrace BuildTrace(const LoadSettings& settings);

}  // namespace kvgate::loadgen::internal
