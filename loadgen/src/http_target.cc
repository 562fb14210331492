#include "http_target.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>

#include "kvgate/secrets/redact.h"

namespace kvgate::loadgen {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

}  // namespace

namespace internal {
namespace {

bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

}  // namespace

ParsedUrl ParseUrl(const std::string& raw_url) {
  // Messages name the URL with its secrets redacted; the parse reads the raw one.
  const std::string url = secrets::RedactUrl(raw_url);
  std::string_view rest = raw_url;
  if (StartsWithNoCase(rest, "https://")) {
    throw TargetError("url '" + url + "': https is not supported (plain http:// only)");
  }
  if (!StartsWithNoCase(rest, "http://")) {
    throw TargetError("url '" + url + "': expected http://host[:port][/prefix]");
  }
  rest.remove_prefix(7);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.empty()) throw TargetError("url '" + url + "': missing host");
  if (authority.find('@') != std::string_view::npos) {
    throw TargetError("url '" + url + "': user info in the URL is not supported");
  }
  ParsedUrl parsed;
  parsed.host_header = std::string(authority);
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) throw TargetError("url '" + url + "': bad IPv6 host");
    parsed.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw TargetError("url '" + url + "': bad port");
      parsed.port = std::string(after.substr(1));
    }
  } else {
    size_t colon = authority.rfind(':');
    parsed.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) parsed.port = std::string(authority.substr(colon + 1));
  }
  if (parsed.port.empty()) parsed.port = "80";
  if (parsed.host.empty()) throw TargetError("url '" + url + "': missing host");
  if (!std::all_of(parsed.port.begin(), parsed.port.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      parsed.port.size() > 5 || std::stoi(parsed.port) < 1 || std::stoi(parsed.port) > 65535) {
    throw TargetError("url '" + url + "': port must be a number in 1..65535");
  }
  if (path.find_first_of("?#") != std::string_view::npos) {
    throw TargetError("url '" + url + "': a base URL has no query or fragment");
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.size() >= 3 && path.substr(path.size() - 3) == "/v1") path.remove_suffix(3);
  parsed.prefix = std::string(path);
  return parsed;
}

tcp::resolver::results_type Resolve(const ParsedUrl& url) {
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::error_code ec;
  auto results = resolver.resolve(url.host, url.port, ec);
  if (ec || results.empty()) {
    throw TargetError("cannot resolve '" + url.host + ":" + url.port + "': " + ec.message());
  }
  return results;
}

std::string RenderBody(const std::string& model, const RequestSpec& spec,
                       const LoadSettings& settings) {
  nlohmann::json body = {{"model", model},
                         {"prompt", spec.prompt},
                         {"max_tokens", spec.max_tokens},
                         {"temperature", settings.temperature},
                         {"stream", settings.stream},
                         {"ignore_eos", settings.ignore_eos}};
  // Token counts come only from the server's usage; in a stream it arrives in the final chunk
  // only when asked for.
  if (settings.stream) body["stream_options"] = {{"include_usage", true}};
  // Caller-chosen extra fields (e.g. a ReadKV candidate's `readkv` read policy), merged last.
  if (settings.extra_body.is_object()) {
    for (const auto& [key, value] : settings.extra_body.items()) body[key] = value;
  }
  return body.dump();
}

std::string RenderHeaderPrefix(const ParsedUrl& url, const Target& target, bool stream) {
  std::string header = "POST " + url.prefix +
                       "/v1/completions HTTP/1.1\r\nHost: " + url.host_header +
                       "\r\nUser-Agent: kvgate-loadgen\r\nContent-Type: application/json\r\n";
  header += stream ? "Accept: text/event-stream\r\n" : "Accept: application/json\r\n";
  if (!target.api_key.empty()) header += "Authorization: Bearer " + target.api_key + "\r\n";
  return header;
}

std::string RenderHeader(const std::string& prefix, int64_t index, size_t body_size) {
  std::string header;
  header.reserve(prefix.size() + 64);
  header += prefix;
  header += "X-Request-Id: ";
  header += std::to_string(index);
  header += "\r\nContent-Length: ";
  header += std::to_string(body_size);
  header += "\r\n\r\n";
  return header;
}

}  // namespace internal

std::string DiscoverModel(const Target& target, double timeout_s) {
  internal::ParsedUrl url = internal::ParseUrl(target.url);
  auto endpoints = internal::Resolve(url);
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::request<http::empty_body> request(http::verb::get, url.prefix + "/v1/models", 11);
  request.set(http::field::host, url.host_header);
  request.set(http::field::user_agent, "kvgate-loadgen");
  if (!target.api_key.empty()) {
    request.set(http::field::authorization, "Bearer " + target.api_key);
  }
  http::response<http::string_body> response;
  beast::error_code result;
  std::string stage = "connect";
  stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
  stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) {
      result = ec;
      return;
    }
    stage = "send";
    http::async_write(stream, request, [&](beast::error_code wec, size_t) {
      if (wec) {
        result = wec;
        return;
      }
      stage = "read";
      http::async_read(stream, buffer, response,
                       [&](beast::error_code rec, size_t) { result = rec; });
    });
  });
  io.run();
  const std::string where = "GET " + secrets::RedactUrl(target.url) + " /v1/models";
  if (result) throw TargetError(where + ": " + stage + " failed: " + result.message());
  if (response.result_int() != 200) {
    throw TargetError(where + ": HTTP " + std::to_string(response.result_int()) + ": " +
                      response.body().substr(0, 200));
  }
  nlohmann::json json = nlohmann::json::parse(response.body(), nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("data") ||
      !json["data"].is_array() || json["data"].empty() || !json["data"][0].is_object() ||
      !json["data"][0].contains("id") || !json["data"][0]["id"].is_string()) {
    throw TargetError(where + ": no model id in the response (pass the model name explicitly)");
  }
  return json["data"][0]["id"].get<std::string>();
}

}  // namespace kvgate::loadgen
