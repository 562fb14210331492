// POST /v1/chat/completions and POST /tokenize on top of the completions path.
//
// The chat template of the built-in byte-level model (models/README.md: it was trained only on
// raw recall text, "…The pass key is" → " 12345." and "…\nAnswer:" → " Paris"): system and
// developer messages are dropped (the model follows no instructions), and the contents of the user
// and assistant messages are concatenated in order with nothing added, so a user message holding
// the completions prompt is exactly that prompt, and a multi-turn exchange continues the text the
// way the model was trained. A message's content is a string or an array of {"type": "text",
// "text": ...} parts. At least one user message is required; roles other than system, developer,
// user and assistant are refused.
//
// A chat request is then the completions request with "prompt" = the templated text (and
// max_completion_tokens read as max_tokens): every other field, its checks and its errors are the
// completions API's (completion_request.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "readkv/server/completion_request.h"

namespace readkv::server {

// Throws ApiError(400, ..., "messages[i]...") naming the bad message.
std::string ApplyChatTemplate(const nlohmann::json& messages);

CompletionCall ParseChatRequest(std::string_view body, const engine::ModelInfo& model,
                                const std::string& served_model,
                                const engine::Tokenizer& tokenizer);

// vLLM's POST /tokenize: {"prompt": TEXT} or {"messages": [...]} (templated as above) →
// {"tokens": [ids, BOS first], "count": n, "max_model_len": context}. `count` equals the
// prompt_tokens the completions usage reports for the same text. Throws ApiError(400).
nlohmann::json Tokenize(std::string_view body, const engine::ModelInfo& model,
                        const engine::Tokenizer& tokenizer);

}  // namespace readkv::server
