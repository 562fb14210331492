#include "readkv/engine/engine.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

#include "readkv/engine/completion_text.h"
#include "readkv/engine/sampler.h"

namespace readkv::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// 64 bits from the OS's entropy source: the seed of the default sampling seeds.
uint64_t UnpredictableSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

constexpr auto kPublishInterval = std::chrono::milliseconds(50);

}  // namespace

struct Engine::Active {
  Active(uint64_t sequence_id, CompletionRequest req, std::shared_ptr<RequestChannel> ch,
         uint64_t sampling_seed)
      : id(sequence_id),
        request(std::move(req)),
        channel(std::move(ch)),
        seed(sampling_seed),
        sampler(request.params.temperature, sampling_seed),
        text(request.params.stop) {}

  uint64_t id;
  CompletionRequest request;
  std::shared_ptr<RequestChannel> channel;
  uint64_t seed;
  Sampler sampler;
  CompletionText text;
  // The front end's arrival stamp (CompletionRequest::arrival), or Submit's time without one.
  Clock::time_point arrival =
      request.arrival == Clock::time_point{} ? Clock::now() : request.arrival;
  Clock::time_point last_token_time{};
  bool admitted = false;  // counted in running_count_
  bool started = false;   // StartSequence succeeded: EndSequence owed
  size_t fed = 0;  // prompt tokens fed so far (all of them in one step unless chunked)
  bool prefilled() const { return fed == request.prompt.size(); }
  bool done = false;
  int32_t last_token = -1;
  int completion_tokens = 0;
};

Engine::Engine(DecodeModel& model, const Tokenizer& tokenizer, EngineOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      default_seeds_(UnpredictableSeed()) {
  if (options_.max_batch < 1) throw std::invalid_argument("max_batch must be >= 1");
  if (options_.max_waiting < 0) throw std::invalid_argument("max_waiting must be >= 0");
  if (options_.prefill_chunk < 0) throw std::invalid_argument("prefill_chunk must be >= 0");
  if (options_.inject_step_delay.count() < 0) {
    throw std::invalid_argument("inject_step_delay must be >= 0");
  }
  // Read before the worker starts; afterwards only the worker touches the model.
  info_.model_id = model_.model_id();
  info_.kv_backend = model_.kv_backend();
  info_.vocab_size = model_.vocab_size();
  info_.max_context = model_.max_context();
  info_.bos_token = model_.bos_token();
  info_.eos_token = model_.eos_token();
  if (info_.vocab_size < 1) throw std::invalid_argument("model vocab_size must be >= 1");
  if (info_.max_context < 2) throw std::invalid_argument("model max_context must be >= 2");
  if (options_.model_name.empty()) options_.model_name = info_.model_id;
  metrics_ = std::make_unique<ServingMetrics>(options_.model_name, info_.kv_backend);
  PublishModelState();
  worker_ = std::thread([this] { WorkerLoop(); });
}

Engine::~Engine() { Shutdown(std::chrono::milliseconds(0)); }

SubmitStatus Engine::Submit(CompletionRequest request, std::shared_ptr<RequestChannel> channel) {
  // The server validates requests for the client; these are the engine's own invariants.
  if (request.prompt.empty()) throw std::invalid_argument("prompt must not be empty");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= info_.vocab_size) throw std::invalid_argument("prompt token out of range");
  }
  const GenerationParams& p = request.params;
  if (p.max_tokens < 1) throw std::invalid_argument("max_tokens must be >= 1");
  if (static_cast<int64_t>(request.prompt.size()) + p.max_tokens > info_.max_context) {
    throw std::invalid_argument("prompt + max_tokens exceeds max_context");
  }
  if (!(p.temperature >= 0.0) || p.temperature > 1e6) {
    throw std::invalid_argument("temperature must be finite and >= 0");
  }
  if (!channel) throw std::invalid_argument("channel must not be null");

  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stop_) return SubmitStatus::kShuttingDown;
    // Free batch slots count as room too: a request queued there runs at the next step, so
    // max_waiting bounds only the requests that must wait for a running one to finish.
    const int free_slots = std::max(0, options_.max_batch - running_count_);
    if (static_cast<int>(waiting_.size()) >= options_.max_waiting + free_slots) {
      ++counters_.rejected_queue_full;
      metrics_->CountError("queue_full");
      return SubmitStatus::kQueueFull;
    }
    const uint64_t seed = p.seed ? *p.seed : default_seeds_();
    waiting_.push_back(std::make_unique<Active>(next_sequence_id_++, std::move(request),
                                                std::move(channel), seed));
    ++counters_.submitted;
    metrics_->SetWaiting(static_cast<int>(waiting_.size()));
  }
  cv_.notify_one();
  return SubmitStatus::kAccepted;
}

void Engine::BeginDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool Engine::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

void Engine::Shutdown(std::chrono::milliseconds grace) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    draining_ = true;
    idle_cv_.wait_for(lock, grace, [this] { return waiting_.empty() && running_count_ == 0; });
    cancel_all_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  // A second caller blocks here until the first has joined the worker.
  std::call_once(join_once_, [this] {
    if (worker_.joinable()) worker_.join();
  });
}

