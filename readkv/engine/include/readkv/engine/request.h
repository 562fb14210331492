// One completion request as the engine sees it, and the channel its results flow through.
//
// The HTTP layer validates and builds a CompletionRequest, creates a RequestChannel, and hands
// both to Engine::Submit. The engine's worker thread pushes GenerationEvents into the channel;
// the consumer (a Beast session, or a test) drains them from its own thread. Either side may
// drop its reference at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "readkv/engine/decode_model.h"

namespace readkv::engine {

// Sampling and stopping. Validated by the caller (the server) before Submit.
struct GenerationParams {
  int max_tokens = 16;            // generated tokens at most, >= 1
  double temperature = 1.0;       // 0 = greedy (ties -> lowest id); > 0 = softmax(logits / T)
  std::optional<uint64_t> seed;   // sampling seed; unset = drawn by the engine (logged)
  std::vector<std::string> stop;  // non-empty strings; the output ends before the first one
  bool ignore_eos = false;        // keep generating after EOS (EOS yields no text)
};

struct CompletionRequest {
  std::vector<int32_t> prompt;  // token ids fed on the first step, non-empty
  GenerationParams params;
  ReadPolicy read_policy;  // passed to DecodeModel::StartSequence
  // When the request arrived at the serving front end (vLLM's arrival_time: the HTTP request
  // read in full, before parsing and tokenising); TTFT and E2E latency count from here. The
  // default (the clock's epoch) means "now": Engine::Submit stamps it.
  std::chrono::steady_clock::time_point arrival{};
};

enum class FinishReason {
  kStop,       // EOS or a stop string
  kLength,     // max_tokens or the model's context
  kCancelled,  // the consumer cancelled (client went away)
  kError,      // see GenerationEvent::error
};

// Why a request ended in error, so the HTTP layer can choose a status and a counter label.
enum class ErrorKind {
  kNone,
  kInvalidRequest,  // the model refused the request (e.g. a read policy it cannot serve): 400
  kShuttingDown,    // cancelled by a drain that ran out of time: 503
  kInternal,        // the model failed: 500
};

const char* FinishReasonName(FinishReason reason);  // "stop", "length", "abort", "error"
const char* ErrorKindName(ErrorKind kind);          // "invalid_request", "shutting_down", ...

struct GenerationEvent {
  enum class Kind { kToken, kFinished };
  Kind kind = Kind::kToken;
  // kToken: the text released by this token (may be empty: held back until a UTF-8 character or
  // a possible stop string is complete). kFinished: the text still held back, released now.
  std::string text;
  int32_t token = -1;  // kToken: the sampled id
  // When the engine produced the event: for kToken the end of the decode step that sampled the
  // token (the instant TTFT and inter-token latency are observed at); for kFinished when the
  // request ended.
  std::chrono::steady_clock::time_point produced_at{};
  // kFinished only:
  FinishReason finish_reason = FinishReason::kStop;
  ErrorKind error = ErrorKind::kNone;
  std::string error_message;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  uint64_t seed = 0;  // the sampling seed actually used
};

// A single-producer, single-consumer hand-off from the engine worker to one consumer. Every
// method is thread-safe. The notifier runs on the producer's thread, only when the queue goes
// from drained to non-empty (so a burst of tokens costs one wake-up); it must not block.
class RequestChannel {
 public:
  explicit RequestChannel(std::function<void()> notifier = {});

  // Producer side (engine).
  void Push(GenerationEvent event);

  // Consumer side. Drain() takes everything queued and re-arms the notifier.
  std::vector<GenerationEvent> Drain();
  // Blocks until an event is available or `timeout` passes (for blocking consumers and tests).
  std::optional<GenerationEvent> WaitPop(std::chrono::milliseconds timeout);

  // Asks the engine to end the request at its next step; idempotent, from any thread.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::function<void()> notifier_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
  bool notified_ = false;
  std::atomic<bool> cancelled_{false};
};

}  // namespace readkv::engine
