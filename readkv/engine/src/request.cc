#include "readkv/engine/request.h"

#include <utility>

namespace readkv::engine {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "abort";  // vLLM's label for requests that ended without finishing
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone:
      return "none";
    case ErrorKind::kInvalidRequest:
      return "invalid_request";
    case ErrorKind::kShuttingDown:
      return "shutting_down";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

RequestChannel::RequestChannel(std::function<void()> notifier) : notifier_(std::move(notifier)) {}

void RequestChannel::Push(GenerationEvent event) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
    if (!notified_) {
      notified_ = true;
      notify = true;
    }
  }
  cv_.notify_one();
  // Outside the lock: the notifier may post work that immediately calls Drain().
  if (notify && notifier_) notifier_();
}

std::vector<GenerationEvent> RequestChannel::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GenerationEvent> out(std::make_move_iterator(events_.begin()),
                                   std::make_move_iterator(events_.end()));
  events_.clear();
  notified_ = false;
  return out;
}

std::optional<GenerationEvent> RequestChannel::WaitPop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return std::nullopt;
  GenerationEvent event = std::move(events_.front());
  events_.pop_front();
  if (events_.empty()) notified_ = false;
  return event;
}

}  // namespace readkv::engine