EngineCounters Engine::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineCounters out = counters_;
  out.running = running_count_;
  out.waiting = static_cast<int>(waiting_.size());
  return out;
}

void Engine::WorkerLoop() {
  std::vector<std::unique_ptr<Active>> admitted;
  std::vector<std::unique_ptr<Active>> dropped;
  for (;;) {
    // Asked outside the lock (it is the model); a limit of 0 means admit by max_batch alone.
    const int64_t kv_limit = model_.kv_bytes_limit();
    const bool kv_full = kv_limit > 0 && model_.kv_bytes_in_use() >= kv_limit;
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !waiting_.empty() || !running_.empty(); });
      if (stop_ && waiting_.empty() && running_.empty()) break;
      cancel_all = cancel_all_;
      // Requests whose client left while queued never reach the model.
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (cancel_all || (*it)->channel->cancelled()) {
          dropped.push_back(std::move(*it));
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      // With the KV limit reached, still admit into an empty batch so a request can always run.
      while (!waiting_.empty() &&
             static_cast<int>(running_.size() + admitted.size()) < options_.max_batch &&
             (!kv_full || (running_.empty() && admitted.empty()))) {
        waiting_.front()->admitted = true;
        admitted.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
        ++running_count_;
      }
      metrics_->SetWaiting(static_cast<int>(waiting_.size()));
    }
    for (auto& active : dropped) {
      if (cancel_all) {
        Finish(*active, FinishReason::kError, ErrorKind::kShuttingDown,
               "the server is shutting down");
      } else {
        Finish(*active, FinishReason::kCancelled, ErrorKind::kNone, "");
      }
    }
    dropped.clear();
    Step(admitted);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty() && running_count_ == 0) idle_cv_.notify_all();
    }
  }
  PublishModelState();
  std::lock_guard<std::mutex> lock(mu_);
  idle_cv_.notify_all();
}

void Engine::Step(std::vector<std::unique_ptr<Active>>& admitted) {
  bool cancel_all = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_all = cancel_all_;
  }
  StartAdmitted(admitted, cancel_all);

  for (auto& active : running_) {
    if (cancel_all) {
      Finish(*active, FinishReason::kError, ErrorKind::kShuttingDown,
             "the server is shutting down");
    } else if (active->channel->cancelled()) {
      Finish(*active, FinishReason::kCancelled, ErrorKind::kNone, "");
    }
  }
  EraseFinished();
  if (running_.empty()) {
    PublishModelState();
    return;
  }

  // This step's members: every decoding sequence, and the prompts' next chunks while the step's
  // prompt budget lasts (all of every prompt when prefill_chunk is 0).
  std::vector<SequenceStep> steps;
  std::vector<Active*> members;
  steps.reserve(running_.size());
  members.reserve(running_.size());
  size_t budget = options_.prefill_chunk > 0 ? static_cast<size_t>(options_.prefill_chunk)
                                             : std::numeric_limits<size_t>::max();
  for (auto& owned : running_) {
    Active& active = *owned;
    SequenceStep step;
    step.sequence_id = active.id;
    if (active.prefilled()) {
      step.tokens = std::span<const int32_t>(&active.last_token, 1);
    } else {
      const std::span<const int32_t> prompt(active.request.prompt);
      const size_t n = std::min(prompt.size() - active.fed, budget);
      if (n == 0) continue;  // no prompt budget left this step
      budget -= n;
      step.tokens = prompt.subspan(active.fed, n);
      step.logits_wanted = active.fed + n == prompt.size();
    }
    steps.push_back(std::move(step));
    members.push_back(&active);
  }
  try {
    model_.Forward(steps);
    if (options_.inject_step_delay.count() > 0) {
      std::this_thread::sleep_for(options_.inject_step_delay);
    }
  } catch (const std::exception& e) {
    // One failed call fails its whole batch: the KV state of each member is now suspect (a
    // prompt that sat the step out is not).
    for (Active* active : members) {
      Finish(*active, FinishReason::kError, ErrorKind::kInternal,
             std::string("the model failed during a decode step: ") + e.what());
    }
    EraseFinished();
    PublishModelState();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.steps;
    counters_.max_batch_seen =
        std::max<int64_t>(counters_.max_batch_seen, static_cast<int64_t>(steps.size()));
  }

  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < members.size(); ++i) {
    Active& active = *members[i];
    if (!active.prefilled()) active.fed += steps[i].tokens.size();
    if (!steps[i].logits_wanted) continue;  // a prompt chunk before the last
    EmitToken(active, steps[i].logits, now);
  }
  EraseFinished();
  if (running_.empty() || Clock::now() - last_publish_ >= kPublishInterval) PublishModelState();
}

