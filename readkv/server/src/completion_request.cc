#include "readkv/server/completion_request.h"

#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "readkv/server/api_error.h"

namespace readkv::server {
namespace {

using nlohmann::json;

constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 1024;
constexpr int kDefaultMaxTokens = 16;  // OpenAI's default for completions

[[noreturn]] void Invalid(const std::string& field, const std::string& message,
                          const std::string& code = "invalid_value") {
  throw ApiError(400, code, field + ": " + message, field);
}

[[noreturn]] void WrongType(const std::string& field, const char* expected, const json& value) {
  throw ApiError(400, "invalid_type",
                 field + ": expected " + expected + ", got " + std::string(value.type_name()),
                 field);
}

bool Absent(const json& body, const char* field) {
  auto it = body.find(field);
  return it == body.end() || it->is_null();
}

bool GetBool(const json& body, const char* field, bool fallback) {
  if (Absent(body, field)) return fallback;
  const json& value = body.at(field);
  if (!value.is_boolean()) WrongType(field, "a boolean", value);
  return value.get<bool>();
}

double GetNumber(const json& value, const std::string& field) {
  if (!value.is_number()) WrongType(field, "a number", value);
  const double x = value.get<double>();
  if (!std::isfinite(x)) Invalid(field, "must be finite");
  return x;
}

// An integer, also accepting a float with an integral value (5.0), as JSON does not distinguish.
int64_t GetInteger(const json& value, const std::string& field) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Invalid(field, "is out of range");
    }
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isfinite(x) && std::floor(x) == x && std::fabs(x) < 9.0e15) {
      return static_cast<int64_t>(x);
    }
  }
  WrongType(field, "an integer", value);
}

std::vector<int32_t> ParsePrompt(const json& body, const engine::ModelInfo& model,
                                 const engine::Tokenizer& tokenizer) {
  if (Absent(body, "prompt")) Invalid("prompt", "is required", "prompt_empty");
  const json& prompt = body.at("prompt");
  std::vector<int32_t> ids;
  if (prompt.is_string()) {
    const auto& text = prompt.get_ref<const std::string&>();
    if (text.empty()) Invalid("prompt", "must not be empty", "prompt_empty");
    ids = tokenizer.Encode(text);
  } else if (prompt.is_array()) {
    if (prompt.empty()) Invalid("prompt", "must not be empty", "prompt_empty");
    if (prompt.size() == 1 && prompt[0].is_string()) {
      const auto& text = prompt[0].get_ref<const std::string&>();
      if (text.empty()) Invalid("prompt", "must not be empty", "prompt_empty");
      ids = tokenizer.Encode(text);
    } else {
      // Reject before copying: a huge array must not cost more than one pass.
      if (prompt.size() > static_cast<size_t>(model.max_context)) {
        Invalid("prompt",
                "has " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                    std::to_string(model.max_context) + " tokens",
                "prompt_too_long");
      }
      ids.reserve(prompt.size());
      for (size_t i = 0; i < prompt.size(); ++i) {
        const json& item = prompt[i];
        const std::string field = "prompt[" + std::to_string(i) + "]";
        if (item.is_string() || item.is_array()) {
          Invalid("prompt", "batched prompts are not supported (send one prompt per request)",
                  "unsupported_parameter");
        }
        const int64_t id = GetInteger(item, field);
        if (id < 0 || id >= model.vocab_size) {
          Invalid(field, "token id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(model.vocab_size) + ")");
        }
        ids.push_back(static_cast<int32_t>(id));
      }
    }
  } else {
    WrongType("prompt", "a string or an array of token ids", prompt);
  }
  // At least one token must be generated within the context.
  if (static_cast<int64_t>(ids.size()) >= model.max_context) {
    Invalid("prompt",
            "has " + std::to_string(ids.size()) + " tokens; the model's context is " +
                std::to_string(model.max_context) + " tokens, including at least one to generate",
            "prompt_too_long");
  }
  return ids;
}

