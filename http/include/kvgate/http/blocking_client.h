// kvgate::http — a blocking HTTP/1.1 client over one kept-alive connection (plain or TLS), for
// callers that send one request at a time per thread (the quality checks, model discovery,
// /tokenize, /metrics scrapes).
//
// Contract:
// - Each connection owns its io_context and runs one asynchronous operation at a time to
//   completion: that gives a plain request/response loop real deadlines (connect + handshake
//   within connect_timeout; write + read of the whole answer within request_timeout).
// - Send() returns any HTTP answer (every status is a response, not an error). It throws
//   TransportError only when no complete answer arrived; the message names host:port and what
//   failed (connection refused, certificate verify failed with the reason, timed out after N ms).
// - A kept-alive connection that the server closed meanwhile is reopened once, transparently.
// - MakeRequest() puts the config's Authorization and extra headers on a request; nothing here
//   ever writes the key anywhere else.
// Thread-safety: one BlockingConnection per thread; TlsContext may be shared.
#pragma once

#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "kvgate/http/client_config.h"
#include "kvgate/http/stream.h"

namespace kvgate::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

// No (complete) HTTP answer arrived. what() is for a person and names host:port.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request for url.prefix + path with Host, User-Agent, keep-alive, and the config's
// Authorization and extra headers set.
Request MakeRequest(const Url& url, const ClientConfig& config, boost::beast::http::verb verb,
                    const std::string& path, const std::string& user_agent);

// The OpenAI error shape {"error": {"message": ...}} when present, else the start of the body.
std::string ErrorText(const std::string& body);

class BlockingConnection {
 public:
  BlockingConnection(const Url& url, const TlsContext& tls,
                     std::chrono::milliseconds connect_timeout,
                     std::chrono::milliseconds request_timeout, uint64_t max_body);
  BlockingConnection(const BlockingConnection&) = delete;
  BlockingConnection& operator=(const BlockingConnection&) = delete;
  ~BlockingConnection();

  // Throws TransportError.
  Response Send(Request& request);

 private:
  void Run();
  void Connect();
  void Close();

  Url url_;
  const TlsContext& tls_;
  std::chrono::milliseconds connect_timeout_;
  std::chrono::milliseconds request_timeout_;
  uint64_t max_body_;
  boost::asio::io_context ioc_;
  std::unique_ptr<Stream> stream_;
  boost::beast::flat_buffer buffer_;
};

// One request on a fresh connection (connect + answer within `timeout`): GET when body is
// empty, else POST with a JSON body. Throws ConfigError for a bad URL or CA file and
// TransportError when no answer arrived.
Response Fetch(const Url& url, const ClientConfig& config, const std::string& path,
               const std::string& json_body, std::chrono::milliseconds timeout,
               const std::string& user_agent);

}  // namespace kvgate::http
