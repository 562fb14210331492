// The OpenAI-compatible HTTP/1.1 server (Boost.Beast) in front of an engine::Engine.
//
// Endpoints:
//   POST /v1/completions  completion, or SSE stream of completion chunks ending in `data: [DONE]`
//   GET  /v1/models       the served model
//   GET  /health          200 {"status":"ok"}; 503 while draining
//   GET  /metrics         Prometheus text format (prometheus-cpp core's TextSerializer)
// Errors are JSON {"error": {"message", "type", "param", "code"}} with a 4xx/5xx status and are
// counted in kvgate_request_errors_total{cause=code}. Unknown path 404, wrong method 405 (with
// Allow), body over max_body_bytes 413, header over max_header_bytes 431, malformed HTTP 400,
// queue full 429 with Retry-After, draining 503. After a 4xx on a well-formed request the
// connection stays usable (keep-alive); after a framing error (400/413/431) it is closed. HEAD is
// answered wherever GET is, with GET's headers and no body.
//
// Connections: at most max_connections are open at once; one more is answered at once with 503
// `too_many_connections` (Retry-After) and closed, and so is one accepted while the process is
// out of descriptors (one descriptor is held in reserve for that), so idle connections can never
// lock everyone out. A client that resets its connection while its request is in flight cancels
// it (the engine frees its KV at the next step); one that only half-closes (shuts down its
// sending side after the request, as HTTP/1.1 allows) gets its answer, and is cancelled once a
// write to it fails. Connections idle for idle_timeout, or whose request does not arrive in full
// within it, are closed; so is one whose writes stall for write_timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "readkv/engine/engine.h"
#include "readkv/engine/tokenizer.h"

namespace readkv::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // an IP address or a name to resolve
  uint16_t port = 0;  // 0 = any free port; see Server::port()
  int threads = 2;    // I/O threads
  size_t max_body_bytes = size_t{1} << 20;
  size_t max_header_bytes = size_t{16} << 10;
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  int retry_after_seconds = 1;  // the Retry-After of a 429 or a connection-limit 503
  // Open connections at once; 0 = the process's open-file limit (RLIMIT_NOFILE, soft) less
  // kReservedDescriptors, read at Start().
  int max_connections = 0;
};

// Descriptors left to the rest of the process (model files, logs, the cache directory, the
// engine's threads) when max_connections comes from the open-file limit.
inline constexpr int kReservedDescriptors = 128;

// Raises the process's soft open-file limit (RLIMIT_NOFILE) to its hard limit (at most 2^20),
// as servers do: a soft limit of 1024 would otherwise cap connections near 900. Returns the soft
// limit now in force.
long RaiseOpenFileLimit();

// Start() and Shutdown() are called from one controlling thread; the handlers run on the
// server's own I/O threads. The engine and tokenizer must outlive the server.
class Server {
 public:
  // Throws std::invalid_argument naming a bad option.
  Server(engine::Engine& engine, const engine::Tokenizer& tokenizer, ServerOptions options);
  ~Server();  // Shutdown(0) if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the I/O threads. Throws std::runtime_error if it cannot bind.
  void Start();
  uint16_t port() const;
  std::string address() const;  // the bound "IP:PORT" ("[IPv6]:PORT"), e.g. "127.0.0.1:40123"
  int max_connections() const;  // in force since Start()

  // Stops accepting, drains the engine (in-flight requests get up to `grace` to finish, then end
  // with an error event), waits briefly for their last bytes to be written, and stops. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace readkv::server
