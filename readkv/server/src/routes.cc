// Session's routing: which endpoint answers a request (405 with Allow for a wrong method, 404
// for an unknown path), and the endpoints that answer at once: models, /tokenize, health,
// metrics. Completions go on to generation.cc.
#include <prometheus/text_serializer.h>

#include <cctype>

#include "readkv/server/chat_request.h"
#include "session.h"

namespace readkv::server::detail {

void Session::Handle(const Request& request) {
  version_ = request.version();
  keep_alive_ = request.keep_alive();
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const http::verb method = request.method();
  // HEAD is GET without the body (RFC 9110 9.3.2): the same status and headers, and no body
  // on any answer to it, errors included.
  head_ = method == http::verb::head;

  auto only = [&](http::verb allowed, const char* allow) {
    if (method == allowed || (head_ && allowed == http::verb::get)) return true;
    const std::string allow_header =
        allowed == http::verb::get ? std::string(allow) + ", HEAD" : std::string(allow);
    Fail(ApiError(405, "method_not_allowed",
                  std::string(request.method_string()) + " is not allowed on " +
                      std::string(path) + " (allowed: " + allow_header + ")"),
         {{"Allow", allow_header}});
    return false;
  };
  constexpr std::string_view kModelPrefix = "/v1/models/";
  if (path == "/v1/completions") {
    if (only(http::verb::post, "POST")) HandleCompletion(request, /*chat=*/false);
  } else if (path == "/v1/chat/completions") {
    if (only(http::verb::post, "POST")) HandleCompletion(request, /*chat=*/true);
  } else if (path == "/v1/models") {
    if (only(http::verb::get, "GET")) HandleModels();
  } else if (path.substr(0, kModelPrefix.size()) == kModelPrefix) {
    if (only(http::verb::get, "GET")) HandleModel(path.substr(kModelPrefix.size()));
  } else if (path == "/tokenize") {
    if (only(http::verb::post, "POST")) HandleTokenize(request);
  } else if (path == "/health") {
    if (only(http::verb::get, "GET")) HandleHealth();
  } else if (path == "/metrics") {
    if (only(http::verb::get, "GET")) HandleMetrics();
  } else {
    Fail(ApiError(404, "not_found", "no such endpoint: " + std::string(path)));
  }
}

// GET /v1/models/{id}: the one model object, or 404 model_not_found for any other id. The id
// may hold a '/' raw or percent-encoded (the openai npm client sends "test%2Ftiny-llama").
void Session::HandleModel(std::string_view encoded) {
  std::string id;
  for (size_t i = 0; i < encoded.size(); ++i) {
    const auto hex = [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
             : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
             : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                         : -1;
    };
    if (encoded[i] == '%' && i + 2 < encoded.size() && hex(encoded[i + 1]) >= 0 &&
        hex(encoded[i + 2]) >= 0) {
      id += static_cast<char>(hex(encoded[i + 1]) * 16 + hex(encoded[i + 2]));
      i += 2;
    } else {
      id += encoded[i];
    }
  }
  if (id != shared_.served_model) {
    return Fail(ApiError(404, "model_not_found",
                         "model \"" + std::string(id) + "\" is not served here (this server "
                         "serves \"" + shared_.served_model + "\")",
                         "model"));
  }
  SendBody(http::status::ok, Dump(ModelObject()), "application/json");
}

void Session::HandleModels() {
  SendBody(http::status::ok, Dump({{"object", "list"}, {"data", json::array({ModelObject()})}}),
           "application/json");
}

void Session::HandleTokenize(const Request& request) {
  json answer;
  try {
    answer = Tokenize(request.body(), shared_.engine.model_info(), shared_.tokenizer);
  } catch (const ApiError& e) {
    return Fail(e);
  }
  SendBody(http::status::ok, Dump(answer), "application/json");
}

json Session::ModelObject() const {
  const engine::ModelInfo& info = shared_.engine.model_info();
  json model = {{"id", shared_.served_model},   {"object", "model"},
                {"created", shared_.created},   {"owned_by", "kvgate"},
                {"root", info.model_id},        {"max_model_len", info.max_context},
                {"kv_backend", info.kv_backend}};
  // A server slowed on purpose says so to anyone who asks (kvgate serve's test aid).
  if (const auto delay = shared_.engine.options().inject_step_delay; delay.count() > 0) {
    model["kvgate_test_aids"] = {{"inject_step_delay_ms", delay.count() / 1000.0}};
  }
  return model;
}

void Session::HandleHealth() {
  if (shared_.engine.draining()) {
    SendBody(http::status::service_unavailable, R"({"status":"draining"})", "application/json");
  } else {
    SendBody(http::status::ok, R"({"status":"ok"})", "application/json");
  }
}

void Session::HandleMetrics() {
  std::string text = prometheus::TextSerializer().Serialize(shared_.engine.metrics().Collect());
  SendBody(http::status::ok, std::move(text), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace readkv::server::detail
