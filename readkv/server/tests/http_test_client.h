// A small blocking HTTP/1.1 client for the server's integration tests (Boost.Beast over a real
// socket to 127.0.0.1). Every read is bounded by a socket timeout so a broken server fails the
// test instead of hanging it.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace readkv::server::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpResult {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool keep_alive = false;

  nlohmann::json Json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// One keep-alive connection.
class HttpConnection {
 public:
  explicit HttpConnection(uint16_t port,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }

  // Sends one request and reads the whole response. Throws on a socket error.
  HttpResult Request(http::verb method, const std::string& target, const std::string& body = "",
                     const std::map<std::string, std::string>& headers = {}) {
    SendRequest(method, target, body, headers);
    return ReadResponse();
  }

  HttpResult Post(const std::string& target, const nlohmann::json& body) {
    return Request(http::verb::post, target, body.dump());
  }
  HttpResult Get(const std::string& target) { return Request(http::verb::get, target); }

  void SendRequest(http::verb method, const std::string& target, const std::string& body = "",
                   const std::map<std::string, std::string>& headers = {}) {
    http::request<http::string_body> request{method, target, 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = body;
    request.prepare_payload();
    http::write(socket_, request);
  }

  void SendRaw(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }

  HttpResult ReadResponse() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read(socket_, buffer_, parser);
    return ToResult(parser.release());
  }

  // The response to a HEAD: header only, whatever Content-Length says (RFC 9110 9.3.2).
  HttpResult ReadHeadResponse() {
    http::response_parser<http::string_body> parser;
    parser.skip(true);
    http::read(socket_, buffer_, parser);
    return ToResult(parser.release());
  }

  // Streaming: reads the header, then returns body bytes as they arrive.
  void BeginStream() {
    stream_parser_.emplace();
    stream_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(socket_, buffer_, *stream_parser_);
  }
  int stream_status() const { return stream_parser_->get().result_int(); }
  std::string stream_header(const std::string& name) const {
    return std::string(stream_parser_->get()[name]);
  }
  // Reads until the body holds `needle` or the message ends; returns the body so far.
  std::string ReadStreamUntil(const std::string& needle) {
    beast::error_code ec;
    while (!stream_parser_->is_done() &&
           stream_parser_->get().body().find(needle) == std::string::npos) {
      http::read_some(socket_, buffer_, *stream_parser_, ec);
      if (ec) break;
    }
    return stream_parser_->get().body();
  }
  bool stream_done() const { return stream_parser_->is_done(); }

  // True if the server closed the connection (EOF) within the socket timeout.
  bool ServerClosed() {
    char byte;
    beast::error_code ec;
    socket_.read_some(net::buffer(&byte, 1), ec);
    return ec == net::error::eof || ec == net::error::connection_reset;
  }

  void Close() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  // A client that aborts: the close resets the connection (SO_LINGER 0) instead of a FIN.
  void Abort() {
    beast::error_code ec;
    socket_.set_option(net::socket_base::linger(true, 0), ec);
    socket_.close(ec);
  }

  // A half-close: no more bytes from this side, the answer may still come.
  void ShutdownSend() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
  }

  // Bytes buffered but not yet parsed (what a response left over on the connection).
  size_t Buffered() const { return buffer_.size(); }

 private:
  static HttpResult ToResult(http::response<http::string_body> response) {
    HttpResult out;
    out.status = response.result_int();
    for (const auto& field : response) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(field.value());
    }
    out.keep_alive = response.keep_alive();
    out.body = std::move(response.body());
    return out;
  }

  net::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> stream_parser_;
};

// The `data:` payloads of an SSE body, in order.
inline std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

// Waits (bounded) for a condition the server reaches asynchronously; true once it holds.
template <typename Predicate>
bool Eventually(Predicate predicate,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return predicate();
}

}  // namespace readkv::server::testing