void Engine::StartAdmitted(std::vector<std::unique_ptr<Active>>& admitted, bool cancel_all) {
  for (auto& active : admitted) {
    if (cancel_all) {
      Finish(*active, FinishReason::kError, ErrorKind::kShuttingDown,
             "the server is shutting down");
      continue;
    }
    if (active->channel->cancelled()) {
      Finish(*active, FinishReason::kCancelled, ErrorKind::kNone, "");
      continue;
    }
    try {
      model_.StartSequence(active->id, active->request.read_policy);
      active->started = true;
    } catch (const std::invalid_argument& e) {
      metrics_->CountCacheRejection("invalid_policy");
      Finish(*active, FinishReason::kError, ErrorKind::kInvalidRequest,
             std::string("the read policy is not valid for this server: ") + e.what());
      continue;
    } catch (const std::exception& e) {
      Finish(*active, FinishReason::kError, ErrorKind::kInternal,
             std::string("the model could not start the sequence: ") + e.what());
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.sequences_started;
    }
    metrics_->AddPromptTokens(static_cast<int>(active->request.prompt.size()));
    running_.push_back(std::move(active));
  }
  admitted.clear();
}

void Engine::EmitToken(Active& active, const std::vector<float>& logits, Clock::time_point now) {
  if (static_cast<int>(logits.size()) != info_.vocab_size) {
    Finish(active, FinishReason::kError, ErrorKind::kInternal,
           "the model returned " + std::to_string(logits.size()) + " logits, expected " +
               std::to_string(info_.vocab_size));
    return;
  }
  const int32_t token = active.sampler.Next(logits);
  if (token < 0) {
    Finish(active, FinishReason::kError, ErrorKind::kInternal,
           "the model produced no finite logit");
    return;
  }
  active.last_token = token;
  ++active.completion_tokens;
  // Counted before the token's event is pushed: a client that has its completion must find
  // every one of its tokens in /metrics (a per-step total added after Finish raced with it).
  metrics_->AddGenerationTokens(1);
  if (active.completion_tokens == 1) {
    metrics_->ObserveTimeToFirstToken(Seconds(now - active.arrival));
  } else {
    metrics_->ObserveInterTokenLatency(Seconds(now - active.last_token_time));
  }
  active.last_token_time = now;

  const GenerationParams& params = active.request.params;
  const bool eos = token == info_.eos_token && !params.ignore_eos;
  GenerationEvent event;
  event.kind = GenerationEvent::Kind::kToken;
  event.token = token;
  event.produced_at = now;
  if (!eos) event.text = active.text.Append(tokenizer_.TokenBytes(token));
  active.channel->Push(std::move(event));

  const int64_t held =
      static_cast<int64_t>(active.request.prompt.size()) + active.completion_tokens;
  if (eos || active.text.stopped()) {
    Finish(active, FinishReason::kStop, ErrorKind::kNone, "");
  } else if (active.completion_tokens >= params.max_tokens || held >= info_.max_context) {
    Finish(active, FinishReason::kLength, ErrorKind::kNone, "");
  }
}

void Engine::EraseFinished() {
  std::erase_if(running_, [](const auto& active) { return active->done; });
  metrics_->SetRunning(static_cast<int>(running_.size()));
}

void Engine::Finish(Active& active, FinishReason reason, ErrorKind error, std::string message) {
  if (active.started) {
    try {
      model_.EndSequence(active.id);
    } catch (const std::exception&) {
      // Nothing a client can do about it; the sequence is gone from the engine either way.
      metrics_->CountError("end_sequence_failed");
    }
  }
  GenerationEvent event;
  event.kind = GenerationEvent::Kind::kFinished;
  event.produced_at = Clock::now();
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    event.text = active.text.Finish();
  }
  event.finish_reason = reason;
  event.error = error;
  event.error_message = std::move(message);
  event.prompt_tokens = static_cast<int>(active.request.prompt.size());
  event.completion_tokens = active.completion_tokens;
  event.seed = active.seed;

  switch (reason) {
    case FinishReason::kStop:
    case FinishReason::kLength:
      metrics_->CountFinished(reason);
      metrics_->ObserveEndToEndLatency(Seconds(Clock::now() - active.arrival));
      break;
    case FinishReason::kCancelled:
      metrics_->CountFinished(reason);
      metrics_->CountError("cancelled");
      break;
    case FinishReason::kError:
      metrics_->CountError(ErrorKindName(error));
      break;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active.admitted) --running_count_;
    if (active.started) ++counters_.sequences_ended;
    switch (reason) {
      case FinishReason::kStop:
      case FinishReason::kLength:
        ++counters_.finished;
        break;
      case FinishReason::kCancelled:
        ++counters_.cancelled;
        break;
      case FinishReason::kError:
        ++counters_.errored;
        break;
    }
  }
  active.done = true;
  active.channel->Push(std::move(event));
}

void Engine::PublishModelState() {
  last_publish_ = Clock::now();
  try {
    const int64_t limit = model_.kv_bytes_limit();
    const int64_t in_use = model_.kv_bytes_in_use();
    metrics_->SetKvUsage(limit > 0 ? static_cast<double>(in_use) / static_cast<double>(limit)
                                   : 0.0);
    metrics_->PublishLedgers(model_.ledgers());
  } catch (const std::exception&) {
    metrics_->CountError("ledger_read_failed");
  }
}

}  // namespace readkv::engine
