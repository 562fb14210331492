// The flags every command that talks to a server shares (`kvgate load`, `kvgate check passkey|qa|
// ledgers`): which endpoint, TLS trust, the bearer key and extra headers, turned into
// kvgate::http settings. The key comes from --api-key or else $OPENAI_API_KEY and is never
// printed or stored; --header values are sent but only their names are recorded.
#pragma once

#include <string>
#include <vector>

#include "kvgate/command.h"
#include "kvgate/http/client_config.h"
#include "kvgate/http/endpoint.h"

namespace kvgate {

struct ConnectionArgs {
  std::string endpoint = "completions";
  std::string api_key;
  std::vector<std::string> headers;
  std::string cacert;
  bool insecure = false;
};

// Adds --endpoint (when with_endpoint), --api-key, --header, --cacert, --insecure.
void AddConnectionOptions(CLI::App* cmd, ConnectionArgs& args, bool with_endpoint = true);

// Throws UsageError naming the flag (bad --header, --endpoint, --cacert with --insecure).
http::ClientConfig ClientConfigFrom(const ConnectionArgs& args);
http::Endpoint EndpointFrom(const ConnectionArgs& args);

// The command line as given (CLI11's name=value lines), for the history's notes: no --api-key,
// and --header values replaced by their names.
std::string GivenOptions(CLI::App* cmd, const std::string& prefix);

}  // namespace kvgate
