// Internal: what the client needs to know about a target before a run — the parsed base URL, its
// resolved endpoints, and the bytes of a completions request.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <string>

#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/schedule.h"
#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen::internal {

struct ParsedUrl {
  std::string host;         // as written, without brackets for IPv6
  std::string port;         // "80" when absent
  std::string host_header;  // value of the Host header
  std::string prefix;       // path before /v1, without trailing slash ("" for the root)
};

// Accepts http://host[:port][/prefix][/v1][/]; throws TargetError for anything else.
ParsedUrl ParseUrl(const std::string& url);

// Resolves host:port; throws TargetError.
boost::asio::ip::tcp::resolver::results_type Resolve(const ParsedUrl& url);

// The JSON body of a completions request (OpenAI API with vLLM's ignore_eos extension).
std::string RenderBody(const std::string& model, const RequestSpec& spec,
                       const LoadSettings& settings);

// Every request header line that is the same for the whole run, ending just before the
// per-request X-Request-Id and Content-Length lines.
std::string RenderHeaderPrefix(const ParsedUrl& url, const Target& target, bool stream);

// The header block of request `index` with a body of `body_size` bytes.
std::string RenderHeader(const std::string& prefix, int64_t index, size_t body_size);

}  // namespace kvgate::loadgen::internal
