// Session's connection side: reading a request (bounded header and body, one deadline),
// answering it with a plain response (or HEAD), noticing a client that leaves while its request
// is in flight, and closing (lingering after a framing error so the client reads the answer).
#include <sys/socket.h>

#include <cerrno>
#include <spdlog/spdlog.h>

#include "session.h"

namespace readkv::server::detail {

Session::Session(tcp::socket socket, Shared& shared)
    : stream_(std::move(socket)), shared_(shared) {
  shared_.connections.fetch_add(1);
}

Session::~Session() {
  // The engine must not keep generating for a connection that no longer exists.
  if (channel_) channel_->Cancel();
  shared_.connections.fetch_sub(1);
}

void Session::Start() {
  net::dispatch(stream_.get_executor(),
                beast::bind_front_handler(&Session::ReadHeader, shared_from_this()));
}

void Session::ReadHeader() {
  parser_.emplace();
  parser_->body_limit(shared_.options.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(shared_.options.max_header_bytes));
  // One deadline for the whole request: an idle keep-alive connection and a client that
  // trickles its request (slowloris) are both cut off.
  stream_.expires_after(shared_.options.idle_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
}

void Session::OnHeader(beast::error_code ec, std::size_t) {
  if (ec) return OnReadError(ec);
  if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
    // curl and others wait for this before sending a large body.
    auto interim = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                      parser_->get().version());
    stream_.expires_after(shared_.options.write_timeout);
    http::async_write(stream_, *interim,
                      [self = shared_from_this(), interim](beast::error_code wec, std::size_t) {
                        if (wec) return self->Close();
                        self->ReadBody();
                      });
    return;
  }
  ReadBody();
}

void Session::ReadBody() {
  stream_.expires_after(shared_.options.idle_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   beast::bind_front_handler(&Session::OnRead, shared_from_this()));
}

void Session::OnRead(beast::error_code ec, std::size_t) {
  if (ec) return OnReadError(ec);
  received_ = Clock::now();
  Request request = parser_->release();
  parser_.reset();
  Handle(request);
}

void Session::OnReadError(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == net::error::eof) return Close();
  if (ec == beast::error::timeout) {
    if (parser_ && parser_->got_some()) shared_.CountError("read_timeout");
    return Close();
  }
  version_ = 11;
  keep_alive_ = false;
  if (ec == http::error::body_limit) {
    return Fail(ApiError(413, "body_too_large",
                         "the request body is larger than " +
                             std::to_string(shared_.options.max_body_bytes) + " bytes"));
  }
  if (ec == http::error::header_limit) {
    return Fail(ApiError(431, "header_too_large",
                         "the request header is larger than " +
                             std::to_string(shared_.options.max_header_bytes) + " bytes"));
  }
  if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
      ec != http::error::partial_message) {
    return Fail(ApiError(400, "bad_http", "malformed HTTP request: " + ec.message()));
  }
  Close();  // the peer went away or reset the connection
}

void Session::WatchForDisconnect() {
  stream_.socket().async_wait(
      tcp::socket::wait_read,
      [self = shared_from_this(), generation = generation_](beast::error_code ec) {
        self->OnPeerReadable(ec, generation);
      });
}

void Session::OnPeerReadable(beast::error_code ec, uint64_t generation) {
  if (generation != generation_ || !channel_ || closed_) return;
  if (ec) {
    if (ec == net::error::operation_aborted) return;
    return ClientGone();
  }
  // Readable during a response means EOF, a reset, or a pipelined request (which stays in the
  // socket for the next read). EOF alone is a half-close: HTTP/1.1 lets a client shut down its
  // sending side and still read the answer, so the request goes on and the connection closes
  // after it; a client that really left is found by the next write, which then fails and
  // cancels the request (a streamed one at its next chunk). A reset is a client gone.
  char byte = 0;
  const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    keep_alive_ = false;
    // Nothing of Asio's holds this session now (no read or wait pending until the answer is
    // written): hold it ourselves, to the end of the request.
    half_closed_hold_ = shared_from_this();
    return;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return WatchForDisconnect();
    return ClientGone();
  }
}

// Drops the half-close hold, if any, without destroying the session inside its own call: the
// hold may be its last owner, so it is released from a posted handler.
void Session::ReleaseHold() {
  if (!half_closed_hold_) return;
  net::post(stream_.get_executor(), [hold = std::move(half_closed_hold_)] {});
}

void Session::ClientGone() {
  if (channel_) channel_->Cancel();  // the engine ends the sequence at its next step
  spdlog::info("{} client disconnected; cancelled", completion_id_);
  Close();
}

void Session::WriteFailed() {
  if (closed_) return;  // we closed it ourselves (client gone, shutdown)
  shared_.CountError("write_failed");
  if (channel_) channel_->Cancel();
  EndRequest();
  Close();
}

// The request is over (answered, cancelled or failed): later events and waits are stale.
void Session::EndRequest() {
  ++generation_;
  ReleaseHold();
  if (channel_) {
    channel_->Cancel();  // a no-op if it already finished
    channel_.reset();
  }
  in_flight_.reset();
  sse_header_.reset();
  sse_serializer_.reset();
  if (!closed_) {
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // the disconnect watch
  }
}

void Session::Fail(const ApiError& error, Headers headers) {
  shared_.CountError(error.code());
  Send(error, std::move(headers));
}

void Session::Send(const ApiError& error, Headers headers) {
  spdlog::info("HTTP {} {}: {}", error.status(), error.code(), error.what());
  SendBody(static_cast<http::status>(error.status()), error.Body(), "application/json",
           std::move(headers));
}

void Session::SendBody(http::status status, std::string body, const char* content_type,
                       Headers headers) {
  if (head_) return SendHead(status, body.size(), content_type, std::move(headers));
  auto response = std::make_shared<http::response<http::string_body>>(status, version_);
  response->set(http::field::server, "kvgate");
  response->set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) response->set(name, value);
  response->keep_alive(keep_alive_);
  response->body() = std::move(body);
  response->prepare_payload();
  Write(response);
}

// The answer to HEAD: the headers GET would have had, Content-Length included, and no body.
void Session::SendHead(http::status status, size_t body_bytes, const char* content_type,
                       Headers headers) {
  auto response = std::make_shared<http::response<http::empty_body>>(status, version_);
  response->set(http::field::server, "kvgate");
  response->set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) response->set(name, value);
  response->keep_alive(keep_alive_);
  response->content_length(body_bytes);
  Write(response);
}

template <class Response>
void Session::Write(std::shared_ptr<Response> response) {
  stream_.expires_after(shared_.options.write_timeout);
  http::async_write(stream_, *response,
                    [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
                      self->EndRequest();
                      if (ec) {
                        if (!self->closed_) self->shared_.CountError("write_failed");
                        return self->Close();
                      }
                      if (response->need_eof()) return self->LingerAndClose();
                      self->ReadHeader();
                    });
}

void Session::LingerAndClose() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(kLingerTime);
  lingered_ = 0;
  Discard();
}

void Session::Discard() {
  stream_.async_read_some(net::buffer(scratch_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                            self->lingered_ += n;
                            if (ec || self->lingered_ > kLingerBytes) return self->Close();
                            self->Discard();
                          });
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  ReleaseHold();
  if (channel_) channel_->Cancel();
  in_flight_.reset();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace readkv::server::detail
