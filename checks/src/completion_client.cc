// Each connection owns its io_context and runs one asynchronous operation at a time to
// completion: that is what gives a plain request/response loop real timeouts (beast::tcp_stream
// expiry only applies to asynchronous operations), without a shared event loop to coordinate.
#include "kvgate/checks/completion_client.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvgate/checks/errors.h"
#include "kvgate/secrets/redact.h"

namespace kvgate::checks {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Response = http::response<http::string_body>;
using Request = http::request<http::string_body>;

// A failure below HTTP: no (complete) answer arrived.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class HttpConnection {
 public:
  HttpConnection(const ServerUrl& url, std::chrono::milliseconds connect_timeout,
                 std::chrono::milliseconds request_timeout, int64_t max_body)
      : url_(url),
        connect_timeout_(connect_timeout),
        request_timeout_(request_timeout),
        max_body_(static_cast<uint64_t>(max_body)),
        stream_(ioc_) {}
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;
  ~HttpConnection() { Close(); }

  // Sends one request and reads the whole answer. A kept-alive connection that the server has
  // closed meanwhile is reopened once; every other failure throws TransportError.
  Response Send(Request& request) {
    for (int attempt = 0;; ++attempt) {
      const bool reused = open_;
      if (!open_) Connect();
      beast::error_code ec;
      stream_.expires_after(request_timeout_);
      http::async_write(stream_, request, [&ec](beast::error_code e, size_t) { ec = e; });
      Run();
      if (!ec) {
        http::response_parser<http::string_body> parser;
        parser.body_limit(max_body_);
        http::async_read(stream_, buffer_, parser, [&ec](beast::error_code e, size_t) { ec = e; });
        Run();
        if (!ec) {
          Response response = parser.release();
          if (!response.keep_alive()) Close();
          return response;
        }
      }
      Close();
      const bool stale = ec == http::error::end_of_stream || ec == net::error::eof ||
                         ec == net::error::connection_reset || ec == net::error::broken_pipe;
      if (reused && stale && attempt == 0) continue;
      if (ec == beast::error::timeout) {
        throw TransportError("no complete answer within " +
                             std::to_string(request_timeout_.count()) + " ms");
      }
      throw TransportError(ec.message());
    }
  }

 private:
  void Run() {
    ioc_.restart();
    ioc_.run();
  }

  void Connect() {
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    auto endpoints = resolver.resolve(url_.host, url_.port, ec);
    if (ec) throw TransportError("cannot resolve host '" + url_.host + "': " + ec.message());
    stream_.expires_after(connect_timeout_);
    stream_.async_connect(endpoints, [&ec](beast::error_code e, const tcp::endpoint&) { ec = e; });
    Run();
    if (ec == beast::error::timeout) {
      throw TransportError("connect timed out after " + std::to_string(connect_timeout_.count()) +
                           " ms");
    }
    if (ec) throw TransportError(ec.message());
    buffer_.clear();
    open_ = true;
  }

  void Close() {
    if (!open_) return;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    buffer_.clear();
    open_ = false;
  }

  const ServerUrl& url_;
  std::chrono::milliseconds connect_timeout_;
  std::chrono::milliseconds request_timeout_;
  uint64_t max_body_;
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  bool open_ = false;
};

Request MakeRequest(const ServerUrl& url, http::verb verb, const std::string& path) {
  Request request{verb, url.prefix + path, 11};
  request.set(http::field::host, url.host + ":" + url.port);
  request.set(http::field::user_agent, "kvgate-checks");
  request.keep_alive(true);
  return request;
}

// The OpenAI error shape {"error": {"message": ...}} when present, else the start of the body.
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

std::chrono::milliseconds RetryDelay(const Response& response) {
  double seconds = 1.0;
  auto it = response.find(http::field::retry_after);
  if (it != response.end()) {
    boost::beast::string_view value = it->value();
    int parsed = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (ec == std::errc() && end == value.data() + value.size()) seconds = parsed;
  }
  seconds = std::clamp(seconds, 0.1, 10.0);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

CompletionOutcome CompleteOne(HttpConnection& connection, const ServerUrl& url,
                              const std::string& model, const ClientOptions& options,
                              const CompletionRequest& r) {
  const std::string where = "POST " + url.Join("/v1/completions");
  nlohmann::json body = {
      {"prompt", r.prompt}, {"max_tokens", r.max_tokens}, {"temperature", 0}, {"stream", false}};
  if (!model.empty()) body["model"] = model;
  if (!r.stop.empty()) body["stop"] = r.stop;
  // Fields the caller adds to every request, e.g. the candidate's `readkv` read policy.
  if (options.extra_body.is_object()) {
    for (const auto& [key, value] : options.extra_body.items()) body[key] = value;
  }
  Request request = MakeRequest(url, http::verb::post, "/v1/completions");
  request.set(http::field::content_type, "application/json");
  request.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  request.prepare_payload();

  CompletionOutcome out;
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    Response response;
    try {
      response = connection.Send(request);
    } catch (const TransportError& e) {
      out.error = where + ": " + e.what();
      break;
    }
    out.http_status = static_cast<int>(response.result_int());
    if ((out.http_status == 429 || out.http_status == 503) && attempt < options.max_retries) {
      std::this_thread::sleep_for(RetryDelay(response));
      continue;
    }
    if (out.http_status != 200) {
      out.error =
          where + ": HTTP " + std::to_string(out.http_status) + ": " + ErrorText(response.body());
      break;
    }
    try {
      nlohmann::json j = nlohmann::json::parse(response.body());
      out.text = j.at("choices").at(0).at("text").get<std::string>();
      if (j.contains("usage") && j["usage"].is_object()) {
        const nlohmann::json& usage = j["usage"];
        if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer()) {
          out.prompt_tokens = usage["prompt_tokens"].get<int64_t>();
        }
        if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer()) {
          out.completion_tokens = usage["completion_tokens"].get<int64_t>();
        }
      }
    } catch (const nlohmann::json::exception& e) {
      out.error = where + ": malformed completion response (" + e.what() + ")";
    }
    break;
  }
  out.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

