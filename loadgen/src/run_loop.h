// Internal: the scheduler of one run. A Run owns the run's event loop state: the open-loop
// schedule (or the closed loop's slots), the keep-alive connection pool, the queue of requests
// waiting for a connection, and the watchdog and stop flag. Each request is an Exchange
// (exchange.h); Run hands it a connection and takes the connection back when it is over.
//
// Thread-safety: everything runs on the one thread that runs the io_context; nothing is locked.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvgate/http/stream.h"
#include "kvgate/loadgen/record.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen::internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Connection {
  Connection(asio::io_context& io, const kvgate::http::Url& url,
             const kvgate::http::TlsContext& tls)
      : stream(io, url, tls) {}
  kvgate::http::Stream stream;
  beast::flat_buffer buffer;
};

class Exchange;
class Sessions;

// A request ready to send: its rendered body (shared when prompts repeat) and what it asks for.
struct PreparedRequest {
  std::shared_ptr<const std::string> body;
  int max_tokens = 0;
};
using RequestSource = std::function<PreparedRequest(int64_t index)>;

class Run {
 public:
  Run(asio::io_context& io, const LoadSettings& settings, const kvgate::http::Url& url,
      const kvgate::http::TlsContext& tls, tcp::resolver::results_type endpoints,
      RequestSource request_of, std::string header_prefix, std::deque<RequestRecord>& records,
      LiveCounters* counters, const std::atomic<bool>* stop, Sessions* sessions = nullptr)
      : io_(io),
        settings_(settings),
        url_(url),
        tls_(tls),
        endpoints_(std::move(endpoints)),
        request_of_(std::move(request_of)),
        header_prefix_(std::move(header_prefix)),
        records_(records),
        counters_(counters),
        stop_(stop),
        sessions_(sessions),
        scheduler_(io),
        sweeper_(io),
        watchdog_(io),
        stop_poll_(io) {}

  // Open loop: `arrivals` are the scheduled offsets (with sessions: when each session starts;
  // its later turns follow their replies, up to `total` requests in all, 0 = no count bound).
  // Closed loop: `total` requests (0 = until the duration bound). Without `sessions` (null: the
  // single-turn run) request i's body is `request_of(i)`; with them each closed-loop slot runs
  // one session after another (session.h).
  void StartOpenLoop(Clock::time_point t0, const std::vector<int64_t>& arrivals,
                     int64_t total = 0);
  void StartClosedLoop(Clock::time_point t0, int64_t total, double duration_s);

  int64_t NowNs() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
  }
  asio::io_context& io() { return io_; }
  std::unique_ptr<Connection> NewConnection() {
    return std::make_unique<Connection>(io_, url_, tls_);
  }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  const LoadSettings& settings() const { return settings_; }

  void OnSent() {
    if (counters_) counters_->sent.fetch_add(1, std::memory_order_relaxed);
  }
  // An exchange is over; `conn` is handed back (null when it was closed). `reply` is the text
  // the server returned (kept only when the run has sessions).
  void OnExchangeDone(const RequestRecord& record, std::unique_ptr<Connection> conn, bool reusable,
                      std::string_view reply);
  // Whether the run ended because its stop flag was set.
  bool stopped() const { return stopped_; }

 private:
  void ScheduleNext();
  void OnSchedulerTimer(beast::error_code ec);
  void Issue(int64_t index);
  void Send(RequestRecord& record, PreparedRequest request);
  void IssueClosedLoop();
  // A new record at the end of the run (closed loop, and sessions' later turns), scheduled now.
  RequestRecord& NewRecord();
  // Whether the run's bounds allow one more request.
  bool BudgetLeft() const;
  // A request ended: continue its session or, in the closed loop, fill its slot.
  void AfterRequest(const RequestRecord& record, std::string_view reply);
  void IssueTurn(int64_t session);
  void ExtendWatchdog(Clock::time_point deadline);
  void CheckDone();
  void Acquire(std::shared_ptr<Exchange> exchange);
  void PumpWaiting();
  void ArmSweeper();
  void ExpireWaiting();
  void FinishUnsent(const std::shared_ptr<Exchange>& exchange);
  void CountFinished(const RequestRecord& record);
  void MaybeShutdown();
  void OnWatchdog(beast::error_code ec);
  void ArmStopPoll();
  // Ends the run now: every unfinished request is "cancelled", the event loop stops.
  void StopNow();

  asio::io_context& io_;
  const LoadSettings& settings_;
  const kvgate::http::Url& url_;
  const kvgate::http::TlsContext& tls_;
  tcp::resolver::results_type endpoints_;
  RequestSource request_of_;
  std::string header_prefix_;
  std::deque<RequestRecord>& records_;
  LiveCounters* counters_;
  const std::atomic<bool>* stop_;  // may be null
  Sessions* sessions_;             // null: single-turn run
  bool stopped_ = false;

  Clock::time_point t0_;
  const std::vector<int64_t>* arrivals_ = nullptr;
  bool open_loop_ = true;
  int64_t next_ = 0;   // next schedule slot to issue
  int64_t total_ = 0;  // closed loop: 0 = bounded by time only
  Clock::time_point issue_until_ = Clock::time_point::max();
  bool scheduling_done_ = false;
  int64_t outstanding_ = 0;  // issued and not yet finished
  int64_t thinking_ = 0;     // sessions pausing before their next turn
  bool shut_down_ = false;

  std::vector<std::unique_ptr<Connection>> idle_;
  int open_connections_ = 0;
  std::deque<std::shared_ptr<Exchange>> waiting_;
  bool sweeper_armed_ = false;

  asio::steady_timer scheduler_;
  asio::steady_timer sweeper_;
  asio::steady_timer watchdog_;
  asio::steady_timer stop_poll_;
};

}  // namespace kvgate::loadgen::internal
