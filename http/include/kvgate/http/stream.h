// kvgate::http — one client connection, plain TCP or TLS over TCP, behind one type, so the load
// generator's event loop and the checks' blocking client share the connect / handshake / error
// code. See client_config.h for the settings' contract and README.md for the design.
//
// Contract:
// - Stream is a Beast AsyncReadStream and AsyncWriteStream (http::async_read/async_write and
//   asio::async_write work on it). Deadlines are set on tcp() (beast::tcp_stream::expires_at) and
//   bound every operation, the TLS handshake included.
// - AsyncOpen connects to the first reachable endpoint and, for https, runs the TLS handshake with
//   SNI and host-name verification as the TlsContext says; its handler gets one error_code.
// - DescribeOpenError() turns a failed open into a message a user can act on: "cannot connect to
//   127.0.0.1:8443: Connection refused", "TLS handshake with host:443 failed: certificate verify
//   failed (self-signed certificate) ...". Never a secret (the URL's host and port only).
// - Thread-safety: a Stream belongs to one io_context and is used from its thread only. A
//   TlsContext is immutable after construction and may be shared by any number of Streams.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kvgate/http/client_config.h"

namespace kvgate::http {

// The TLS client settings of one target: trust (system CAs or ca_file), verification on unless
// config.insecure. Throws ConfigError("cacert", ...) when the CA file cannot be read or holds no
// certificate. For an http:// URL it is empty (get() == nullptr) and costs nothing.
class TlsContext {
 public:
  TlsContext(const Url& url, const ClientConfig& config);
  boost::asio::ssl::context* get() const { return context_.get(); }
  bool verify() const { return verify_; }

 private:
  std::shared_ptr<boost::asio::ssl::context> context_;
  bool verify_ = true;
};

// Resolves url.host:url.port; throws ConfigError("url", "cannot resolve 'host:port': ...").
boost::asio::ip::tcp::resolver::results_type Resolve(const Url& url);

class Stream {
 public:
  using executor_type = boost::beast::tcp_stream::executor_type;

  // `tls` must outlive the Stream; plain TCP when tls.get() is null.
  Stream(boost::asio::io_context& io, const Url& url, const TlsContext& tls);
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The TCP layer: deadlines (expires_at / expires_after) and socket options.
  boost::beast::tcp_stream& tcp() { return tls_ ? tls_->next_layer() : *plain_; }
  executor_type get_executor() { return tcp().get_executor(); }
  bool tls() const { return tls_.has_value(); }

  template <class MutableBufferSequence, class ReadHandler>
  auto async_read_some(const MutableBufferSequence& buffers, ReadHandler&& handler) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<ReadHandler>(handler));
    return plain_->async_read_some(buffers, std::forward<ReadHandler>(handler));
  }
  template <class ConstBufferSequence, class WriteHandler>
  auto async_write_some(const ConstBufferSequence& buffers, WriteHandler&& handler) {
    if (tls_) return tls_->async_write_some(buffers, std::forward<WriteHandler>(handler));
    return plain_->async_write_some(buffers, std::forward<WriteHandler>(handler));
  }

  // Connect (to the first endpoint that accepts), then for https the TLS handshake.
  // handler(boost::system::error_code); a failure is explained by DescribeOpenError.
  template <class Handler>
  void AsyncOpen(const boost::asio::ip::tcp::resolver::results_type& endpoints, Handler handler) {
    stage_ = Stage::kConnect;
    tcp().async_connect(endpoints, [this, handler = std::move(handler)](
                                       boost::system::error_code ec,
                                       const boost::asio::ip::tcp::endpoint&) mutable {
      if (ec || !tls_) {
        if (!ec) stage_ = Stage::kOpen;
        handler(ec);
        return;
      }
      boost::system::error_code ignored;
      tcp().socket().set_option(boost::asio::ip::tcp::no_delay(true), ignored);
      stage_ = Stage::kHandshake;
      tls_->async_handshake(boost::asio::ssl::stream_base::client,
                            [this, handler = std::move(handler)](
                                boost::system::error_code hec) mutable {
                              if (!hec) stage_ = Stage::kOpen;
                              handler(hec);
                            });
    });
  }

  // What went wrong in AsyncOpen, for a person: names host:port and, for TLS, the certificate
  // verification result ("certificate verify failed (self-signed certificate)").
  std::string DescribeOpenError(const boost::system::error_code& ec);
  // Whether a failed open failed in the TLS handshake (the load generator's "tls" cause).
  bool FailedInHandshake() const { return stage_ == Stage::kHandshake; }

  // Closes the socket (no TLS close_notify: the connection is done either way).
  void Close();

 private:
  enum class Stage { kConnect, kHandshake, kOpen };
  Url url_;
  std::optional<boost::beast::tcp_stream> plain_;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls_;
  Stage stage_ = Stage::kConnect;
};

}  // namespace kvgate::http
