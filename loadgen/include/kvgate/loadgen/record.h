// The per-request load record: the one record type for a request's fact, produced by the load
// generator and stored unchanged in the run history (gates/history), from which any latency or
// goodput gate can be recomputed. Times are nanoseconds on the generator's monotonic clock,
// relative to the run's start (the schedule's time zero).
//
// Latency counts from the *scheduled* send time, not the actual one (MLPerf LoadGen's rule,
// which prevents coordinated omission): TTFT = first_token_ns - scheduled_ns,
// E2E = end_ns - scheduled_ns, TPOT = (E2E - TTFT) / (completion_tokens - 1),
// ITL = gaps between successive token chunks (docs/definitions.md, "Latency").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvgate::loadgen {

struct RequestRecord {
  int64_t index = 0;    // position in the seeded schedule (0-based)
  bool warmup = false;  // excluded from metrics
  // The conversation this request belongs to and its turn in it (1-based). A single-turn run
  // (WorkloadSettings::multi_turn == 1) makes every request its own session: session == index,
  // turn == 1. With multi-turn sessions, sessions are numbered 0, 1, ... in the order they
  // started and turn k + 1's prompt holds the whole conversation up to turn k's reply.
  int64_t session = 0;
  int turn = 1;
  int64_t scheduled_ns = 0;
  int64_t sent_ns = -1;           // first byte of the request written; -1 if never sent
  int64_t first_token_ns = -1;    // first non-empty token chunk; -1 if none arrived
  int64_t end_ns = -1;            // last chunk / response complete / failure noticed
  std::vector<int64_t> chunk_ns;  // arrival of every non-empty token chunk, in order
  // When the generator began this request: took an idle pooled connection or started to
  // connect; -1 if it never did (it waited for a free connection until its timeout). A request
  // that failed to connect has issued_ns but no sent_ns.
  int64_t issued_ns = -1;
  int prompt_tokens = -1;      // from the server's `usage`; -1 when it sent none
  int completion_tokens = -1;  // from the server's `usage`; -1 when it sent none
  int max_tokens = 0;          // what was asked for
  int http_status = 0;         // 0 when no HTTP response arrived
  // Empty when the request succeeded; otherwise one of: "connect", "timeout", "http_4xx",
  // "http_5xx", "reset", "malformed_sse", "incomplete" (stream ended without [DONE]),
  // "http_other" (a status other than 200 below 400), "http_protocol" (the response is not
  // valid HTTP/1.1), "stream_error" (the server sent an {"error": …} event mid-stream),
  // "cancelled" (the run was stopped by its stop flag before this request ended).
  std::string error_cause;
  std::string error_text;  // a human-readable detail of the error

  bool ok() const { return error_cause.empty(); }

  std::optional<double> TtftSeconds() const {
    if (first_token_ns < 0) return std::nullopt;
    return (first_token_ns - scheduled_ns) * 1e-9;
  }
  std::optional<double> E2eSeconds() const {
    if (end_ns < 0 || !ok()) return std::nullopt;
    return (end_ns - scheduled_ns) * 1e-9;
  }
  // Needs a completed request with at least two output tokens.
  std::optional<double> TpotSeconds() const {
    auto ttft = TtftSeconds();
    auto e2e = E2eSeconds();
    if (!ttft || !e2e || completion_tokens < 2) return std::nullopt;
    return (*e2e - *ttft) / (completion_tokens - 1);
  }
  std::vector<double> ItlSeconds() const {
    std::vector<double> gaps;
    for (size_t i = 1; i < chunk_ns.size(); ++i) {
      gaps.push_back((chunk_ns[i] - chunk_ns[i - 1]) * 1e-9);
    }
    return gaps;
  }
};

}  // namespace kvgate::loadgen
