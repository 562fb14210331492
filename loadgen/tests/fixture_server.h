// A real OpenAI-compatible HTTP server for the load generator's tests and benchmark: Beast on
// 127.0.0.1 port 0, one event-loop thread, streaming SSE completions whose timing and faults the
// test chooses per request. It is a test fixture, not a model: token text is a placeholder and
// prompt_tokens in `usage` is the prompt's word count (or token-id count).
//
// Timing is absolute: chunk k of a request is written at t_start + ttft + k * itl, where t_start
// is when the request was fully read (after waiting for a slot when max_active is set), so the
// client-side measurement can be compared with the truth without drift.
//
// Thread-safety: the public methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kvgate::loadgen::testing {

// What the server does with one completions request.
struct FixtureReply {
  enum class Kind {
    kStream,            // a well-formed SSE stream (or a JSON body when "stream" is false)
    kClose,             // close the connection without any response
    kResetMidStream,    // send fault_after_tokens tokens, then reset the connection (RST)
    kMalformedSse,      // after fault_after_tokens tokens, an event whose data is not JSON
    kErrorEvent,        // after fault_after_tokens tokens, an {"error": …} event, then [DONE]
    kNoDone,            // the full stream but no `data: [DONE]`
    kWrongContentType,  // the full stream labelled application/json
    kHttpError,         // `status` with an OpenAI-style JSON error body
    kStall,             // read the request, then send nothing until the client gives up
  };
  Kind kind = Kind::kStream;
  double ttft_ms = 0.0;  // request read (slot acquired) -> first token chunk
  double itl_ms = 0.0;   // between successive token chunks
  int tokens = -1;       // token chunks to send; -1 = the request's max_tokens
  int status = 500;      // kHttpError
  int fault_after_tokens = 1;
  int empty_chunks_first = 0;  // chunks with "text": "" sent at once (they are not tokens)
  bool comments = false;       // a ": ping" comment line before every event
  bool crlf = false;           // CRLF line endings in the event stream
  bool split_writes = false;   // write every event in several pieces (tests reassembly)
  bool send_usage = true;      // the final usage chunk
};

struct FixtureOptions {
  // Chooses the reply by request id (the X-Request-Id header the load generator sends, or a
  // server-side counter from 0 when absent). Called on the server thread. Default: kStream with
  // no delays.
  std::function<FixtureReply(int64_t request_id)> plan;
  // > 0: at most this many completions are served at once; the others wait (a server with a
  // known capacity of max_active / service time).
  int max_active = 0;
  // Close the connection after every completion without saying so (no "Connection: close"), as
  // a server whose keep-alive timer fired does; the client's next use of it fails.
  bool close_after_response = false;
  std::string model = "fixture-model";
};

class FixtureServer {
 public:
  explicit FixtureServer(FixtureOptions options = {});
  ~FixtureServer();
  FixtureServer(const FixtureServer&) = delete;
  FixtureServer& operator=(const FixtureServer&) = delete;

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int64_t completions_received() const { return completions_.load(); }
  int64_t connections_accepted() const { return connections_.load(); }
  nlohmann::json last_request_body() const;
  // When each token chunk of a streamed request was handed to the socket: steady_clock
  // nanoseconds since its epoch (the truth the client's timestamps are compared with; under CPU
  // contention it can be later than the planned ttft/itl). Empty for an unknown id.
  std::vector<int64_t> EmittedTokenNs(int64_t request_id) const;

  // A URL on 127.0.0.1 where nothing listens (a port that was just free): connection refused.
  static std::string ClosedPortUrl();

  struct State;  // shared with the server's coroutines

 private:
  FixtureOptions options_;
  std::shared_ptr<State> state_;
  uint16_t port_ = 0;
  std::atomic<int64_t> completions_{0};
  std::atomic<int64_t> connections_{0};
  std::thread thread_;
};

}  // namespace kvgate::loadgen::testing
