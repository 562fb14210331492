// A tiny real HTTP/1.1 server for the checks' tests: it binds 127.0.0.1:0, serves keep-alive
// connections (one thread each) and answers every request from a scripted handler. It plays an
// outside OpenAI-compatible endpoint with known answers, so the client, the scoring and the
// ledger scraping are exercised over real sockets. Test-only; header-only.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvgate::checks::testing {

struct ScriptedReply {
  ScriptedReply() = default;
  ScriptedReply(int status_code, std::string body_text, std::string type = "application/json")
      : status(status_code), body(std::move(body_text)), content_type(std::move(type)) {}

  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::map<std::string, std::string> headers;
  bool close = false;                  // answer with Connection: close and hang up
  std::chrono::milliseconds delay{0};  // wait this long before answering
};

struct ScriptedRequest {
  std::string method;
  std::string target;
  std::string body;
};

class ScriptedServer {
 public:
  using Handler = std::function<ScriptedReply(const ScriptedRequest&)>;

  explicit ScriptedServer(Handler handler)
      : handler_(std::move(handler)),
        acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  ~ScriptedServer() {
    stopping_ = true;
    // Wake the blocking accept with one last connection, then hang up every open connection.
    try {
      boost::asio::io_context ioc;
      boost::asio::ip::tcp::socket wake(ioc);
      wake.connect({boost::asio::ip::make_address("127.0.0.1"), port_});
    } catch (const std::exception&) {
    }
    accept_thread_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The sockets stay open (owned here) until the server is gone, so these fds are still ours.
      for (const auto& socket : sockets_) ::shutdown(socket->native_handle(), SHUT_RDWR);
    }
    for (std::thread& thread : connection_threads_) thread.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  int connections() const { return connections_; }
  int requests() const { return requests_; }

 private:
  void AcceptLoop() {
    while (true) {
      auto socket = std::make_shared<boost::asio::ip::tcp::socket>(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(*socket, ec);
      if (stopping_) return;
      if (ec) continue;
      ++connections_;
      std::lock_guard<std::mutex> lock(mutex_);
      sockets_.push_back(socket);
      connection_threads_.emplace_back([this, socket] { Serve(*socket); });
    }
  }

  void Serve(boost::asio::ip::tcp::socket& socket) {
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> request;
      boost::system::error_code ec;
      http::read(socket, buffer, request, ec);
      if (ec) break;
      ++requests_;
      ScriptedReply reply = handler_(ScriptedRequest{
          std::string(request.method_string()), std::string(request.target()), request.body()});
      if (reply.delay.count() > 0) std::this_thread::sleep_for(reply.delay);
      http::response<http::string_body> response{static_cast<http::status>(reply.status),
                                                 request.version()};
      response.set(http::field::content_type, reply.content_type);
      for (const auto& [name, value] : reply.headers) response.set(name, value);
      response.keep_alive(request.keep_alive() && !reply.close);
      response.body() = reply.body;
      response.prepare_payload();
      http::write(socket, response, ec);
      if (ec || !response.keep_alive()) break;
    }
    boost::system::error_code ignored;
    socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  }

  Handler handler_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::thread accept_thread_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<boost::asio::ip::tcp::socket>> sockets_;
  std::vector<std::thread> connection_threads_;
};

// A port on 127.0.0.1 with nothing listening (bound, then released).
inline int UnusedPort() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor acceptor(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

}  // namespace kvgate::checks::testing
