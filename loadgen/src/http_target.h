// Internal: the bytes of a generation request (completions or chat) and the header block every
// request of a run shares. Connections, TLS and URLs are kvgate::http's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "kvgate/http/client_config.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/schedule.h"
#include "kvgate/loadgen/settings.h"

namespace kvgate::loadgen::internal {

// Target::url parsed; throws TargetError naming what is wrong.
http::Url ParseTargetUrl(const Target& target);

// The JSON body of one request (OpenAI API with vLLM's ignore_eos and, when settings.min_tokens
// is set, min_tokens extensions): for completions
// {"prompt": ...}, for chat {"messages": [{"role": "user", "content": ...}]}.
std::string RenderBody(const std::string& model, const RequestSpec& spec,
                       const LoadSettings& settings, http::Endpoint endpoint);

// The body of a multi-turn session's turn (session.h): `conversation` is the completions prompt
// (one string) or the chat `messages` array, exactly as given; otherwise as RenderBody.
std::string RenderConversationBody(const std::string& model, const nlohmann::json& conversation,
                                   int max_tokens, const LoadSettings& settings,
                                   http::Endpoint endpoint);

// Every request header line that is the same for the whole run, ending just before the
// per-request X-Request-Id and Content-Length lines.
std::string RenderHeaderPrefix(const http::Url& url, const Target& target, bool stream);

// The header block of request `index` with a body of `body_size` bytes.
std::string RenderHeader(const std::string& prefix, int64_t index, size_t body_size);

}  // namespace kvgate::loadgen::internal
