// One request/response exchange (exchange.h): the Beast body that streams response bytes to the
// SSE parser as they are parsed, and the request's state machine from connect to its record.
#include "exchange.h"

#include <array>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "kvgate/loadgen/sse.h"

namespace kvgate::loadgen::internal {
namespace {

namespace http = beast::http;

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

class HttpExchange final : public Exchange,
                           public std::enable_shared_from_this<HttpExchange>,
                           public ResponseSink {
 public:
  HttpExchange(Run& run, RequestRecord& record, std::string header,
           std::shared_ptr<const std::string> body, Clock::time_point deadline, bool keep_reply)
      : run_(run),
        record_(record),
        header_(std::move(header)),
        body_(std::move(body)),
        deadline_(deadline),
        stream_(run.settings().stream),
        keep_reply_(keep_reply) {}

  Clock::time_point deadline() const override { return deadline_; }
  RequestRecord& record() override { return record_; }

  void Begin(std::unique_ptr<Connection> conn, bool reused) override {
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
      if (stream_ && sse_ok_) {
        sse_.emplace();
        sse_->set_keep_text(keep_reply_);
      }
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
    const bool text = !choices.empty() && non_empty_string(choices[0], "text");
    const bool content = !choices.empty() && choices[0].is_object() &&
                         choices[0].contains("message") &&
                         non_empty_string(choices[0]["message"], "content");
    if (text || content) {
      // Without streaming the whole output arrives at once: TTFT = E2E.
      record_.chunk_ns = {now};
      record_.first_token_ns = now;
      if (keep_reply_) {
        reply_ = text ? choices[0]["text"].get<std::string>()
                      : choices[0]["message"]["content"].get<std::string>();
      }
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
    const std::string& reply = sse_ && record_.ok() ? sse_->text() : reply_;
    run_.OnExchangeDone(record_, std::move(conn_), reusable, reply);
  }

  Run& run_;
  RequestRecord& record_;
  std::string header_;
  std::shared_ptr<const std::string> body_;
  Clock::time_point deadline_;
  bool stream_;
  bool keep_reply_;
  std::string reply_;  // non-streamed reply text, when kept
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

}  // namespace

std::shared_ptr<Exchange> Exchange::Create(Run& run, RequestRecord& record, std::string header,
                                           std::shared_ptr<const std::string> body,
                                           Clock::time_point deadline, bool keep_reply) {
  return std::make_shared<HttpExchange>(run, record, std::move(header), std::move(body), deadline,
                                        keep_reply);
}

}  // namespace kvgate::loadgen::internal
