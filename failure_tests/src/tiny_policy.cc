#include "tiny_policy.h"

namespace kvgate::failure_tests {

std::string TinyPolicyToml(const ScenarioContext& context, const TinyPolicy& policy) {
  const std::string common = "\"--model\", \"" + context.model_dir + "\", \"--threads\", \"" +
                             std::to_string(context.threads) + "\"";
  return "name = \"" + policy.name + "\"\nseed = 11\n\n" +
         "[baseline]\nkind = \"local\"\nargs = [\"--kv\", \"fp8\", " + common + "]\n\n" +
         "[candidate]\nkind = \"local\"\nargs = [\"--kv\", \"readkv\", \"--store-bits\", \"8\", "
         "\"--read-bits\", \"4\", " +
         common + "]\n\n" +
         "[slo]\nttft_ms = 5000\ntpot_ms = 500\n\n"
         "[quality.passkey]\nitems = 1\nlengths = [512]\ndepths = [0.5]\nmax_tokens = 8\n\n"
         "[quality.qa]\nitems = 1\nlengths = [512]\nmax_tokens = 8\n\n" +
         "[load]\npairs = " + std::to_string(policy.pairs) +
         "\nrate_rps = " + std::to_string(policy.rate_rps) +
         "\nrequests = " + std::to_string(policy.requests) +
         "\nwarmup = 0\nprompt_words = 24\noutput_tokens = " +
         std::to_string(policy.output_tokens) +
         "\nmax_duration_s = 60\nrequest_timeout_s = 30\n\n" +
         "[gates]\npasskey_required = 1\nbootstrap_resamples = 200\n";
}

std::vector<std::string> ServeCommand(const ScenarioContext& context,
                                      const std::vector<std::string>& backend) {
  std::vector<std::string> argv = {
      context.kvgate_binary, "serve",     "--model",
      context.model_dir,     "--threads", std::to_string(context.threads)};
  argv.insert(argv.end(), backend.begin(), backend.end());
  return argv;
}

}  // namespace kvgate::failure_tests
