#include "kvgate/connection_options.h"

#include <sstream>

namespace kvgate {

void AddConnectionOptions(CLI::App* cmd, ConnectionArgs& args, bool with_endpoint) {
  if (with_endpoint) {
    cmd->add_option("--endpoint", args.endpoint,
                    "completions (POST /v1/completions) | chat (POST /v1/chat/completions)");
  }
  cmd->add_option("--api-key", args.api_key,
                  "Bearer key (default: $OPENAI_API_KEY; prefer the variable: a flag shows in ps)");
  cmd->add_option("--header", args.headers,
                  "Extra request header 'Name: value' (repeatable; only names are recorded)");
  cmd->add_option("--cacert", args.cacert,
                  "https: trust only the CAs in this PEM file (default: the system's CAs)");
  cmd->add_flag("--insecure", args.insecure,
                "https: do not verify the server's certificate (every report says so)");
}

http::ClientConfig ClientConfigFrom(const ConnectionArgs& args) {
  http::ClientConfig config;
  config.api_key = http::ResolveApiKey(args.api_key);
  config.ca_file = args.cacert;
  config.insecure = args.insecure;
  if (args.insecure && !args.cacert.empty()) {
    throw UsageError("--insecure: cannot be combined with --cacert (which trust do you mean?)");
  }
  try {
    for (const std::string& text : args.headers) config.headers.push_back(http::ParseHeader(text));
  } catch (const http::ConfigError& e) {
    throw UsageError("--header " + std::string(e.what()));
  }
  return config;
}

http::Endpoint EndpointFrom(const ConnectionArgs& args) {
  try {
    return http::ParseEndpoint(args.endpoint);
  } catch (const http::ConfigError& e) {
    throw UsageError("--endpoint " + std::string(e.what()));
  }
}

std::string GivenOptions(CLI::App* cmd, const std::string& prefix) {
  std::string given = cmd->config_to_str(/*default_also=*/false, /*write_description=*/false);
  std::istringstream lines(given);
  std::string line, notes = prefix;
  while (std::getline(lines, line)) {
    if (line.rfind("api-key", 0) == 0) continue;
    if (line.rfind("header", 0) == 0) {
      // header=["X-A: 1","X-B: 2"] or header="X-A: 1": keep the names only.
      std::string names;
      size_t at = 0;
      while ((at = line.find('"', at)) != std::string::npos) {
        const size_t colon = line.find(':', at);
        const size_t close = line.find('"', at + 1);
        if (close == std::string::npos) break;
        if (colon != std::string::npos && colon < close) {
          names += (names.empty() ? "" : ",") + line.substr(at + 1, colon - at - 1);
        }
        at = close + 1;
      }
      notes += " --header-names=" + names;
      continue;
    }
    notes += " --" + line;
  }
  return notes;
}

}  // namespace kvgate
