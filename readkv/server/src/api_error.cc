#include "readkv/server/api_error.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace readkv::server {

ApiError::ApiError(int status, std::string code, const std::string& message, std::string param)
    : std::runtime_error(message),
      status_(status),
      code_(std::move(code)),
      param_(std::move(param)) {}

std::string ApiError::type() const {
  if (status_ == 429) return "rate_limit_error";
  if (status_ >= 500) return "server_error";
  return "invalid_request_error";
}

std::string ApiError::Body() const {
  nlohmann::json error = {
      {"message", what()},
      {"type", type()},
      {"param", param_.empty() ? nlohmann::json(nullptr) : nlohmann::json(param_)},
      {"code", code_}};
  // Messages may quote client bytes; never let invalid UTF-8 turn an error into an exception.
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

}  // namespace readkv::server
