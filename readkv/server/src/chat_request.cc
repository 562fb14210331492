#include "readkv/server/chat_request.h"

#include "readkv/server/api_error.h"

namespace readkv::server {
namespace {

using nlohmann::json;

json ParseBody(std::string_view text) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    throw ApiError(400, "invalid_json", "the request body is not valid JSON");
  }
  if (!body.is_object()) {
    throw ApiError(400, "invalid_json",
                   std::string("the request body must be a JSON object, got ") + body.type_name());
  }
  return body;
}

std::string ContentText(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) {
    throw ApiError(400, "invalid_type",
                   field + ": expected a string or an array of text parts, got " +
                       content.type_name(),
                   field);
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = field + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      throw ApiError(400, "invalid_value",
                     where + ": only {\"type\": \"text\", \"text\": ...} parts are supported",
                     where);
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

std::string ApplyChatTemplate(const json& messages) {
  if (!messages.is_array() || messages.empty()) {
    throw ApiError(400, "invalid_value", "messages: expected a non-empty array of messages",
                   "messages");
  }
  std::string prompt;
  bool has_user = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      throw ApiError(400, "invalid_value", where + ": expected an object with a string \"role\"",
                     where);
    }
    const std::string role = message["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant") {
      throw ApiError(400, "invalid_value",
                     where + ".role: \"" + role +
                         "\" is not supported (system, developer, user, assistant)",
                     where + ".role");
    }
    const std::string text =
        ContentText(message.contains("content") ? message["content"] : json(nullptr),
                    where + ".content");
    if (role == "system" || role == "developer") continue;
    has_user |= role == "user";
    prompt += text;
  }
  if (!has_user) {
    throw ApiError(400, "invalid_value", "messages: needs at least one user message", "messages");
  }
  return prompt;
}

CompletionCall ParseChatRequest(std::string_view body_text, const engine::ModelInfo& model,
                                const std::string& served_model,
                                const engine::Tokenizer& tokenizer) {
  json body = ParseBody(body_text);
  if (!body.contains("messages")) {
    throw ApiError(400, "invalid_value", "messages: required", "messages");
  }
  body["prompt"] = ApplyChatTemplate(body["messages"]);
  body.erase("messages");
  if (body.contains("max_completion_tokens")) {
    if (!body.contains("max_tokens")) body["max_tokens"] = body["max_completion_tokens"];
    body.erase("max_completion_tokens");
  }
  // Chat's logprobs is a bool; false is its neutral value.
  if (body.contains("logprobs") && body["logprobs"] == false) body.erase("logprobs");
  return ParseCompletionRequest(body.dump(), model, served_model, tokenizer);
}

json Tokenize(std::string_view body_text, const engine::ModelInfo& model,
              const engine::Tokenizer& tokenizer) {
  json body = ParseBody(body_text);
  std::string text;
  if (body.contains("messages")) {
    text = ApplyChatTemplate(body["messages"]);
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    text = body["prompt"].get<std::string>();
  } else {
    throw ApiError(400, "invalid_value", "prompt: expected a string (or \"messages\")", "prompt");
  }
  std::vector<int32_t> ids = tokenizer.Encode(text);
  return {{"tokens", ids},
          {"count", ids.size()},
          {"max_model_len", model.max_context}};
}

}  // namespace readkv::server
