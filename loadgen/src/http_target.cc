#include "http_target.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "kvgate/http/blocking_client.h"
#include "kvgate/secrets/redact.h"

namespace kvgate::loadgen {
namespace internal {

http::Url ParseTargetUrl(const Target& target) {
  try {
    return http::Url::Parse(target.url);
  } catch (const http::ConfigError& e) {
    throw TargetError(std::string("--") + e.field() + " " + e.what());
  }
}

namespace {

// Every generation body: `conversation` is the prompt (completions) or the messages (chat).
std::string RenderWith(const std::string& model, nlohmann::json conversation, int max_tokens,
                       const LoadSettings& settings, http::Endpoint endpoint) {
  nlohmann::json body = {{"model", model},
                         {"max_tokens", max_tokens},
                         {"temperature", settings.temperature},
                         {"stream", settings.stream},
                         {"ignore_eos", settings.ignore_eos}};
  if (settings.min_tokens > 0) {
    body["min_tokens"] = std::min(settings.min_tokens, max_tokens);
    body["ignore_eos"] = true;
  }
  body[endpoint == http::Endpoint::kChat ? "messages" : "prompt"] = std::move(conversation);
  // Token counts come only from the server's usage; in a stream it arrives in the final chunk
  // only when asked for.
  if (settings.stream) body["stream_options"] = {{"include_usage", true}};
  // Caller-chosen extra fields (e.g. a ReadKV candidate's `readkv` read policy), merged last.
  if (settings.extra_body.is_object()) {
    for (const auto& [key, value] : settings.extra_body.items()) body[key] = value;
  }
  return body.dump();
}

}  // namespace

std::string RenderBody(const std::string& model, const RequestSpec& spec,
                       const LoadSettings& settings, http::Endpoint endpoint) {
  nlohmann::json conversation =
      endpoint == http::Endpoint::kChat
          ? nlohmann::json::array({{{"role", "user"}, {"content", spec.prompt}}})
          : spec.prompt;
  return RenderWith(model, std::move(conversation), spec.max_tokens, settings, endpoint);
}

std::string RenderConversationBody(const std::string& model, const nlohmann::json& conversation,
                                   int max_tokens, const LoadSettings& settings,
                                   http::Endpoint endpoint) {
  return RenderWith(model, conversation, max_tokens, settings, endpoint);
}

std::string RenderHeaderPrefix(const http::Url& url, const Target& target, bool stream) {
  std::string header = "POST " + url.prefix + std::string(http::EndpointPath(target.endpoint)) +
                       " HTTP/1.1\r\nHost: " + url.host_header +
                       "\r\nUser-Agent: kvgate-loadgen\r\nContent-Type: application/json\r\n";
  header += stream ? "Accept: text/event-stream\r\n" : "Accept: application/json\r\n";
  header += http::RenderHeaderLines(target.client);
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
  const http::Url url = internal::ParseTargetUrl(target);
  const std::string where = "GET " + url.Join("/v1/models");
  http::Response response;
  try {
    response = http::Fetch(url, target.client, "/v1/models", "",
                           std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)),
                           "kvgate-loadgen");
  } catch (const http::ConfigError& e) {
    throw TargetError(std::string("--") + e.field() + " " + e.what());
  } catch (const http::TransportError& e) {
    throw TargetError(where + ": " + e.what());
  }
  if (response.result_int() != 200) {
    throw TargetError(where + ": HTTP " + std::to_string(response.result_int()) + ": " +
                      secrets::RedactText(http::ErrorText(response.body())));
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
