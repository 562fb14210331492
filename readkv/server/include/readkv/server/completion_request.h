// POST /v1/completions: from the JSON body to a validated engine request.
//
// Accepted fields (OpenAI completions, plus vLLM's ignore_eos and the ReadKV extension):
//   model (string; must name the served model), prompt (non-empty string, one-element array of
//   a string, or non-empty array of token ids in [0, vocab)), max_tokens (integer >= 1; prompt +
//   max_tokens <= the model's context; default min(16, room left)), temperature (number in
//   [0, 2]; default 1; 0 = greedy), seed (integer), stream (bool), stream_options
//   ({"include_usage": bool}, only with stream), stop (string or array of up to 16 non-empty
//   strings), ignore_eos (bool), readkv ({"read_bits": number > 0, "reader": "flexible" |
//   "constrained" | "tile", "key_bits": number > 0, "value_bits": number > 0}; any other field is an
//   error). n, best_of, echo, logprobs, suffix, top_p, presence_penalty, frequency_penalty and
//   logit_bias are accepted only at their neutral values. Other fields are ignored, as vLLM does.
// Every violation throws ApiError(400, code, message naming the field, field); a wrong model is
// ApiError(404, "model_not_found").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "readkv/engine/engine.h"
#include "readkv/engine/request.h"
#include "readkv/engine/tokenizer.h"

namespace readkv::server {

struct CompletionCall {
  engine::CompletionRequest request;
  bool stream = false;
  bool include_usage = false;
  bool has_read_policy = false;  // the request carried a `readkv` object
};

// `served_model` is the name /v1/models lists.
CompletionCall ParseCompletionRequest(std::string_view body, const engine::ModelInfo& model,
                                      const std::string& served_model,
                                      const engine::Tokenizer& tokenizer);

// The `readkv` echo of a response: the fields the request set, e.g. {"read_bits": 2}.
nlohmann::json ReadPolicyToJson(const engine::ReadPolicy& policy);

}  // namespace readkv::server
