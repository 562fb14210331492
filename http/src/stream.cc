#include "kvgate/http/stream.h"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl/error.hpp>
#include <fstream>

namespace kvgate::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

TlsContext::TlsContext(const Url& url, const ClientConfig& config) : verify_(!config.insecure) {
  if (!url.tls()) return;
  context_ = std::make_shared<ssl::context>(ssl::context::tls_client);
  context_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                        ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                        ssl::context::no_tlsv1_1);
  if (config.insecure) {
    context_->set_verify_mode(ssl::verify_none);
    return;
  }
  boost::system::error_code ec;
  if (!config.ca_file.empty()) {
    if (!std::ifstream(config.ca_file)) {
      throw ConfigError("cacert", "--cacert '" + config.ca_file + "': cannot open the file");
    }
    context_->load_verify_file(config.ca_file, ec);
    if (ec) {
      throw ConfigError("cacert", "--cacert '" + config.ca_file +
                                      "': not a PEM certificate file (" + ec.message() + ")");
    }
  } else {
    context_->set_default_verify_paths(ec);
    if (ec) {
      throw ConfigError("cacert", "cannot load the system's CA certificates (" + ec.message() +
                                      "); pass --cacert FILE");
    }
  }
  context_->set_verify_mode(ssl::verify_peer);
}

tcp::resolver::results_type Resolve(const Url& url) {
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(url.host, url.port, ec);
  if (ec || results.empty()) {
    throw ConfigError("url", "cannot resolve '" + url.HostPort() + "': " + ec.message());
  }
  return results;
}

Stream::Stream(asio::io_context& io, const Url& url, const TlsContext& tls) : url_(url) {
  if (tls.get() == nullptr) {
    plain_.emplace(io);
    return;
  }
  tls_.emplace(io, *tls.get());
  SSL* handle = tls_->native_handle();
  const bool ip = IsIpAddress(url_.host);
  // SNI names DNS hosts only (RFC 6066 forbids IP literals there).
  if (!ip) SSL_set_tlsext_host_name(handle, url_.host.c_str());
  if (tls.verify()) {
    X509_VERIFY_PARAM* param = SSL_get0_param(handle);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, url_.host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, url_.host.c_str(), 0);
    }
  }
}

std::string Stream::DescribeOpenError(const boost::system::error_code& ec) {
  if (ec == beast::error::timeout) {
    return std::string(stage_ == Stage::kHandshake ? "TLS handshake with " : "connect to ") +
           url_.HostPort() + " timed out";
  }
  if (stage_ != Stage::kHandshake) return "cannot connect to " + url_.HostPort() + ": " +
                                          ec.message();
  std::string text = "TLS handshake with " + url_.HostPort() + " failed: ";
  const long verify = tls_ ? SSL_get_verify_result(tls_->native_handle()) : X509_V_OK;
  if (verify != X509_V_OK) {
    return text + "certificate verify failed (" + X509_verify_cert_error_string(verify) +
           "); pass --cacert FILE with the CA that signed the server's certificate, or "
           "--insecure to skip verification";
  }
  text += ec.message();
  if (ec.category() == asio::error::get_ssl_category() &&
      ec.message().find("wrong version number") != std::string::npos) {
    text += " (does the server speak plain http?)";
  }
  if (ec == asio::error::eof || ec == ssl::error::stream_truncated) {
    text += " (the server closed the connection: does it speak TLS?)";
  }
  return text;
}

void Stream::Close() {
  boost::system::error_code ignored;
  tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
  tcp().socket().close(ignored);
}

}  // namespace kvgate::http
