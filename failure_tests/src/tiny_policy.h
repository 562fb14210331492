// The smallest `kvgate run` policy that still exercises every phase (servers, passkey, QA, load
// pairs, gates): two local servers on the built-in model (FP8 baseline, ReadKV candidate), one
// passkey and one QA item per system, short load runs. The crash scenarios start `kvgate run`
// with it and break it part-way; it finishes in well under a minute on two CPU cores.
#pragma once

#include <string>
#include <vector>

#include "kvgate/failure_tests/scenario.h"

namespace kvgate::failure_tests {

struct TinyPolicy {
  std::string name = "failure-scenario";
  int pairs = 1;
  int requests = 6;  // per load run, no warm-up
  double rate_rps = 1.5;
  int output_tokens = 16;
};

// The policy's TOML text. The servers run `--model <context.model_dir> --threads
// <context.threads>`.
std::string TinyPolicyToml(const ScenarioContext& context, const TinyPolicy& policy);

// `kvgate serve` with the context's model and threads, then `backend` (e.g. {"--kv", "fp8"}).
std::vector<std::string> ServeCommand(const ScenarioContext& context,
                                      const std::vector<std::string>& backend);

}  // namespace kvgate::failure_tests