engine::ReadPolicy ParseReadPolicy(const json& value) {
  if (!value.is_object()) WrongType("readkv", "an object", value);
  engine::ReadPolicy policy;
  for (const auto& [key, item] : value.items()) {
    const std::string field = "readkv." + key;
    if (key == "read_bits" || key == "key_bits" || key == "value_bits") {
      const double bits = GetNumber(item, field);
      if (!(bits > 0.0) || bits > 64.0) Invalid(field, "must be in (0, 64]");
      if (key == "read_bits") policy.read_bits = bits;
      if (key == "key_bits") policy.key_bits = bits;
      if (key == "value_bits") policy.value_bits = bits;
    } else if (key == "reader") {
      if (!item.is_string()) WrongType(field, "a string", item);
      const auto& reader = item.get_ref<const std::string&>();
      if (reader != "flexible" && reader != "constrained" && reader != "tile") {
        Invalid(field, "must be \"flexible\", \"constrained\" or \"tile\"");
      }
      policy.reader = reader;
    } else {
      Invalid(field, "unknown field (known: read_bits, reader, key_bits, value_bits)",
              "unknown_readkv_field");
    }
  }
  if (policy.key_bits.has_value() != policy.value_bits.has_value()) {
    Invalid(policy.key_bits ? "readkv.value_bits" : "readkv.key_bits",
            "key_bits and value_bits go together (the K/V split)");
  }
  return policy;
}

std::vector<std::string> ParseStop(const json& value) {
  std::vector<std::string> stops;
  auto add = [&](const json& item, const std::string& field) {
    if (!item.is_string()) WrongType(field, "a string", item);
    const auto& text = item.get_ref<const std::string&>();
    if (text.empty()) Invalid(field, "must not be empty");
    if (text.size() > kMaxStopBytes) {
      Invalid(field, "is longer than " + std::to_string(kMaxStopBytes) + " bytes");
    }
    stops.push_back(text);
  };
  if (value.is_string()) {
    add(value, "stop");
  } else if (value.is_array()) {
    if (value.size() > kMaxStopStrings) {
      Invalid("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings");
    }
    for (size_t i = 0; i < value.size(); ++i) add(value[i], "stop[" + std::to_string(i) + "]");
  } else {
    WrongType("stop", "a string or an array of strings", value);
  }
  return stops;
}

// Parameters we do not implement are refused unless neutral, rather than silently ignored.
void CheckNeutral(const json& body) {
  auto refuse = [](const char* field, const char* why) {
    throw ApiError(400, "unsupported_parameter", std::string(field) + ": " + why, field);
  };
  if (!Absent(body, "n") && GetInteger(body.at("n"), "n") != 1) refuse("n", "only 1 is supported");
  if (!Absent(body, "best_of") && GetInteger(body.at("best_of"), "best_of") != 1) {
    refuse("best_of", "only 1 is supported");
  }
  if (GetBool(body, "echo", false)) refuse("echo", "is not supported");
  if (!Absent(body, "logprobs") && GetInteger(body.at("logprobs"), "logprobs") != 0) {
    refuse("logprobs", "is not supported");
  }
  if (!Absent(body, "suffix")) refuse("suffix", "is not supported");
  if (!Absent(body, "top_p") && GetNumber(body.at("top_p"), "top_p") != 1.0) {
    refuse("top_p", "only 1 is supported");
  }
  for (const char* field : {"presence_penalty", "frequency_penalty"}) {
    if (!Absent(body, field) && GetNumber(body.at(field), field) != 0.0) {
      refuse(field, "only 0 is supported");
    }
  }
  if (!Absent(body, "logit_bias")) {
    const json& bias = body.at("logit_bias");
    if (!bias.is_object()) WrongType("logit_bias", "an object", bias);
    if (!bias.empty()) refuse("logit_bias", "is not supported");
  }
}

}  // namespace

