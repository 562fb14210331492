// The client: one io_context on the calling thread runs the scheduler, a keep-alive connection
// pool and every request's state machine (connect → write → streamed read), so nothing needs a
// lock and a send is never delayed by a hand-off between threads.
#include "kvgate/loadgen/run_load.h"

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "http_target.h"
#include "thread_guards.h"
#include "token_sizer.h"
#include "kvgate/http/stream.h"
#include "kvgate/loadgen/schedule.h"
#include "kvgate/loadgen/sse.h"
#include "kvgate/secrets/redact.h"

namespace kvgate::loadgen {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Time from building the run to the schedule's time zero: enough for the event loop to start
// so that request 0 is not late by construction.
constexpr auto kLead = std::chrono::milliseconds(20);
// How much longer than the last request's deadline the run may take before the watchdog ends
// it (every operation already has a deadline; this only guards against a bug).
constexpr auto kWatchdogGrace = std::chrono::seconds(5);
// Error bodies and non-streamed responses are kept up to this size for the record.
constexpr size_t kMaxErrorBody = 512;
constexpr size_t kMaxPlainBody = size_t{64} << 20;

std::string Excerpt(std::string_view text, size_t max = 200) {
  std::string out(text.substr(0, max));
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text.size() > max ? out + "..." : out;
}

bool IsEventStream(std::string_view content_type) {
  constexpr std::string_view kWant = "text/event-stream";
  if (content_type.size() < kWant.size()) return false;
  for (size_t i = 0; i < kWant.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(content_type[i])) != kWant[i]) return false;
  }
  return true;
}

// Receives a response's header and body bytes as the Beast parser produces them.
class ResponseSink {
 public:
  virtual void OnHeader(unsigned status, std::string_view content_type) = 0;
  // Returns false to abort reading (the stream is already known to be bad).
  virtual bool OnBody(std::string_view bytes) = 0;

 protected:
  ~ResponseSink() = default;
};

// A Beast Body whose reader hands every body byte to a ResponseSink the moment it is parsed, so
// token chunks are timestamped on arrival and a body of any size streams through without being
// buffered whole. Beast builds the reader with the parser, before the header arrives; init() is
// the first call after the header is complete (it is not called for an empty body).
struct SinkBody {
  struct value_type {
    ResponseSink* sink = nullptr;
  };

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>& header, value_type& body)
        : header_(&header), notify_(&NotifyHeader<isRequest, Fields>), body_(body) {}
    void init(const boost::optional<std::uint64_t>&, beast::error_code& ec) {
      ec = {};
      notify_(header_, body_.sink);
    }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      ec = {};
      size_t total = 0;
      for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
           ++it) {
        asio::const_buffer b = *it;
        total += b.size();
        if (!body_.sink->OnBody(std::string_view(static_cast<const char*>(b.data()), b.size()))) {
          ec = boost::system::errc::make_error_code(boost::system::errc::bad_message);
          return total;
        }
      }
      return total;
    }
    void finish(beast::error_code& ec) { ec = {}; }

   private:
    template <bool isRequest, class Fields>
    static void NotifyHeader(const void* header, ResponseSink* sink) {
      if constexpr (!isRequest) {
        const auto& h = *static_cast<const http::header<false, Fields>*>(header);
        auto content_type = h[http::field::content_type];
        sink->OnHeader(h.result_int(), std::string_view(content_type.data(), content_type.size()));
      }
    }

    const void* header_;
    void (*notify_)(const void*, ResponseSink*);
    value_type& body_;
  };
};

struct Connection {
  Connection(asio::io_context& io, const kvgate::http::Url& url,
             const kvgate::http::TlsContext& tls)
      : stream(io, url, tls) {}
  kvgate::http::Stream stream;
  beast::flat_buffer buffer;
};

