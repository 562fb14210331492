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
// connection stays usable (keep-alive); after a framing error (400/413/431) it is closed.
//
// A client that disconnects while its request is in flight cancels it (the engine frees its KV
// at the next step). Connections idle for idle_timeout, or whose request does not arrive in full
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
  int retry_after_seconds = 1;  // the Retry-After of a 429
};

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

  // Stops accepting, drains the engine (in-flight requests get up to `grace` to finish, then end
  // with an error event), waits briefly for their last bytes to be written, and stops. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace readkv::server
