// The scheduler and connection pool of one run (run_loop.h).
#include "run_loop.h"

#include "exchange.h"
#include "http_target.h"
#include "session.h"

namespace kvgate::loadgen::internal {
namespace {

// How much longer than the last request's deadline the run may take before the watchdog ends
// it (every operation already has a deadline; this only guards against a bug).
constexpr auto kWatchdogGrace = std::chrono::seconds(5);

}  // namespace

void Run::StartOpenLoop(Clock::time_point t0, const std::vector<int64_t>& arrivals,
                        int64_t total) {
  t0_ = t0;
  arrivals_ = &arrivals;
  open_loop_ = true;
  total_ = total;
  if (arrivals.empty()) {
    scheduling_done_ = true;
    MaybeShutdown();
    return;
  }
  auto last_deadline =
      t0 + std::chrono::nanoseconds(arrivals.back()) +
      std::chrono::nanoseconds(static_cast<int64_t>(settings_.request_timeout_s * 1e9));
  watchdog_.expires_at(last_deadline + kWatchdogGrace);
  watchdog_.async_wait([this](beast::error_code ec) { OnWatchdog(ec); });
  ArmStopPoll();
  ScheduleNext();
}

void Run::StartClosedLoop(Clock::time_point t0, int64_t total, double duration_s) {
  t0_ = t0;
  open_loop_ = false;
  total_ = total;
  ArmStopPoll();
  if (duration_s > 0) {
    issue_until_ = t0 + std::chrono::nanoseconds(static_cast<int64_t>(duration_s * 1e9));
    watchdog_.expires_at(
        issue_until_ +
        std::chrono::nanoseconds(static_cast<int64_t>(settings_.request_timeout_s * 1e9)) +
        kWatchdogGrace);
    watchdog_.async_wait([this](beast::error_code ec) { OnWatchdog(ec); });
  }
  scheduler_.expires_at(t0);
  scheduler_.async_wait([this](beast::error_code ec) {
    if (ec || shut_down_) return;
    for (int i = 0; i < settings_.concurrency; ++i) IssueClosedLoop();
    CheckDone();
  });
}

void Run::ScheduleNext() {
  if (next_ >= static_cast<int64_t>(arrivals_->size())) {
    scheduling_done_ = true;
    MaybeShutdown();
    return;
  }
  auto due = t0_ + std::chrono::nanoseconds((*arrivals_)[next_]);
  scheduler_.expires_at(due - std::chrono::microseconds(settings_.spin_us));
  scheduler_.async_wait([this](beast::error_code ec) { OnSchedulerTimer(ec); });
}

void Run::OnSchedulerTimer(beast::error_code ec) {
  if (ec || shut_down_) return;
  const int64_t n = static_cast<int64_t>(arrivals_->size());
  // Spin the last few microseconds: a timer wake-up is only as precise as the kernel's timer
  // slack and the reactor's latency, and MLPerf-grade send lag needs better than that.
  auto due = t0_ + std::chrono::nanoseconds((*arrivals_)[next_]);
  while (Clock::now() < due) {
  }
  // Everything that is due goes now, in schedule order (after a late wake-up there may be
  // several); each request's own sent_ns records how late it was.
  while (next_ < n && t0_ + std::chrono::nanoseconds((*arrivals_)[next_]) <= Clock::now()) {
    Issue(next_++);
  }
  ScheduleNext();
}

void Run::Issue(int64_t index) {
  RequestRecord& record = records_[static_cast<size_t>(index)];
  if (sessions_ == nullptr) {
    record.session = index;
    Send(record, request_of_(index));
    return;
  }
  SessionTurn turn = sessions_->Start(index);
  record.session = turn.session;
  record.turn = turn.turn;
  Send(record, std::move(turn.request));
}

void Run::Send(RequestRecord& record, PreparedRequest request) {
  ++outstanding_;
  record.max_tokens = request.max_tokens;
  auto& body = request.body;
  auto deadline = t0_ + std::chrono::nanoseconds(record.scheduled_ns) +
                  std::chrono::nanoseconds(static_cast<int64_t>(settings_.request_timeout_s * 1e9));
  if (open_loop_ && record.turn > 1) ExtendWatchdog(deadline);
  // The header first: the body is moved into the exchange (argument order is unspecified).
  std::string header = internal::RenderHeader(header_prefix_, record.index, body->size());
  auto exchange = Exchange::Create(*this, record, std::move(header), std::move(body), deadline,
                                   /*keep_reply=*/sessions_ != nullptr);
  Acquire(std::move(exchange));
}

RequestRecord& Run::NewRecord() {
  const int64_t index = open_loop_ ? static_cast<int64_t>(records_.size()) : next_++;
  if (static_cast<int64_t>(records_.size()) <= index) records_.emplace_back();
  RequestRecord& record = records_[static_cast<size_t>(index)];
  record.index = index;
  record.warmup = index < settings_.warmup_requests;
  // Closed loop has no schedule: a request is "scheduled" when a slot (or a session's next
  // turn) is ready for it.
  record.scheduled_ns = NowNs();
  return record;
}

bool Run::BudgetLeft() const {
  if (shut_down_) return false;
  if (open_loop_) return total_ == 0 || static_cast<int64_t>(records_.size()) < total_;
  return (total_ == 0 || next_ < total_) && Clock::now() < issue_until_;
}

void Run::IssueClosedLoop() {
  if (!BudgetLeft()) return;
  Issue(NewRecord().index);
}

void Run::AfterRequest(const RequestRecord& record, std::string_view reply) {
  if (sessions_ != nullptr) {
    if (std::optional<int64_t> pause = sessions_->OnReply(record, reply)) {
      if (!BudgetLeft()) {
        sessions_->End(record.session);
      } else if (*pause == 0) {
        IssueTurn(record.session);
        return;
      } else {
        ++thinking_;
        auto timer = std::make_shared<asio::steady_timer>(io_);
        timer->expires_after(std::chrono::nanoseconds(*pause));
        timer->async_wait([this, timer, session = record.session](beast::error_code ec) {
          --thinking_;
          if (ec || shut_down_) return;
          IssueTurn(session);
          CheckDone();
        });
        return;
      }
    }
  }
  if (!open_loop_) IssueClosedLoop();
}

void Run::IssueTurn(int64_t session) {
  if (!BudgetLeft()) {
    sessions_->End(session);
    return;
  }
  const int64_t index = open_loop_ ? static_cast<int64_t>(records_.size()) : next_;
  std::optional<SessionTurn> turn = sessions_->Next(session, index);
  if (!turn) {
    // The context limit ended the session: its slot starts a new one.
    if (!open_loop_) IssueClosedLoop();
    return;
  }
  RequestRecord& record = NewRecord();
  record.session = turn->session;
  record.turn = turn->turn;
  Send(record, std::move(turn->request));
}

void Run::ExtendWatchdog(Clock::time_point deadline) {
  if (watchdog_.expiry() >= deadline + kWatchdogGrace) return;
  watchdog_.expires_at(deadline + kWatchdogGrace);
  watchdog_.async_wait([this](beast::error_code ec) { OnWatchdog(ec); });
}

void Run::CheckDone() {
  if (!open_loop_ && outstanding_ == 0 && waiting_.empty() && thinking_ == 0) {
    scheduling_done_ = true;
  }
  MaybeShutdown();
}

void Run::Acquire(std::shared_ptr<Exchange> exchange) {
  if (!idle_.empty()) {
    // Most recently used first: it is the least likely to have been closed by the server.
    auto conn = std::move(idle_.back());
    idle_.pop_back();
    exchange->Begin(std::move(conn), /*reused=*/true);
    return;
  }
  if (open_connections_ < settings_.max_connections) {
    ++open_connections_;
    exchange->Begin(NewConnection(), /*reused=*/false);
    return;
  }
  waiting_.push_back(std::move(exchange));
  ArmSweeper();
}

void Run::OnExchangeDone(const RequestRecord& record, std::unique_ptr<Connection> conn,
                         bool reusable, std::string_view reply) {
  if (conn && reusable && !shut_down_) {
    idle_.push_back(std::move(conn));
  } else {
    --open_connections_;
  }
  CountFinished(record);
  PumpWaiting();
  AfterRequest(record, reply);
  CheckDone();
}

void Run::CountFinished(const RequestRecord& record) {
  --outstanding_;
  if (counters_) {
    counters_->finished.fetch_add(1, std::memory_order_relaxed);
    if (!record.ok()) counters_->errored.fetch_add(1, std::memory_order_relaxed);
  }
}

void Run::PumpWaiting() {
  while (!waiting_.empty() && (!idle_.empty() || open_connections_ < settings_.max_connections)) {
    auto exchange = std::move(waiting_.front());
    waiting_.pop_front();
    if (Clock::now() >= exchange->deadline()) {
      FinishUnsent(exchange);
      continue;
    }
    Acquire(std::move(exchange));
  }
}

void Run::FinishUnsent(const std::shared_ptr<Exchange>& exchange) {
  RequestRecord& record = exchange->record();
  record.error_cause = "timeout";
  record.error_text = "timed out waiting for a free connection (max_connections = " +
                      std::to_string(settings_.max_connections) + ")";
  record.end_ns = NowNs();
  CountFinished(record);
  AfterRequest(record, "");
}

void Run::ArmSweeper() {
  if (sweeper_armed_ || waiting_.empty()) return;
  sweeper_armed_ = true;
  // Deadlines in the queue are in schedule order, so the front expires first.
  sweeper_.expires_at(waiting_.front()->deadline());
  sweeper_.async_wait([this](beast::error_code ec) {
    sweeper_armed_ = false;
    if (ec || shut_down_) return;
    ExpireWaiting();
  });
}

void Run::ExpireWaiting() {
  auto now = Clock::now();
  while (!waiting_.empty() && waiting_.front()->deadline() <= now) {
    auto exchange = std::move(waiting_.front());
    waiting_.pop_front();
    FinishUnsent(exchange);
  }
  ArmSweeper();
  CheckDone();
}

void Run::MaybeShutdown() {
  if (shut_down_ || !scheduling_done_ || outstanding_ > 0 || thinking_ > 0) return;
  shut_down_ = true;
  scheduler_.cancel();
  sweeper_.cancel();
  watchdog_.cancel();
  stop_poll_.cancel();
  for (auto& conn : idle_) conn->stream.Close();
  idle_.clear();
}

void Run::OnWatchdog(beast::error_code ec) {
  if (ec || shut_down_) return;
  // Every operation has its own deadline, so this only fires if something is badly wrong; the
  // run still ends, with the unfinished requests recorded as timeouts.
  for (RequestRecord& record : records_) {
    if (record.end_ns < 0 && record.error_cause.empty()) {
      record.error_cause = "timeout";
      record.error_text = "still unfinished when the run's watchdog fired";
      record.end_ns = NowNs();
    }
  }
  shut_down_ = true;
  io_.stop();
}

void Run::ArmStopPoll() {
  if (stop_ == nullptr || shut_down_) return;
  if (stop_->load()) return StopNow();
  stop_poll_.expires_after(kStopLatency);
  stop_poll_.async_wait([this](beast::error_code ec) {
    if (ec || shut_down_) return;
    ArmStopPoll();
  });
}

void Run::StopNow() {
  // Like the watchdog: every request without an end is closed here, so the records stay whole
  // (one per scheduled request) and say why they have no result.
  for (RequestRecord& record : records_) {
    if (record.end_ns < 0 && record.error_cause.empty()) {
      record.error_cause = "cancelled";
      record.error_text = record.sent_ns >= 0 ? "in flight when the run was stopped"
                                              : "not sent: the run was stopped first";
      record.end_ns = NowNs();
    }
  }
  stopped_ = true;
  shut_down_ = true;
  io_.stop();
}

}  // namespace kvgate::loadgen::internal
