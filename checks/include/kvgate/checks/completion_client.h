// The checks' HTTP client for OpenAI-compatible servers (our `kvgate serve`, vLLM, ...):
// non-streaming POST /v1/completions or /v1/chat/completions with greedy decoding (temperature
// 0), a few requests in parallel over kept-alive HTTP/1.1 connections, a connect and a
// per-request timeout. Connections, TLS (verified by default), the bearer key and extra headers
// are kvgate::http's (kvgate/http/client_config.h); the key is never written anywhere.
//
// Through chat, a request is [{"role": "system", "content": system_prompt}?, {"role": "user",
// "content": prompt}] and the answer is choices[0].message.content.
//
// Failures of one request are data: CompletionOutcome::error says what went wrong and names the
// URL. Only "the server cannot be reached at all" (Probe) throws.
//
// Thread-safety: a CompletionClient may be used by one thread at a time; CompleteAll runs its own
// worker threads (one connection each) and joins them before returning.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvgate/http/client_config.h"
#include "kvgate/http/endpoint.h"

namespace kvgate::http {
class TlsContext;
}  // namespace kvgate::http

namespace kvgate::checks {

// "http[s]://host:port[/prefix]" as http::Url parses it (a trailing "/v1" is dropped); Parse
// throws InvalidSetting("url") where http::Url::Parse throws ConfigError.
struct ServerUrl : http::Url {
  static ServerUrl Parse(const std::string& url);
};

struct ClientOptions {
  int concurrency = 4;                                // parallel connections, 1..256
  std::chrono::milliseconds connect_timeout{5000};    // TCP connect
  std::chrono::milliseconds request_timeout{600000};  // write request + read whole response
  std::string model;    // the request's "model"; "" = ask GET /v1/models in Probe
  int max_retries = 3;  // on 429/503 only, after Retry-After (clamped to 0.1–10 s)
  int64_t max_response_bytes = 64 << 20;
  // Merged into every request body (top-level keys; a key here overrides the client's own),
  // e.g. {"readkv": {"read_bits": 4}} for a ReadKV candidate. Must be an object or null.
  nlohmann::json extra_body;
  http::ClientConfig client;  // TLS trust, bearer key, extra headers
  http::Endpoint endpoint = http::Endpoint::kCompletions;
  // Chat only: sent as the system message before each prompt ("" = no system message).
  std::string system_prompt;
  // Polled before each request of CompleteAll; once it returns true no further request is sent
  // (those in flight finish) and the unsent ones end with an error saying so. May be empty.
  std::function<bool()> stop_requested;
};

struct CompletionRequest {
  std::string prompt;
  int max_tokens = 16;
  std::vector<std::string> stop;  // sent as "stop" when non-empty
};

struct CompletionOutcome {
  std::string text;                // choices[0].text
  int64_t prompt_tokens = -1;      // usage.prompt_tokens; -1 when absent
  int64_t completion_tokens = -1;  // usage.completion_tokens; -1 when absent
  int http_status = 0;             // 0 when no HTTP response arrived
  double latency_s = 0.0;          // first send → full response read, retries included
  std::string error;               // empty on success; else names the URL and what went wrong

  bool ok() const { return error.empty(); }
};

class CompletionClient {
 public:
  // Throws InvalidSetting on a malformed URL or options out of range.
  CompletionClient(const std::string& url, ClientOptions options);

  // Checks that the server answers HTTP at all (GET /v1/models; any status counts) and, when
  // options.model is empty, adopts the first model id it lists. Throws ServerUnreachable.
  void Probe();

  // Sends every request, `concurrency` at a time; outcomes are in request order. `progress`, when
  // set, is called after each request with (done, total), from worker threads, serialised.
  // `on_outcome`, when set, is called the same way just before it with the request's index and
  // its outcome, for requests that were sent only (not those a stop left unsent): a caller can
  // keep each answer as it comes.
  std::vector<CompletionOutcome> CompleteAll(
      const std::vector<CompletionRequest>& requests,
      const std::function<void(size_t done, size_t total)>& progress = {},
      const std::function<void(size_t index, const CompletionOutcome& outcome)>& on_outcome = {});

  const ServerUrl& url() const { return url_; }
  const std::string& model() const { return model_; }  // "" when unknown: field left out
  // http::Describe of the connection, for the check's record (never a secret).
  std::string connection() const { return http::Describe(url_, options_.client); }

 private:
  ServerUrl url_;
  ClientOptions options_;
  std::string model_;
  std::shared_ptr<const http::TlsContext> tls_;  // shared by every connection
};

// GET `path` on the server and return the body of a 200 answer. Throws ServerUnreachable when no
// HTTP answer arrives, ServerError for any other status.
std::string HttpGet(const ServerUrl& url, const std::string& path,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                    const http::ClientConfig& config = {});

}  // namespace kvgate::checks
