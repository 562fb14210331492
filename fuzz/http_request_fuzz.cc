// Raw bytes as they arrive on a server connection: Boost.Beast's request parser with the limits
// the server sets (ServerOptions defaults), then what Session::Handle does with each complete
// request, including ParseCompletionRequest on a POST /v1/completions body, ParseChatRequest on
// POST /v1/chat/completions and Tokenize on POST /tokenize. Pipelined requests
// on one connection are parsed one after another, as keep-alive does. The whole input is also
// handed to ParseCompletionRequest as a bare body, so JSON seeds reach it without HTTP framing.
// The contract: a parse error or an ApiError, nothing else (no crash, no other exception).
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "readkv/engine/engine.h"
#include "readkv/engine/tokenizer.h"
#include "readkv/server/api_error.h"
#include "readkv/server/chat_request.h"
#include "readkv/server/completion_request.h"
#include "readkv/server/server.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;

// The built-in tiny model's shape with a short context, so prompt_too_long and
// max_tokens_too_large are reachable by small inputs.
const readkv::engine::ModelInfo& Model() {
  static const readkv::engine::ModelInfo info{"tiny-llama", "readkv", 258, 64, 256, 257};
  return info;
}
constexpr const char* kServedModel = "tiny-llama";

enum class Route { kCompletions, kChat };

void ParseBody(std::string_view body, Route route = Route::kCompletions) {
  static const readkv::engine::ByteTokenizer tokenizer;
  try {
    const readkv::server::CompletionCall call =
        route == Route::kChat
            ? readkv::server::ParseChatRequest(body, Model(), kServedModel, tokenizer)
            : readkv::server::ParseCompletionRequest(body, Model(), kServedModel, tokenizer);
    // What the server does next with an accepted call.
    if (call.has_read_policy) (void)readkv::server::ReadPolicyToJson(call.request.read_policy);
    if (call.request.prompt.empty() || call.request.params.max_tokens < 1 ||
        static_cast<int64_t>(call.request.prompt.size()) + call.request.params.max_tokens >
            Model().max_context) {
      __builtin_trap();  // accepted a request the engine would have to refuse
    }
  } catch (const readkv::server::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
  }
}

// POST /tokenize: an answer or a 4xx, and a count that is the token list's length.
void TokenizeBody(std::string_view body) {
  static const readkv::engine::ByteTokenizer tokenizer;
  try {
    const nlohmann::json out = readkv::server::Tokenize(body, Model(), tokenizer);
    if (out.at("count").get<size_t>() != out.at("tokens").size()) __builtin_trap();
  } catch (const readkv::server::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
  }
}

// One complete request, as Session::Handle routes it.
void Handle(const http::request<http::string_body>& request) {
  (void)beast::iequals(request[http::field::expect], "100-continue");
  (void)request.keep_alive();
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (request.method() == http::verb::post) {
    if (path == "/v1/completions") ParseBody(request.body());
    if (path == "/v1/chat/completions") ParseBody(request.body(), Route::kChat);
    if (path == "/tokenize") TokenizeBody(request.body());
  }
  (void)request.method_string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const readkv::server::ServerOptions options;
  const char* bytes = reinterpret_cast<const char*>(data);
  size_t offset = 0;
  for (int request_index = 0; request_index < 16 && offset < size; ++request_index) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(options.max_body_bytes);
    parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
    parser.eager(true);
    beast::error_code ec;
    while (!parser.is_done() && offset < size) {
      const size_t used = parser.put(boost::asio::buffer(bytes + offset, size - offset), ec);
      offset += used;
      if (ec == http::error::need_more) {
        ec = {};
        if (used == 0) break;  // the rest is an incomplete message: the connection would wait
        continue;
      }
      if (ec) break;
    }
    if (!ec && !parser.is_done() && offset == size) parser.put_eof(ec);  // the peer closed
    if (ec || !parser.is_done()) break;  // the server answers 400/413/431 or closes
    Handle(parser.release());
  }
  ParseBody(std::string_view(bytes, size));
  return 0;
}
