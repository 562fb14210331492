// A request the API refuses, in the OpenAI error shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
//              "code": "invalid_max_tokens"}}
// `code` is a stable, machine-readable cause; the server's error counter
// (kvgate_request_errors_total{cause}) uses the same string.
#pragma once

#include <stdexcept>
#include <string>

namespace readkv::server {

class ApiError : public std::runtime_error {
 public:
  // `param` names the offending request field ("" when none).
  ApiError(int status, std::string code, const std::string& message, std::string param = "");

  int status() const { return status_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }
  // "invalid_request_error" (4xx), "rate_limit_error" (429) or "server_error" (5xx).
  std::string type() const;
  // The response body.
  std::string Body() const;

 private:
  int status_;
  std::string code_;
  std::string param_;
};

}  // namespace readkv::server
