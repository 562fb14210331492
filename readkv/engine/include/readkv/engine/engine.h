// The scheduler: iteration-level (continuous) batching of completion requests over one
// DecodeModel, on one worker thread.
//
// Each step the worker (1) admits waiting requests into the running batch up to max_batch (and
// while the backend's KV limit allows), (2) ends cancelled sequences and frees their KV, (3) calls
// DecodeModel::Forward once with every running sequence -- a new sequence feeds its whole prompt,
// a running one its last token -- and (4) samples, streams and finishes. A request joins or leaves
// the batch at any step; nobody waits for a whole batch to finish. With prefill_chunk > 0 the
// prompts are fed in chunks instead: at most prefill_chunk prompt tokens per step over all new
// sequences (in admission order), so the running ones keep decoding while a long prompt is read
// (chunked prefill); a sequence whose prompt waits for budget sits that step out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/engine/decode_model.h"
#include "readkv/engine/request.h"
#include "readkv/engine/serving_metrics.h"
#include "readkv/engine/tokenizer.h"

namespace readkv::engine {

struct EngineOptions {
  int max_batch = 8;       // sequences in one Forward call, >= 1
  int max_waiting = 64;    // accepted requests not yet running, >= 0; beyond -> kQueueFull
  int prefill_chunk = 0;   // prompt tokens per step over all new sequences; 0 = whole prompts
  std::string model_name;  // the served model id (metrics label); empty = model.model_id()
  // A test aid, never for production (`kvgate serve --inject-step-delay-ms`): the worker sleeps
  // this long after every step's forward pass, so each token of every running sequence comes
  // that much later and the server's throughput falls accordingly: a server made slower by a
  // known amount, for known-truth tests of the gates. 0 = off.
  std::chrono::microseconds inject_step_delay{0};
};

// What a server needs to know about the model, read once at construction.
struct ModelInfo {
  std::string model_id;
  std::string kv_backend;
  int vocab_size = 0;
  int max_context = 0;
  int32_t bos_token = 0;
  int32_t eos_token = 0;
};

enum class SubmitStatus {
  kAccepted,      // events will arrive on the channel, ending with exactly one kFinished
  kQueueFull,     // max_waiting requests are already waiting: try again later (HTTP 429)
  kShuttingDown,  // draining: no new requests (HTTP 503)
};

// Counts since start, for tests and logs (the same facts are in the metrics).
struct EngineCounters {
  int64_t submitted = 0;
  int64_t rejected_queue_full = 0;
  int64_t finished = 0;           // stop or length
  int64_t cancelled = 0;          // by the consumer
  int64_t errored = 0;            // model refused/failed, or cancelled by shutdown
  int64_t sequences_started = 0;  // StartSequence calls
  int64_t sequences_ended = 0;    // EndSequence calls (== started once idle)
  int64_t steps = 0;              // Forward calls
  int64_t max_batch_seen = 0;     // largest Forward batch so far
  int running = 0;
  int waiting = 0;
};

// Thread-safe: Submit, BeginDrain, Shutdown, counters and metrics may be called from any thread.
// The model and tokenizer must outlive the engine; only the worker thread calls the model after
// construction.
class Engine {
 public:
  // Starts the worker. Throws std::invalid_argument naming a bad option.
  Engine(DecodeModel& model, const Tokenizer& tokenizer, EngineOptions options);
  ~Engine();  // Shutdown(0)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a validated request (non-empty prompt, ids in range, prompt + max_tokens within
  // max_context). On kAccepted the engine keeps `channel` until the request's kFinished event.
  SubmitStatus Submit(CompletionRequest request, std::shared_ptr<RequestChannel> channel);

  // Stops admitting new requests (Submit returns kShuttingDown); in-flight ones continue.
  void BeginDrain();
  // Drains: waits up to `grace` for every accepted request to finish, then cancels the rest
  // (their streams end with ErrorKind::kShuttingDown), frees their KV and joins the worker.
  // Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

  bool draining() const;
  const ModelInfo& model_info() const { return info_; }
  const EngineOptions& options() const { return options_; }
  // The served name (EngineOptions::model_name, or the model id).
  const std::string& model_name() const { return options_.model_name; }
  ServingMetrics& metrics() { return *metrics_; }
  EngineCounters counters() const;

 private:
  struct Active;

  void WorkerLoop();
  // One scheduler step: start the admitted, drop the cancelled, one Forward call for the
  // decoding sequences and the prompts' next chunks, then a token for each that wanted one.
  void Step(std::vector<std::unique_ptr<Active>>& admitted);
  // Starts each admitted request's sequence in the model and moves it to running_ (or finishes
  // it: cancelled, shutting down, a policy the model refuses).
  void StartAdmitted(std::vector<std::unique_ptr<Active>>& admitted, bool cancel_all);
  // Samples the next token of a sequence from its logits, pushes its event, and finishes it on
  // EOS, a stop string, max_tokens or the context limit.
  void EmitToken(Active& active, const std::vector<float>& logits,
                 std::chrono::steady_clock::time_point now);
  // Drops the finished sequences from running_ and publishes the running count.
  void EraseFinished();
  void Finish(Active& active, FinishReason reason, ErrorKind error, std::string message);
  void PublishModelState();

  DecodeModel& model_;
  const Tokenizer& tokenizer_;
  EngineOptions options_;
  ModelInfo info_;
  std::unique_ptr<ServingMetrics> metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the worker
  std::condition_variable idle_cv_;  // wakes Shutdown when nothing is in flight
  std::deque<std::unique_ptr<Active>> waiting_;
  int running_count_ = 0;  // mirror of running_.size() for other threads
  bool draining_ = false;
  bool cancel_all_ = false;
  bool stop_ = false;
  uint64_t next_sequence_id_ = 1;
  // Default sampling seeds for requests without one; seeded unpredictably at construction.
  kvgate::stats::SplitMix64 default_seeds_;
  EngineCounters counters_;

  // Worker-only state.
  std::vector<std::unique_ptr<Active>> running_;
  std::chrono::steady_clock::time_point last_publish_{};

  std::once_flag join_once_;
  std::thread worker_;
};

}  // namespace readkv::engine