CompletionCall ParseCompletionRequest(std::string_view body_text, const engine::ModelInfo& model,
                                      const std::string& served_model,
                                      const engine::Tokenizer& tokenizer) {
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    throw ApiError(400, "invalid_json", "the request body is not valid JSON");
  }
  if (!body.is_object()) {
    throw ApiError(400, "invalid_json",
                   std::string("the request body must be a JSON object, got ") + body.type_name());
  }

  if (!Absent(body, "model")) {
    const json& name = body.at("model");
    if (!name.is_string()) WrongType("model", "a string", name);
    if (name.get_ref<const std::string&>() != served_model) {
      throw ApiError(404, "model_not_found",
                     "model: \"" + name.get<std::string>() +
                         "\" is not served here (this server "
                         "serves \"" +
                         served_model + "\")",
                     "model");
    }
  }

  CompletionCall call;
  engine::CompletionRequest& request = call.request;
  request.prompt = ParsePrompt(body, model, tokenizer);
  const int64_t room = model.max_context - static_cast<int64_t>(request.prompt.size());

  if (Absent(body, "max_tokens")) {
    request.params.max_tokens = static_cast<int>(std::min<int64_t>(kDefaultMaxTokens, room));
  } else {
    const int64_t max_tokens = GetInteger(body.at("max_tokens"), "max_tokens");
    if (max_tokens < 1) Invalid("max_tokens", "must be >= 1", "invalid_max_tokens");
    if (max_tokens > room) {
      Invalid("max_tokens",
              std::to_string(max_tokens) + " tokens requested, but the prompt (" +
                  std::to_string(request.prompt.size()) + " tokens) leaves room for " +
                  std::to_string(room) + " in the model's context of " +
                  std::to_string(model.max_context),
              "max_tokens_too_large");
    }
    request.params.max_tokens = static_cast<int>(max_tokens);
  }

  if (!Absent(body, "temperature")) {
    const double t = GetNumber(body.at("temperature"), "temperature");
    if (t < 0.0 || t > 2.0) Invalid("temperature", "must be in [0, 2]");
    request.params.temperature = t;
  }
  if (!Absent(body, "seed")) {
    request.params.seed = static_cast<uint64_t>(GetInteger(body.at("seed"), "seed"));
  }
  if (!Absent(body, "stop")) request.params.stop = ParseStop(body.at("stop"));
  request.params.ignore_eos = GetBool(body, "ignore_eos", false);
  if (!Absent(body, "readkv")) {
    request.read_policy = ParseReadPolicy(body.at("readkv"));
    call.has_read_policy = true;
    // Only a ReadKV cache has a read policy: another server accepting (and echoing) one it does
    // not apply would let a misconfigured comparison look like a ReadKV run.
    if (model.kv_backend != "readkv") {
      Invalid("readkv",
              "this server's KV cache is '" + model.kv_backend +
                  "'; the readkv extension applies only to a server started with --kv readkv",
              "readkv_not_supported");
    }
  }

  call.stream = GetBool(body, "stream", false);
  if (!Absent(body, "stream_options")) {
    const json& options = body.at("stream_options");
    if (!options.is_object()) WrongType("stream_options", "an object", options);
    if (!call.stream) Invalid("stream_options", "is only allowed when stream is true");
    if (!Absent(options, "include_usage")) {
      const json& include = options.at("include_usage");
      if (!include.is_boolean()) WrongType("stream_options.include_usage", "a boolean", include);
      call.include_usage = include.get<bool>();
    }
  }
  CheckNeutral(body);
  return call;
}

nlohmann::json ReadPolicyToJson(const engine::ReadPolicy& policy) {
  json out = json::object();
  if (policy.read_bits) out["read_bits"] = *policy.read_bits;
  if (policy.reader) out["reader"] = *policy.reader;
  if (policy.key_bits) out["key_bits"] = *policy.key_bits;
  if (policy.value_bits) out["value_bits"] = *policy.value_bits;
  return out;
}

}  // namespace readkv::server
