#include "kvgate/http/blocking_client.h"

#include <nlohmann/json.hpp>

namespace kvgate::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;

}  // namespace

Request MakeRequest(const Url& url, const ClientConfig& config, bhttp::verb verb,
                    const std::string& path, const std::string& user_agent) {
  Request request{verb, url.prefix + path, 11};
  request.set(bhttp::field::host, url.host_header);
  request.set(bhttp::field::user_agent, user_agent);
  request.keep_alive(true);
  bool own_authorization = false;
  for (const Header& h : config.headers) {
    request.set(h.name, h.value);
    own_authorization |= beast::iequals(h.name, "authorization");
  }
  if (!config.api_key.empty() && !own_authorization) {
    request.set(bhttp::field::authorization, "Bearer " + config.api_key);
  }
  return request;
}

std::string ErrorText(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) {
    const nlohmann::json& error = j["error"];
    if (error.is_object() && error.contains("message") && error["message"].is_string()) {
      return error["message"].get<std::string>();
    }
    if (error.is_string()) return error.get<std::string>();
  }
  return body.size() > 200 ? body.substr(0, 200) + "…" : body;
}

BlockingConnection::BlockingConnection(const Url& url, const TlsContext& tls,
                                       std::chrono::milliseconds connect_timeout,
                                       std::chrono::milliseconds request_timeout,
                                       uint64_t max_body)
    : url_(url),
      tls_(tls),
      connect_timeout_(connect_timeout),
      request_timeout_(request_timeout),
      max_body_(max_body) {}

BlockingConnection::~BlockingConnection() { Close(); }

void BlockingConnection::Run() {
  ioc_.restart();
  ioc_.run();
}

void BlockingConnection::Connect() {
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(ioc_);
  auto endpoints = resolver.resolve(url_.host, url_.port, ec);
  if (ec) throw TransportError("cannot resolve '" + url_.HostPort() + "': " + ec.message());
  stream_ = std::make_unique<Stream>(ioc_, url_, tls_);
  stream_->tcp().expires_after(connect_timeout_);
  stream_->AsyncOpen(endpoints, [&ec](boost::system::error_code e) { ec = e; });
  Run();
  if (ec) {
    std::string text = stream_->DescribeOpenError(ec);
    if (ec == beast::error::timeout) {
      text += " after " + std::to_string(connect_timeout_.count()) + " ms";
    }
    stream_.reset();
    throw TransportError(text);
  }
  buffer_.clear();
}

void BlockingConnection::Close() {
  if (!stream_) return;
  stream_->Close();
  stream_.reset();
  buffer_.clear();
}

Response BlockingConnection::Send(Request& request) {
  for (int attempt = 0;; ++attempt) {
    const bool reused = stream_ != nullptr;
    if (!stream_) Connect();
    boost::system::error_code ec;
    stream_->tcp().expires_after(request_timeout_);
    bhttp::async_write(*stream_, request, [&ec](boost::system::error_code e, size_t) { ec = e; });
    Run();
    if (!ec) {
      bhttp::response_parser<bhttp::string_body> parser;
      parser.body_limit(max_body_);
      bhttp::async_read(*stream_, buffer_, parser,
                        [&ec](boost::system::error_code e, size_t) { ec = e; });
      Run();
      if (!ec) {
        Response response = parser.release();
        if (!response.keep_alive()) Close();
        return response;
      }
    }
    Close();
    const bool stale = ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
                       ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
                       ec == asio::ssl::error::stream_truncated;
    if (reused && stale && attempt == 0) continue;
    if (ec == beast::error::timeout) {
      throw TransportError("no complete answer within " +
                           std::to_string(request_timeout_.count()) + " ms");
    }
    throw TransportError(ec.message());
  }
}

Response Fetch(const Url& url, const ClientConfig& config, const std::string& path,
               const std::string& json_body, std::chrono::milliseconds timeout,
               const std::string& user_agent) {
  TlsContext tls(url, config);
  BlockingConnection connection(url, tls, timeout, timeout, uint64_t{256} << 20);
  Request request = MakeRequest(url, config, json_body.empty() ? bhttp::verb::get
                                                               : bhttp::verb::post,
                                path, user_agent);
  if (!json_body.empty()) {
    request.set(bhttp::field::content_type, "application/json");
    request.body() = json_body;
  }
  request.prepare_payload();
  return connection.Send(request);
}

}  // namespace kvgate::http