class Exchange;

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
      LiveCounters* counters, const std::atomic<bool>* stop)
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
        scheduler_(io),
        sweeper_(io),
        watchdog_(io),
        stop_poll_(io) {}

  // Open loop: `arrivals` are the scheduled offsets. Closed loop: `total` requests (0 = until
  // the duration bound).
  void StartOpenLoop(Clock::time_point t0, const std::vector<int64_t>& arrivals);
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
  // An exchange is over; `conn` is handed back (null when it was closed).
  void OnExchangeDone(const RequestRecord& record, std::unique_ptr<Connection> conn, bool reusable);
  // Whether the run ended because its stop flag was set.
  bool stopped() const { return stopped_; }

 private:
  void ScheduleNext();
  void OnSchedulerTimer(beast::error_code ec);
  void Issue(int64_t index);
  void IssueClosedLoop();
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
  bool stopped_ = false;

  Clock::time_point t0_;
  const std::vector<int64_t>* arrivals_ = nullptr;
  bool open_loop_ = true;
  int64_t next_ = 0;   // next schedule slot to issue
  int64_t total_ = 0;  // closed loop: 0 = bounded by time only
  Clock::time_point issue_until_ = Clock::time_point::max();
  bool scheduling_done_ = false;
  int64_t outstanding_ = 0;  // issued and not yet finished
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

class Exchange final : public std::enable_shared_from_this<Exchange>, public ResponseSink {
 public:
  Exchange(Run& run, RequestRecord& record, std::string header,
           std::shared_ptr<const std::string> body, Clock::time_point deadline)
      : run_(run),
        record_(record),
        header_(std::move(header)),
        body_(std::move(body)),
        deadline_(deadline),
        stream_(run.settings().stream) {}

  Clock::time_point deadline() const { return deadline_; }
  RequestRecord& record() { return record_; }

  void Begin(std::unique_ptr<Connection> conn, bool reused) {
    conn_ = std::move(conn);
    reused_ = reused;
    if (record_.issued_ns < 0) record_.issued_ns = run_.NowNs();
    if (reused) {
      Write();
    } else {
      Connect();
    }
  }

  // ResponseSink.
  void OnHeader(unsigned status, std::string_view content_type) override {
    status_ = status;
    content_type_ = std::string(content_type);
    if (status == 200) {
      if (stream_) sse_ok_ = IsEventStream(content_type);
      if (stream_ && sse_ok_) sse_.emplace();
    }
  }
  bool OnBody(std::string_view bytes) override {
    if (sse_) return sse_->Feed(bytes, run_.NowNs());
    size_t limit = status_ == 200 && !stream_ ? kMaxPlainBody : kMaxErrorBody;
    if (body_text_.size() < limit) {
      body_text_.append(bytes.substr(0, limit - body_text_.size()));
    }
    return true;
  }

 private:
  // Connect and, for https, the TLS handshake (both within the request's deadline).
  void Connect() {
    conn_->stream.tcp().expires_at(deadline_);
    conn_->stream.AsyncOpen(run_.endpoints(), [self = shared_from_this()](beast::error_code ec) {
      self->OnConnect(ec);
    });
  }

  void OnConnect(beast::error_code ec) {
    if (ec) {
      const char* cause = ec == beast::error::timeout              ? "timeout"
                          : conn_->stream.FailedInHandshake() ? "tls"
                                                                   : "connect";
      Fail(cause, conn_->stream.DescribeOpenError(ec));
      return;
    }
    beast::error_code ignored;
    conn_->stream.tcp().socket().set_option(tcp::no_delay(true), ignored);
    Write();
  }

