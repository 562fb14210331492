// kvgate::http — which OpenAI-compatible generation endpoint a client speaks. Both the load
// generator and the quality checks send the same prompt through either:
// - kCompletions: POST /v1/completions {"prompt": TEXT}; the answer is choices[0].text (streamed:
//   each chunk's choices[0].text).
// - kChat: POST /v1/chat/completions {"messages": [{"role": "system", ...}?, {"role": "user",
//   "content": TEXT}]}; the answer is choices[0].message.content (streamed: each chunk's
//   choices[0].delta.content; a role-only or empty delta is not a token).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::http {

enum class Endpoint { kCompletions, kChat };

// "completions" | "chat".
std::string_view EndpointName(Endpoint endpoint);
// The request path under the base URL: "/v1/completions" | "/v1/chat/completions".
std::string_view EndpointPath(Endpoint endpoint);
// "completions" | "chat"; throws ConfigError("endpoint", ...) naming the text otherwise.
Endpoint ParseEndpoint(std::string_view text);

}  // namespace kvgate::http