ServerUrl ServerUrl::Parse(const std::string& raw_url) {
  // Messages name the URL with its secrets redacted; the parse reads the raw one.
  const std::string url = secrets::RedactUrl(raw_url);
  const std::string scheme =
      Lower(raw_url.substr(0, raw_url.find("://") == std::string::npos ? 0 : raw_url.find("://")));
  if (scheme == "https") {
    throw InvalidSetting("url", "'" + url + "': https is not supported, use http://");
  }
  if (scheme != "http") {
    throw InvalidSetting("url", "'" + url + "' must start with http://");
  }
  std::string rest = raw_url.substr(7);
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (authority.find('@') != std::string::npos) {
    throw InvalidSetting("url", "'" + url + "': user info in the URL is not supported");
  }
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  ServerUrl out;
  std::string port;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    size_t close = authority.find(']');
    if (close == std::string::npos) throw InvalidSetting("url", "'" + url + "': unclosed '['");
    out.host = authority.substr(1, close - 1);
    std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw InvalidSetting("url", "'" + url + "': bad text after ']'");
      port = after.substr(1);
    }
  } else {
    size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) throw InvalidSetting("url", "'" + url + "' has no host");
  if (!port.empty() || authority.find(':') != std::string::npos) {
    int number = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number < 1 ||
        number > 65535) {
      throw InvalidSetting("url", "'" + url + "': port must be 1–65535");
    }
    out.port = std::to_string(number);
  }
  if (path.find_first_of("?#") != std::string::npos) {
    throw InvalidSetting("url", "'" + url + "': no query or fragment expected");
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0)
    path.resize(path.size() - 3);
  out.prefix = path;
  bool v6 = out.host.find(':') != std::string::npos;
  out.text = "http://" + (v6 ? "[" + out.host + "]" : out.host) + ":" + out.port + out.prefix;
  return out;
}

CompletionClient::CompletionClient(const std::string& url, ClientOptions options)
    : url_(ServerUrl::Parse(url)), options_(std::move(options)), model_(options_.model) {
  if (options_.concurrency < 1 || options_.concurrency > 256) {
    throw InvalidSetting("concurrency",
                         "must be in [1, 256], got " + std::to_string(options_.concurrency));
  }
  if (options_.connect_timeout.count() <= 0 || options_.request_timeout.count() <= 0) {
    throw InvalidSetting("timeout", "timeouts must be positive");
  }
  if (options_.max_retries < 0) throw InvalidSetting("max_retries", "must be ≥ 0");
  if (options_.max_response_bytes < 1024) {
    throw InvalidSetting("max_response_bytes", "must be ≥ 1024");
  }
}

void CompletionClient::Probe() {
  HttpConnection connection(url_, options_.connect_timeout, options_.connect_timeout * 6,
                            options_.max_response_bytes);
  Request request = MakeRequest(url_, http::verb::get, "/v1/models");
  Response response;
  try {
    response = connection.Send(request);
  } catch (const TransportError& e) {
    throw ServerUnreachable(url_.text, e.what());
  }
  if (!model_.empty() || response.result_int() != 200) return;
  nlohmann::json j = nlohmann::json::parse(response.body(), nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
    model_ = j["data"][0]["id"].get<std::string>();
  }
}

std::vector<CompletionOutcome> CompletionClient::CompleteAll(
    const std::vector<CompletionRequest>& requests,
    const std::function<void(size_t, size_t)>& progress) {
  std::vector<CompletionOutcome> outcomes(requests.size());
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex progress_mutex;
  auto worker = [&] {
    HttpConnection connection(url_, options_.connect_timeout, options_.request_timeout,
                              options_.max_response_bytes);
    for (size_t i = next++; i < requests.size(); i = next++) {
      if (options_.stop_requested && options_.stop_requested()) {
        outcomes[i] = CompletionOutcome{};
        outcomes[i].error = "POST " + url_.Join("/v1/completions") + ": not sent: stop requested";
        continue;
      }
      try {
        outcomes[i] = CompleteOne(connection, url_, model_, options_, requests[i]);
      } catch (const std::exception& e) {
        // Anything unexpected stays with its item rather than ending the process.
        outcomes[i] = CompletionOutcome{};
        outcomes[i].error = "POST " + url_.Join("/v1/completions") + ": " + e.what();
      }
      std::lock_guard<std::mutex> lock(progress_mutex);
      ++done;
      if (progress) progress(done, requests.size());
    }
  };
  size_t threads = std::min(requests.size(), static_cast<size_t>(options_.concurrency));
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (std::thread& thread : pool) thread.join();
  return outcomes;
}

std::string HttpGet(const ServerUrl& url, const std::string& path,
                    std::chrono::milliseconds timeout) {
  HttpConnection connection(url, timeout, timeout, int64_t{256} << 20);
  Request request = MakeRequest(url, http::verb::get, path);
  Response response;
  try {
    response = connection.Send(request);
  } catch (const TransportError& e) {
    throw ServerUnreachable(url.text, "GET " + path + ": " + e.what());
  }
  if (response.result_int() != 200) {
    throw ServerError(
        url.Join(path), static_cast<int>(response.result_int()),
        "HTTP " + std::to_string(response.result_int()) + ": " + ErrorText(response.body()));
  }
  return std::move(response.body());
}

}  // namespace kvgate::checks