  // Writes the request and reads the response at the same time: a server may answer (e.g. 413)
  // before it has read a large body, and that answer is the request's outcome, not the broken
  // pipe the rest of the write then meets.
  void Write() {
    conn_->stream.tcp().expires_at(deadline_);
    if (record_.sent_ns < 0) {
      // The write starts inside async_write (Asio tries the socket at once), so this is the
      // moment the first byte leaves: the send time the send lag is measured with.
      record_.sent_ns = run_.NowNs();
      run_.OnSent();
    }
    pending_ = 2;
    write_ec_ = {};
    read_ec_ = {};
    std::array<asio::const_buffer, 2> buffers{asio::buffer(header_), asio::buffer(*body_)};
    asio::async_write(
        conn_->stream, buffers,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWriteDone(ec); });
    parser_.emplace();
    // Long outputs are never cut by the client. (Not boost::none: Beast 1.74 compares a
    // Content-Length against the empty optional and rejects every body.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_->header_limit(64 * 1024);
    parser_->get().body().sink = this;
    http::async_read(
        conn_->stream, conn_->buffer, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnReadDone(ec); });
  }

  void OnWriteDone(beast::error_code ec) {
    write_ec_ = ec;
    if (--pending_ == 0) Complete();
  }

  void OnReadDone(beast::error_code ec) {
    read_ec_ = ec;
    read_done_ns_ = run_.NowNs();
    if (--pending_ > 0) {
      // The response is over but the server never took the whole body: stop writing.
      beast::error_code ignored;
      conn_->stream.tcp().socket().close(ignored);
      write_ec_ = asio::error::operation_aborted;
      return;
    }
    Complete();
  }

  void Complete() {
    const bool write_failed = write_ec_ && write_ec_ != asio::error::operation_aborted;
    beast::error_code ec = read_ec_ ? read_ec_ : write_failed ? write_ec_ : beast::error_code{};
    if (ec && TryRetry(ec)) return;
    Finish(ec, write_failed && !read_ec_ ? "write" : "read", /*reusable_ok=*/!write_ec_);
  }

  // A pooled connection the server already closed (idle keep-alive timeout) fails before any
  // response byte; that is the pool's fault, not the request's, so it is retried once on a fresh
  // connection. Nothing was processed: no response byte came back.
  bool TryRetry(beast::error_code ec) {
    if (!reused_ || retried_ || ec == beast::error::timeout) return false;
    if (parser_ && parser_->got_some()) return false;
    retried_ = true;
    conn_->stream.Close();
    conn_ = run_.NewConnection();
    reused_ = false;
    parser_.reset();
    sse_.reset();
    status_ = 0;
    body_text_.clear();
    Connect();
    return true;
  }

  void Finish(beast::error_code ec, std::string_view stage, bool reusable_ok) {
    const int64_t now = read_done_ns_;
    CopyStreamFacts();
    if (parser_ && parser_->is_header_done()) {
      status_ = parser_->get().result_int();  // also when the body was empty (no init())
      record_.http_status = static_cast<int>(status_);
    }
    if (sse_ && sse_->malformed()) {
      Fail("malformed_sse", sse_->malformed_reason());
      return;
    }
    if (sse_ && sse_->stream_error()) {
      Fail("stream_error", sse_->stream_error_message());
      return;
    }
    if (ec) {
      // A stream that said [DONE] is complete even if the connection then broke.
      if (sse_ && sse_->done() && ec != beast::error::timeout) {
        Succeed(now, /*reusable=*/false);
        return;
      }
      if (status_ >= 400 && ec != beast::error::timeout) {
        FailStatus();
        return;
      }
      FailTransport(ec, stage);
      return;
    }
    if (status_ != 200) {
      FailStatus();
      return;
    }
    bool reusable = reusable_ok && parser_->is_done() && parser_->get().keep_alive();
    if (!stream_) {
      SucceedPlain(now, reusable);
      return;
    }
    if (!sse_ok_) {
      Fail("malformed_sse", "Content-Type is '" + content_type_ +
                                "', expected text/event-stream; body: " + Excerpt(body_text_));
      return;
    }
    if (!sse_->done()) {
      Fail("incomplete", "stream ended without data: [DONE] after " +
                             std::to_string(sse_->token_chunk_ns().size()) + " token chunks");
      return;
    }
    Succeed(now, reusable);
  }

  void CopyStreamFacts() {
    if (!sse_) return;
    record_.chunk_ns = sse_->token_chunk_ns();
    if (!record_.chunk_ns.empty()) record_.first_token_ns = record_.chunk_ns.front();
    record_.prompt_tokens = sse_->prompt_tokens();
    record_.completion_tokens = sse_->completion_tokens();
  }

  void Succeed(int64_t now, bool reusable) {
    // E2E ends at the stream's last event ([DONE]), as docs/definitions.md says.
    record_.end_ns = sse_->done_ns() >= 0 ? sse_->done_ns() : now;
    Done(reusable);
  }

  void SucceedPlain(int64_t now, bool reusable) {
    record_.end_ns = now;
    nlohmann::json json = nlohmann::json::parse(body_text_, nullptr, false);
    if (json.is_discarded() || !json.is_object() || !json.contains("choices") ||
        !json["choices"].is_array()) {
      Fail("malformed_response",
           "not an OpenAI completions or chat response: " + Excerpt(body_text_));
      return;
    }
    const auto& choices = json["choices"];
    // Completions answer in choices[0].text, chat in choices[0].message.content.
    auto non_empty_string = [](const nlohmann::json& object, const char* key) {
      return object.is_object() && object.contains(key) && object[key].is_string() &&
             !object[key].get_ref<const std::string&>().empty();
    };
    if (!choices.empty() &&
        (non_empty_string(choices[0], "text") ||
         (choices[0].is_object() && choices[0].contains("message") &&
          non_empty_string(choices[0]["message"], "content")))) {
      // Without streaming the whole output arrives at once: TTFT = E2E.
      record_.chunk_ns = {now};
      record_.first_token_ns = now;
    }
    if (json.contains("usage") && json["usage"].is_object()) {
      const auto& usage = json["usage"];
      if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer()) {
        record_.prompt_tokens = usage["prompt_tokens"].get<int>();
      }
      if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer()) {
        record_.completion_tokens = usage["completion_tokens"].get<int>();
      }
    }
    Done(reusable);
  }

  void FailStatus() {
    std::string cause = status_ >= 500 ? "http_5xx" : status_ >= 400 ? "http_4xx" : "http_other";
    Fail(cause, "HTTP " + std::to_string(status_) + ": " + Excerpt(body_text_));
  }

  void FailTransport(beast::error_code ec, std::string_view stage) {
    std::string cause;
    // Any code of Beast's HTTP category (kept as a code: g++ 13 flags a reference to the category
    // of a temporary code as possibly dangling, though categories are static).
    static const beast::error_code http_code = http::make_error_code(http::error::end_of_stream);
    if (ec == beast::error::timeout) {
      cause = "timeout";
    } else if (ec.category() == http_code.category() && ec != http::error::end_of_stream &&
               ec != http::error::partial_message) {
      cause = "http_protocol";
    } else {
      // EOF, connection reset, broken pipe, or a message cut short.
      cause = "reset";
    }
    std::string where(stage);
    if (stage == "read") {
      where +=
          parser_ && parser_->is_header_done()
              ? " (after the header, " + std::to_string(record_.chunk_ns.size()) + " token chunks)"
              : " (before a response)";
    }
    Fail(cause, where + ": " + ec.message());
  }

  void Fail(std::string cause, std::string text) {
    record_.error_cause = std::move(cause);
    record_.error_text = std::move(text);
    if (record_.end_ns < 0) record_.end_ns = run_.NowNs();
    Done(/*reusable=*/false);
  }

  void Done(bool reusable) {
    if (!reusable && conn_) {
      conn_->stream.Close();
      conn_.reset();
    }
    run_.OnExchangeDone(record_, std::move(conn_), reusable);
  }

  Run& run_;
  RequestRecord& record_;
  std::string header_;
  std::shared_ptr<const std::string> body_;
  Clock::time_point deadline_;
  bool stream_;
  std::unique_ptr<Connection> conn_;
  bool reused_ = false;
  bool retried_ = false;
  int pending_ = 0;  // of the concurrent write and read
  beast::error_code write_ec_;
  beast::error_code read_ec_;
  int64_t read_done_ns_ = -1;
  std::optional<http::response_parser<SinkBody>> parser_;
  unsigned status_ = 0;
  std::string content_type_;
  bool sse_ok_ = false;
  std::optional<CompletionStream> sse_;
  std::string body_text_;
};

