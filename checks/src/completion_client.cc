// Connections, TLS and the blocking request loop are kvgate::http's (BlockingConnection: one
// io_context per connection, one operation at a time, real deadlines); this file is the
// OpenAI-specific part: the request body, retries on 429/503 and reading the answer.
#include "kvgate/checks/completion_client.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvgate/checks/errors.h"
#include "kvgate/http/blocking_client.h"

namespace kvgate::checks {
namespace {

namespace bhttp = boost::beast::http;

std::chrono::milliseconds RetryDelay(const http::Response& response) {
  double seconds = 1.0;
  auto it = response.find(bhttp::field::retry_after);
  if (it != response.end()) {
    boost::beast::string_view value = it->value();
    int parsed = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (ec == std::errc() && end == value.data() + value.size()) seconds = parsed;
  }
  seconds = std::clamp(seconds, 0.1, 10.0);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

nlohmann::json RequestBody(const std::string& model, const ClientOptions& options,
                           const CompletionRequest& r) {
  nlohmann::json body = {{"max_tokens", r.max_tokens}, {"temperature", 0}, {"stream", false}};
  if (options.endpoint == http::Endpoint::kChat) {
    nlohmann::json messages = nlohmann::json::array();
    if (!options.system_prompt.empty()) {
      messages.push_back({{"role", "system"}, {"content", options.system_prompt}});
    }
    messages.push_back({{"role", "user"}, {"content", r.prompt}});
    body["messages"] = std::move(messages);
  } else {
    body["prompt"] = r.prompt;
  }
  if (!model.empty()) body["model"] = model;
  if (!r.stop.empty()) body["stop"] = r.stop;
  // Fields the caller adds to every request, e.g. the candidate's `readkv` read policy.
  if (options.extra_body.is_object()) {
    for (const auto& [key, value] : options.extra_body.items()) body[key] = value;
  }
  return body;
}

// choices[0].text (completions) or choices[0].message.content (chat; null content reads as "").
std::string AnswerText(const nlohmann::json& j, http::Endpoint endpoint) {
  const nlohmann::json& choice = j.at("choices").at(0);
  if (endpoint == http::Endpoint::kCompletions) return choice.at("text").get<std::string>();
  const nlohmann::json& content = choice.at("message").at("content");
  return content.is_null() ? std::string() : content.get<std::string>();
}

CompletionOutcome CompleteOne(http::BlockingConnection& connection, const ServerUrl& url,
                              const std::string& model, const ClientOptions& options,
                              const CompletionRequest& r) {
  const std::string path(http::EndpointPath(options.endpoint));
  const std::string where = "POST " + url.Join(path);
  http::Request request = http::MakeRequest(url, options.client, bhttp::verb::post, path,
                                            "kvgate-checks");
  request.set(bhttp::field::content_type, "application/json");
  request.body() = RequestBody(model, options, r)
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  request.prepare_payload();

  CompletionOutcome out;
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    http::Response response;
    try {
      response = connection.Send(request);
    } catch (const http::TransportError& e) {
      out.error = where + ": " + e.what();
      break;
    }
    out.http_status = static_cast<int>(response.result_int());
    if ((out.http_status == 429 || out.http_status == 503) && attempt < options.max_retries) {
      std::this_thread::sleep_for(RetryDelay(response));
      continue;
    }
    if (out.http_status != 200) {
      out.error = where + ": HTTP " + std::to_string(out.http_status) + ": " +
                  http::ErrorText(response.body());
      break;
    }
    try {
      nlohmann::json j = nlohmann::json::parse(response.body());
      out.text = AnswerText(j, options.endpoint);
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
      out.error = where + ": malformed " +
                  (options.endpoint == http::Endpoint::kChat ? "chat completion" : "completion") +
                  " response (" + e.what() + ")";
    }
    break;
  }
  out.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace

ServerUrl ServerUrl::Parse(const std::string& url) {
  try {
    return ServerUrl{http::Url::Parse(url)};
  } catch (const http::ConfigError& e) {
    throw InvalidSetting("url", e.what());
  }
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
  try {
    tls_ = std::make_shared<const http::TlsContext>(url_, options_.client);
  } catch (const http::ConfigError& e) {
    throw InvalidSetting(e.field(), e.what());
  }
}

void CompletionClient::Probe() {
  http::BlockingConnection connection(url_, *tls_, options_.connect_timeout,
                                      options_.connect_timeout * 6,
                                      static_cast<uint64_t>(options_.max_response_bytes));
  http::Request request =
      http::MakeRequest(url_, options_.client, bhttp::verb::get, "/v1/models", "kvgate-checks");
  http::Response response;
  try {
    response = connection.Send(request);
  } catch (const http::TransportError& e) {
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
    const std::function<void(size_t, size_t)>& progress,
    const std::function<void(size_t, const CompletionOutcome&)>& on_outcome) {
  std::vector<CompletionOutcome> outcomes(requests.size());
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex progress_mutex;
  const std::string where = "POST " + url_.Join(std::string(http::EndpointPath(options_.endpoint)));
  auto worker = [&] {
    http::BlockingConnection connection(url_, *tls_, options_.connect_timeout,
                                        options_.request_timeout,
                                        static_cast<uint64_t>(options_.max_response_bytes));
    for (size_t i = next++; i < requests.size(); i = next++) {
      if (options_.stop_requested && options_.stop_requested()) {
        outcomes[i] = CompletionOutcome{};
        outcomes[i].error = where + ": not sent: stop requested";
        continue;
      }
      try {
        outcomes[i] = CompleteOne(connection, url_, model_, options_, requests[i]);
      } catch (const std::exception& e) {
        // Anything unexpected stays with its item rather than ending the process.
        outcomes[i] = CompletionOutcome{};
        outcomes[i].error = where + ": " + e.what();
      }
      std::lock_guard<std::mutex> lock(progress_mutex);
      ++done;
      if (on_outcome) on_outcome(i, outcomes[i]);
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
                    std::chrono::milliseconds timeout, const http::ClientConfig& config) {
  http::Response response;
  try {
    response = http::Fetch(url, config, path, "", timeout, "kvgate-checks");
  } catch (const http::ConfigError& e) {
    throw InvalidSetting(e.field(), e.what());
  } catch (const http::TransportError& e) {
    throw ServerUnreachable(url.text, "GET " + path + ": " + e.what());
  }
  if (response.result_int() != 200) {
    throw ServerError(url.Join(path), static_cast<int>(response.result_int()),
                      "HTTP " + std::to_string(response.result_int()) + ": " +
                          http::ErrorText(response.body()));
  }
  return std::move(response.body());
}

}  // namespace kvgate::checks
