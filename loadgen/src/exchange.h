// Internal: one request/response exchange on one connection: connect (and TLS handshake) when
// the connection is new, write the request while reading the response, timestamp every SSE token
// chunk as it is parsed, and turn the outcome into the request's record (success, or an error
// cause and text). A pooled connection the server had already closed is retried once on a new
// one. When it is over the exchange hands its connection back to its Run (run_loop.h).
//
// Thread-safety: runs on the Run's event-loop thread only.
#pragma once

#include <memory>
#include <string>

#include "run_loop.h"

namespace kvgate::loadgen::internal {

class Exchange {
 public:
  // `record` and `run` outlive the exchange; `deadline` bounds every operation of it.
  // `keep_reply`: the reply's text is kept and handed to Run::OnExchangeDone (multi-turn
  // sessions continue the conversation with it); otherwise only its timing is kept.
  static std::shared_ptr<Exchange> Create(Run& run, RequestRecord& record, std::string header,
                                          std::shared_ptr<const std::string> body,
                                          Clock::time_point deadline, bool keep_reply = false);
  virtual ~Exchange() = default;

  // Starts the exchange on `conn` (`reused`: an idle pooled connection, else a new one).
  virtual void Begin(std::unique_ptr<Connection> conn, bool reused) = 0;
  virtual Clock::time_point deadline() const = 0;
  virtual RequestRecord& record() = 0;
};

}  // namespace kvgate::loadgen::internal