void Run::StartOpenLoop(Clock::time_point t0, const std::vector<int64_t>& arrivals) {
  t0_ = t0;
  arrivals_ = &arrivals;
  open_loop_ = true;
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
    if (outstanding_ == 0) {
      scheduling_done_ = true;
      MaybeShutdown();
    }
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
  ++outstanding_;
  PreparedRequest request = request_of_(index);
  record.max_tokens = request.max_tokens;
  auto& body = request.body;
  auto deadline = t0_ + std::chrono::nanoseconds(record.scheduled_ns) +
                  std::chrono::nanoseconds(static_cast<int64_t>(settings_.request_timeout_s * 1e9));
  auto exchange = std::make_shared<Exchange>(
      *this, record, internal::RenderHeader(header_prefix_, index, body->size()), std::move(body),
      deadline);
  Acquire(std::move(exchange));
}

void Run::IssueClosedLoop() {
  if (shut_down_) return;
  if ((total_ > 0 && next_ >= total_) || Clock::now() >= issue_until_) return;
  const int64_t index = next_++;
  if (static_cast<int64_t>(records_.size()) <= index) records_.emplace_back();
  RequestRecord& record = records_[static_cast<size_t>(index)];
  record.index = index;
  record.warmup = index < settings_.warmup_requests;
  // Closed loop has no schedule: a request is "scheduled" when a slot frees up for it.
  record.scheduled_ns = NowNs();
  Issue(index);
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
                         bool reusable) {
  if (conn && reusable && !shut_down_) {
    idle_.push_back(std::move(conn));
  } else {
    --open_connections_;
  }
  CountFinished(record);
  PumpWaiting();
  if (!open_loop_) IssueClosedLoop();
  if (!open_loop_ && outstanding_ == 0 && waiting_.empty()) scheduling_done_ = true;
  MaybeShutdown();
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
  if (!open_loop_) IssueClosedLoop();
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
  if (!open_loop_ && outstanding_ == 0 && waiting_.empty()) scheduling_done_ = true;
  MaybeShutdown();
}

void Run::MaybeShutdown() {
  if (shut_down_ || !scheduling_done_ || outstanding_ > 0) return;
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

}  // namespace

LoadResult RunLoad(const LoadSettings& settings_in, const Target& target, LiveCounters* counters,
                   const std::atomic<bool>* stop) {
  LoadSettings settings = settings_in;
  ValidateSettings(settings);
  if (settings.requests == 0 && settings.duration_s == 0) {
    settings.requests = LoadSettings::kDefaultRequests;
  }
  const kvgate::http::Url url = internal::ParseTargetUrl(target);
  std::optional<kvgate::http::TlsContext> tls;
  tcp::resolver::results_type endpoints;
  try {
    tls.emplace(url, target.client);
    endpoints = kvgate::http::Resolve(url);
  } catch (const kvgate::http::ConfigError& e) {
    throw TargetError(std::string("--") + e.field() + " " + e.what());
  }
  const std::string model = target.model.empty() ? DiscoverModel(target) : target.model;
  Workload workload = Workload::Create(settings.workload, settings.seed);

  LoadResult result;
  result.url = secrets::RedactUrl(target.url);  // recorded and printed: never a secret
  result.model = model;
  result.endpoint = std::string(kvgate::http::EndpointName(target.endpoint));
  result.connection = kvgate::http::Describe(url, target.client);
  result.tls_verification_off = kvgate::http::VerificationOff(url, target.client);

  std::vector<int64_t> arrivals;
  int64_t planned = settings.requests;  // 0 = closed loop bounded by time only
  if (settings.mode == LoadMode::kOpenLoop) {
    arrivals = GenerateArrivals(settings.arrival, settings.rate_rps, settings.burstiness,
                                settings.seed, settings.requests, settings.duration_s);
    planned = static_cast<int64_t>(arrivals.size());
    if (planned == 0) throw SettingsError("duration", "the schedule holds no request");
  }
  if (planned > 0 && settings.warmup_requests >= planned) {
    throw SettingsError("warmup",
                        "all " + std::to_string(planned) + " scheduled requests would be warmup");
  }

  // Token-true lengths: each synthetic prompt cut to its token target through /tokenize, before
  // the run (never inside the event loop), so a closed loop bounded only by time cannot use it.
  std::optional<internal::TokenSizer> sizer;
  int64_t fitted = 0, exact = 0;
  if (settings.workload.input_unit == InputUnit::kTokens) {
    if (planned == 0) {
      throw SettingsError("input-unit",
                          "tokens sizes prompts before the run: give --requests (a closed loop "
                          "bounded only by --duration renders its prompts as it goes)");
    }
    sizer.emplace(url, target, model);
    if (!sizer->Available()) {
      sizer.reset();
      result.input_lengths =
          "words (approximate): tokens were asked for, but the server has no POST /tokenize";
    }
  }

  // Bodies are rendered before the run when the count is known, so sending costs no JSON work;
  // a closed loop bounded only by time renders them as it goes (its schedule is its pace).
  const int64_t distinct = settings.workload.distinct_prompts;
  auto render = [&](int64_t index) {
    RequestSpec spec = workload.At(index);
    if (sizer) {
      internal::TokenSizer::Fitted fit =
          sizer->Fit(spec.prompt.get<std::string>(), spec.input_length,
                     DeriveSeed(settings.seed, 0x70c6, static_cast<uint64_t>(index)));
      spec.prompt = std::move(fit.text);
      ++fitted;
      exact += fit.exact;
    }
    return PreparedRequest{
        std::make_shared<const std::string>(
            internal::RenderBody(model, spec, settings, target.endpoint)),
        spec.max_tokens};
  };
  std::vector<PreparedRequest> prepared;
  if (planned > 0) {
    prepared.resize(static_cast<size_t>(planned));
    int64_t bytes = 0;
    for (int64_t i = 0; i < planned; ++i) {
      if (distinct > 0 && i >= distinct) {
        prepared[static_cast<size_t>(i)] = prepared[static_cast<size_t>(i % distinct)];
        continue;
      }
      prepared[static_cast<size_t>(i)] = render(i);
      bytes += static_cast<int64_t>(prepared[static_cast<size_t>(i)].body->size());
      if (bytes > settings.max_schedule_bytes) {
        throw SettingsError("max-schedule-bytes",
                            "the request bodies exceed " +
                                std::to_string(settings.max_schedule_bytes) +
                                " bytes; use fewer requests, shorter prompts or distinct_prompts");
      }
    }
  }
  if (sizer) {
    result.input_tokens_exact = exact == fitted;
    result.input_lengths = "tokens, exact for " + std::to_string(exact) + "/" +
                           std::to_string(fitted) + " prompts (server /tokenize, " +
                           std::to_string(sizer->calls()) + " calls)";
  }
  RequestSource request_of = [&](int64_t index) -> PreparedRequest {
    if (index < static_cast<int64_t>(prepared.size()) &&
        prepared[static_cast<size_t>(index)].body) {
      return prepared[static_cast<size_t>(index)];
    }
    if (distinct > 0) {
      // Closed loop bounded by time: render each distinct request once and reuse it.
      if (static_cast<int64_t>(prepared.size()) < distinct) {
        prepared.resize(static_cast<size_t>(distinct));
      }
      PreparedRequest& slot = prepared[static_cast<size_t>(index % distinct)];
      if (!slot.body) slot = render(index % distinct);
      return slot;
    }
    return render(index);
  };

  std::deque<RequestRecord> records;
  if (settings.mode == LoadMode::kOpenLoop) {
    for (int64_t i = 0; i < planned; ++i) {
      RequestRecord& record = records.emplace_back();
      record.index = i;
      record.warmup = i < settings.warmup_requests;
      record.scheduled_ns = arrivals[static_cast<size_t>(i)];
    }
  }
  if (counters) {
    counters->total.store(planned, std::memory_order_relaxed);
    counters->sent.store(0, std::memory_order_relaxed);
    counters->finished.store(0, std::memory_order_relaxed);
    counters->errored.store(0, std::memory_order_relaxed);
  }

  {
    internal::TimerSlackGuard slack;
    internal::RealtimePriorityGuard priority(settings.realtime_priority);
    asio::io_context io(1);
    Run run(io, settings, url, *tls, endpoints, request_of,
            internal::RenderHeaderPrefix(url, target, settings.stream), records, counters, stop);
    const Clock::time_point t0 = Clock::now() + kLead;
    result.start_steady_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
    result.start_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               (std::chrono::system_clock::now() + kLead).time_since_epoch())
                               .count();
    if (settings.mode == LoadMode::kOpenLoop) {
      run.StartOpenLoop(t0, arrivals);
    } else {
      run.StartClosedLoop(t0, settings.requests, settings.duration_s);
    }
    io.run();
    result.stopped = run.stopped();
  }

  result.records.reserve(records.size());
  for (RequestRecord& record : records) result.records.push_back(std::move(record));
  result.settings = settings;
  result.summary = Summarize(result.records, settings.slo, MeasuredDurationSeconds(result.records));
  result.validity = CheckValidity(result.records, settings.mode, settings.validity);
  if (result.stopped) {
    int64_t cancelled = 0;
    for (const RequestRecord& record : result.records) {
      cancelled += record.error_cause == "cancelled";
    }
    result.validity.valid = false;
    result.validity.reasons.insert(result.validity.reasons.begin(),
                                   "stopped by request before the run ended (" +
                                       std::to_string(cancelled) + " requests cancelled)");
  }
  return result;
}

}  // namespace kvgate::loadgen
