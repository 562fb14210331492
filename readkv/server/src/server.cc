#include "readkv/server/server.h"

#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "readkv/server/api_error.h"
#include "readkv/server/chat_request.h"
#include "readkv/server/completion_request.h"

namespace readkv::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// After a framing error the rest of the client's bytes are read and dropped for this long (and
// at most this much) before closing, so that the close does not reset the connection before the
// client has read our error response.
constexpr auto kLingerTime = std::chrono::seconds(1);
constexpr size_t kLingerBytes = size_t{8} << 20;
// How long Shutdown waits for the last bytes of in-flight responses after the engine stopped.
constexpr auto kFinalWriteWait = std::chrono::seconds(5);

std::string Dump(const json& value) {
  // Generated text is valid UTF-8 by construction; `replace` guards the rest (echoed input).
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// State every session reads; outlives the sessions (see Impl's member order).
struct Shared {
  Shared(engine::Engine& e, const engine::Tokenizer& t, ServerOptions o)
      : engine(e), tokenizer(t), options(std::move(o)), served_model(e.model_name()) {}

  engine::Engine& engine;
  const engine::Tokenizer& tokenizer;
  const ServerOptions options;
  const std::string served_model;
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  std::atomic<uint64_t> next_id{1};

  // Open connections (Sessions alive) and the most allowed at once (set at Start).
  std::atomic<int> connections{0};
  int max_connections = 0;

  // Responses whose request reached the engine and whose last byte is not yet written.
  std::mutex in_flight_mu;
  std::condition_variable in_flight_cv;
  int in_flight = 0;

  void CountError(const std::string& cause) { engine.metrics().CountError(cause); }
};

// Holds one unit of Shared::in_flight while alive.
class InFlightToken {
 public:
  explicit InFlightToken(Shared& shared) : shared_(shared) {
    std::lock_guard<std::mutex> lock(shared_.in_flight_mu);
    ++shared_.in_flight;
  }
  ~InFlightToken() {
    {
      std::lock_guard<std::mutex> lock(shared_.in_flight_mu);
      --shared_.in_flight;
    }
    shared_.in_flight_cv.notify_all();
  }
  InFlightToken(const InFlightToken&) = delete;
  InFlightToken& operator=(const InFlightToken&) = delete;

 private:
  Shared& shared_;
};

ApiError ErrorFromEngine(const engine::GenerationEvent& event) {
  switch (event.error) {
    case engine::ErrorKind::kInvalidRequest:
      return ApiError(400, "invalid_read_policy", event.error_message, "readkv");
    case engine::ErrorKind::kShuttingDown:
      return ApiError(503, "shutting_down", event.error_message);
    default:
      return ApiError(500, "internal_error", event.error_message);
  }
}

// One TCP connection: reads requests one at a time and answers each, on its own strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) {
    shared_.connections.fetch_add(1);
  }

  ~Session() {
    // The engine must not keep generating for a connection that no longer exists.
    if (channel_) channel_->Cancel();
    shared_.connections.fetch_sub(1);
  }

  void Start() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::ReadHeader, shared_from_this()));
  }

 private:
  using Request = http::request<http::string_body>;

  // ---- reading -------------------------------------------------------------------------------

  void ReadHeader() {
    parser_.emplace();
    parser_->body_limit(shared_.options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(shared_.options.max_header_bytes));
    // One deadline for the whole request: an idle keep-alive connection and a client that
    // trickles its request (slowloris) are both cut off.
    stream_.expires_after(shared_.options.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
  }

  void OnHeader(beast::error_code ec, std::size_t) {
    if (ec) return OnReadError(ec);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      // curl and others wait for this before sending a large body.
      auto interim = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                        parser_->get().version());
      stream_.expires_after(shared_.options.write_timeout);
      http::async_write(stream_, *interim,
                        [self = shared_from_this(), interim](beast::error_code wec, std::size_t) {
                          if (wec) return self->Close();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    stream_.expires_after(shared_.options.idle_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec) return OnReadError(ec);
    received_ = Clock::now();
    Request request = parser_->release();
    parser_.reset();
    Handle(request);
  }

  void OnReadError(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof) return Close();
    if (ec == beast::error::timeout) {
      if (parser_ && parser_->got_some()) shared_.CountError("read_timeout");
      return Close();
    }
    version_ = 11;
    keep_alive_ = false;
    if (ec == http::error::body_limit) {
      return Fail(ApiError(413, "body_too_large",
                           "the request body is larger than " +
                               std::to_string(shared_.options.max_body_bytes) + " bytes"));
    }
    if (ec == http::error::header_limit) {
      return Fail(ApiError(431, "header_too_large",
                           "the request header is larger than " +
                               std::to_string(shared_.options.max_header_bytes) + " bytes"));
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::partial_message) {
      return Fail(ApiError(400, "bad_http", "malformed HTTP request: " + ec.message()));
    }
    Close();  // the peer went away or reset the connection
  }

  // ---- routing -------------------------------------------------------------------------------

  void Handle(const Request& request) {
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
  void HandleModel(std::string_view encoded) {
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

  void HandleModels() {
    SendBody(http::status::ok, Dump({{"object", "list"}, {"data", json::array({ModelObject()})}}),
             "application/json");
  }

  void HandleTokenize(const Request& request) {
    json answer;
    try {
      answer = Tokenize(request.body(), shared_.engine.model_info(), shared_.tokenizer);
    } catch (const ApiError& e) {
      return Fail(e);
    }
    SendBody(http::status::ok, Dump(answer), "application/json");
  }

  json ModelObject() const {
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

  void HandleHealth() {
    if (shared_.engine.draining()) {
      SendBody(http::status::service_unavailable, R"({"status":"draining"})", "application/json");
    } else {
      SendBody(http::status::ok, R"({"status":"ok"})", "application/json");
    }
  }

  void HandleMetrics() {
    std::string text = prometheus::TextSerializer().Serialize(shared_.engine.metrics().Collect());
    SendBody(http::status::ok, std::move(text), "text/plain; version=0.0.4; charset=utf-8");
  }

  void HandleCompletion(const Request& request, bool chat) {
    CompletionCall call;
    try {
      call = chat ? ParseChatRequest(request.body(), shared_.engine.model_info(),
                                     shared_.served_model, shared_.tokenizer)
                  : ParseCompletionRequest(request.body(), shared_.engine.model_info(),
                                           shared_.served_model, shared_.tokenizer);
    } catch (const ApiError& e) {
      return Fail(e);
    }
    chat_ = chat;
    role_sent_ = false;
    streaming_ = call.stream;
    include_usage_ = call.include_usage;
    read_policy_ = call.has_read_policy
                       ? std::optional<json>(ReadPolicyToJson(call.request.read_policy))
                       : std::nullopt;
    completion_id_ = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(shared_.next_id.fetch_add(1));
    created_ = static_cast<int64_t>(std::time(nullptr));
    prompt_tokens_ = static_cast<int>(call.request.prompt.size());
    text_.clear();
    sse_.clear();
    headers_sent_ = false;
    finishing_ = false;
    first_token_at_ = first_text_at_ = first_text_written_ = Clock::time_point{};
    first_text_queued_ = first_text_writing_ = false;
    // TTFT and E2E count from the request's arrival, as vLLM's arrival_time does: parsing and
    // tokenising the prompt are part of the latency the client sees.
    call.request.arrival = received_;

    // Runs on the engine's worker thread: hand over to this session's strand, never touch the
    // session there. A session that is gone by then simply misses the wake-up.
    std::weak_ptr<Session> weak = weak_from_this();
    auto executor = stream_.get_executor();
    auto channel = std::make_shared<engine::RequestChannel>([weak, executor] {
      net::post(executor, [weak] {
        if (auto self = weak.lock()) self->OnEvents();
      });
    });

    engine::SubmitStatus status;
    try {
      status = shared_.engine.Submit(std::move(call.request), channel);
      submitted_ = Clock::now();
    } catch (const std::invalid_argument& e) {
      return Fail(ApiError(400, "invalid_value", e.what()));
    }
    switch (status) {
      case engine::SubmitStatus::kQueueFull:
        // The engine counted it (queue_full).
        return Send(ApiError(429, "queue_full",
                             "the server's waiting queue is full; retry after " +
                                 std::to_string(shared_.options.retry_after_seconds) + " s"),
                    {{"Retry-After", std::to_string(shared_.options.retry_after_seconds)}});
      case engine::SubmitStatus::kShuttingDown:
        return Fail(ApiError(503, "shutting_down", "the server is shutting down"));
      case engine::SubmitStatus::kAccepted:
        break;
    }
    channel_ = std::move(channel);
    in_flight_.emplace(shared_);
    WatchForDisconnect();
  }

  // ---- disconnect detection while a request is in flight -------------------------------------

  void WatchForDisconnect() {
    stream_.socket().async_wait(
        tcp::socket::wait_read,
        [self = shared_from_this(), generation = generation_](beast::error_code ec) {
          self->OnPeerReadable(ec, generation);
        });
  }

  void OnPeerReadable(beast::error_code ec, uint64_t generation) {
    if (generation != generation_ || !channel_ || closed_) return;
    if (ec) {
      if (ec == net::error::operation_aborted) return;
      return ClientGone();
    }
    // Readable during a response means EOF, a reset, or a pipelined request (which stays in the
    // socket for the next read). EOF alone is a half-close: HTTP/1.1 lets a client shut down its
    // sending side and still read the answer, so the request goes on and the connection closes
    // after it; a client that really left is found by the next write, which then fails and
    // cancels the request (a streamed one at its next chunk). A reset is a client gone.
    char byte = 0;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) {
      keep_alive_ = false;
      // Nothing of Asio's holds this session now (no read or wait pending until the answer is
      // written): hold it ourselves, to the end of the request.
      half_closed_hold_ = shared_from_this();
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return WatchForDisconnect();
      return ClientGone();
    }
  }

  // Drops the half-close hold, if any, without destroying the session inside its own call: the
  // hold may be its last owner, so it is released from a posted handler.
  void ReleaseHold() {
    if (!half_closed_hold_) return;
    net::post(stream_.get_executor(), [hold = std::move(half_closed_hold_)] {});
  }

  void ClientGone() {
    if (channel_) channel_->Cancel();  // the engine ends the sequence at its next step
    spdlog::info("{} client disconnected; cancelled", completion_id_);
    Close();
  }

  // ---- results from the engine ---------------------------------------------------------------

  void OnEvents() {
    if (!channel_) return;
    std::optional<engine::GenerationEvent> finished;
    for (engine::GenerationEvent& event : channel_->Drain()) {
      if (event.kind == engine::GenerationEvent::Kind::kFinished) {
        finished = std::move(event);
        continue;
      }
      if (first_token_at_ == Clock::time_point{}) first_token_at_ = event.produced_at;
      if (!event.text.empty() && first_text_at_ == Clock::time_point{}) {
        first_text_at_ = event.produced_at;
        first_text_queued_ = streaming_;
      }
      if (!event.text.empty()) {
        if (streaming_) {
          AppendChunk(event.text, nullptr);
        } else {
          text_ += event.text;
        }
      }
    }
    if (closed_) {
      if (finished) EndRequest();
      return;
    }
    if (!finished) {
      if (streaming_) Pump();
      return;
    }
    if (finished->finish_reason == engine::FinishReason::kCancelled) {
      EndRequest();
      return Close();
    }
    Log(*finished);
    if (!streaming_) {
      channel_.reset();
      if (finished->finish_reason == engine::FinishReason::kError) {
        return Send(ErrorFromEngine(*finished));  // counted by the engine
      }
      text_ += finished->text;
      return SendBody(http::status::ok, Dump(CompletionBody(*finished)), "application/json");
    }
    if (finished->finish_reason == engine::FinishReason::kError && !headers_sent_ && sse_.empty()) {
      // Nothing streamed yet: answer with a plain HTTP error rather than an SSE error event.
      channel_.reset();
      return Send(ErrorFromEngine(*finished));
    }
    if (finished->finish_reason == engine::FinishReason::kError) {
      // OpenAI/vLLM shape of a stream that fails midway: an error object, then [DONE].
      const ApiError error = ErrorFromEngine(*finished);
      sse_ += "data: " + error.Body() + "\n\n";
    } else {
      AppendChunk(finished->text,
                  finished->finish_reason == engine::FinishReason::kStop ? "stop" : "length");
      if (include_usage_) {
        json usage_chunk = ChunkBase();
        usage_chunk["choices"] = json::array();
        usage_chunk["usage"] = Usage(*finished);
        sse_ += "data: " + Dump(usage_chunk) + "\n\n";
      }
    }
    sse_ += "data: [DONE]\n\n";
    finishing_ = true;
    channel_.reset();
    Pump();
  }

  json ChunkBase() const {
    return {{"id", completion_id_},
            {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", shared_.served_model}};
  }

  static json Usage(const engine::GenerationEvent& finished) {
    return {{"prompt_tokens", finished.prompt_tokens},
            {"completion_tokens", finished.completion_tokens},
            {"total_tokens", finished.prompt_tokens + finished.completion_tokens}};
  }

  // Completions: choices[0].text. Chat: a first chunk with the assistant role (no text), then
  // choices[0].delta.content ({} when a chunk carries no text), as OpenAI and vLLM stream.
  void AppendChunk(const std::string& text, const char* finish_reason) {
    json chunk = ChunkBase();
    const json finish = finish_reason ? json(finish_reason) : json(nullptr);
    if (chat_) {
      if (!role_sent_) {
        json role = ChunkBase();
        role["choices"] = json::array({{{"index", 0},
                                        {"delta", {{"role", "assistant"}, {"content", ""}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}});
        if (include_usage_) role["usage"] = nullptr;
        sse_ += "data: " + Dump(role) + "\n\n";
        role_sent_ = true;
      }
      chunk["choices"] = json::array({{{"index", 0},
                                       {"delta", text.empty() ? json::object()
                                                              : json{{"content", text}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", finish}}});
    } else {
      chunk["choices"] = json::array(
          {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}});
    }
    if (include_usage_) chunk["usage"] = nullptr;
    if (finish_reason && read_policy_) chunk["readkv"] = *read_policy_;
    sse_ += "data: " + Dump(chunk) + "\n\n";
  }

  json CompletionBody(const engine::GenerationEvent& finished) const {
    json body = {
        {"id", completion_id_},
        {"object", chat_ ? "chat.completion" : "text_completion"},
        {"created", created_},
        {"model", shared_.served_model},
        {"choices",
         json::array({{{"index", 0},
                       {"logprobs", nullptr},
                       {"finish_reason", engine::FinishReasonName(finished.finish_reason)}}})},
        {"usage", Usage(finished)}};
    if (chat_) {
      body["choices"][0]["message"] = {{"role", "assistant"}, {"content", text_}};
    } else {
      body["choices"][0]["text"] = text_;
    }
    if (read_policy_) body["readkv"] = *read_policy_;
    return body;
  }

  void Log(const engine::GenerationEvent& finished) const {
    const double e2e_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - received_).count();
    spdlog::info(
        "{} finish={} prompt_tokens={} completion_tokens={} stream={} seed={} readkv={} "
        "e2e_ms={:.1f}{}{}",
        completion_id_, engine::FinishReasonName(finished.finish_reason), finished.prompt_tokens,
        finished.completion_tokens, streaming_, finished.seed,
        read_policy_ ? Dump(*read_policy_) : std::string("default"), e2e_ms,
        finished.error_message.empty() ? "" : " error=", finished.error_message);
  }

  // The stages of a streamed request's time to first token, at debug level: where the time
  // between the request's arrival and its first text on the wire went. received_steady_ns is
  // std::chrono::steady_clock (CLOCK_MONOTONIC), comparable with a local client's clock.
  void LogFirstTokenTimeline() const {
    if (!spdlog::should_log(spdlog::level::debug)) return;
    auto ms = [this](Clock::time_point t) {
      return t == Clock::time_point{}
                 ? -1.0
                 : std::chrono::duration<double, std::milli>(t - received_).count();
    };
    spdlog::debug(
        "{} ttft_timeline received_steady_ns={} submitted_ms={:.3f} first_token_ms={:.3f} "
        "first_text_ms={:.3f} first_text_written_ms={:.3f}",
        completion_id_,
        std::chrono::duration_cast<std::chrono::nanoseconds>(received_.time_since_epoch()).count(),
        ms(submitted_), ms(first_token_at_), ms(first_text_at_), ms(first_text_written_));
  }

  // ---- SSE writer ----------------------------------------------------------------------------

  // Writes, one at a time: the header, then every pending SSE byte as one chunk, then (once
  // finishing) the last chunk. HTTP/1.0 clients get the raw stream and a close instead.
  void Pump() {
    if (writing_ || closed_) return;
    const bool chunked = version_ >= 11;
    if (!headers_sent_) {
      sse_header_.emplace(http::status::ok, version_);
      sse_header_->set(http::field::server, "kvgate");
      sse_header_->set(http::field::content_type, "text/event-stream");
      sse_header_->set(http::field::cache_control, "no-cache");
      if (!chunked) keep_alive_ = false;
      sse_header_->keep_alive(keep_alive_);
      sse_header_->chunked(chunked);
      sse_serializer_.emplace(*sse_header_);
      writing_ = true;
      stream_.expires_after(shared_.options.write_timeout);
      http::async_write_header(stream_, *sse_serializer_,
                               [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                 self->writing_ = false;
                                 if (ec) return self->WriteFailed();
                                 self->headers_sent_ = true;
                                 self->Pump();
                               });
      return;
    }
    if (!sse_.empty()) {
      out_ = std::move(sse_);
      sse_.clear();
      writing_ = true;
      first_text_writing_ = first_text_queued_;
      first_text_queued_ = false;
      stream_.expires_after(shared_.options.write_timeout);
      auto done = [self = shared_from_this()](beast::error_code ec, std::size_t) {
        self->writing_ = false;
        if (ec) return self->WriteFailed();
        if (self->first_text_writing_) {
          self->first_text_writing_ = false;
          self->first_text_written_ = Clock::now();
          self->LogFirstTokenTimeline();
        }
        self->Pump();
      };
      if (chunked) {
        net::async_write(stream_, http::make_chunk(net::buffer(out_)), std::move(done));
      } else {
        net::async_write(stream_, net::buffer(out_), std::move(done));
      }
      return;
    }
    if (!finishing_) return;
    if (!chunked) {
      EndRequest();
      return LingerAndClose();
    }
    writing_ = true;
    stream_.expires_after(shared_.options.write_timeout);
    net::async_write(stream_, http::make_chunk_last(),
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->writing_ = false;
                       if (ec) return self->WriteFailed();
                       self->EndRequest();
                       if (!self->keep_alive_) return self->LingerAndClose();
                       self->ReadHeader();
                     });
  }

  void WriteFailed() {
    if (closed_) return;  // we closed it ourselves (client gone, shutdown)
    shared_.CountError("write_failed");
    if (channel_) channel_->Cancel();
    EndRequest();
    Close();
  }

  // The request is over (answered, cancelled or failed): later events and waits are stale.
  void EndRequest() {
    ++generation_;
    ReleaseHold();
    if (channel_) {
      channel_->Cancel();  // a no-op if it already finished
      channel_.reset();
    }
    in_flight_.reset();
    sse_header_.reset();
    sse_serializer_.reset();
    if (!closed_) {
      beast::error_code ignored;
      stream_.socket().cancel(ignored);  // the disconnect watch
    }
  }

  // ---- plain responses -----------------------------------------------------------------------

  void Fail(const ApiError& error, std::vector<std::pair<std::string, std::string>> headers = {}) {
    shared_.CountError(error.code());
    Send(error, std::move(headers));
  }

  void Send(const ApiError& error, std::vector<std::pair<std::string, std::string>> headers = {}) {
    spdlog::info("HTTP {} {}: {}", error.status(), error.code(), error.what());
    SendBody(static_cast<http::status>(error.status()), error.Body(), "application/json",
             std::move(headers));
  }

  void SendBody(http::status status, std::string body, const char* content_type,
                std::vector<std::pair<std::string, std::string>> headers = {}) {
    if (head_) return SendHead(status, body.size(), content_type, std::move(headers));
    auto response = std::make_shared<http::response<http::string_body>>(status, version_);
    response->set(http::field::server, "kvgate");
    response->set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) response->set(name, value);
    response->keep_alive(keep_alive_);
    response->body() = std::move(body);
    response->prepare_payload();
    Write(response);
  }

  // The answer to HEAD: the headers GET would have had, Content-Length included, and no body.
  void SendHead(http::status status, size_t body_bytes, const char* content_type,
                std::vector<std::pair<std::string, std::string>> headers) {
    auto response = std::make_shared<http::response<http::empty_body>>(status, version_);
    response->set(http::field::server, "kvgate");
    response->set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) response->set(name, value);
    response->keep_alive(keep_alive_);
    response->content_length(body_bytes);
    Write(response);
  }

  template <class Response>
  void Write(std::shared_ptr<Response> response) {
    stream_.expires_after(shared_.options.write_timeout);
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
                        self->EndRequest();
                        if (ec) {
                          if (!self->closed_) self->shared_.CountError("write_failed");
                          return self->Close();
                        }
                        if (response->need_eof()) return self->LingerAndClose();
                        self->ReadHeader();
                      });
  }

  // ---- closing -------------------------------------------------------------------------------

  void LingerAndClose() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    lingered_ = 0;
    Discard();
  }

  void Discard() {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->lingered_ += n;
                              if (ec || self->lingered_ > kLingerBytes) return self->Close();
                              self->Discard();
                            });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    ReleaseHold();
    if (channel_) channel_->Cancel();
    in_flight_.reset();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  Shared& shared_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_ = false;  // the request being answered is a HEAD
  bool closed_ = false;

  // The completion in flight (at most one per connection).
  std::shared_ptr<engine::RequestChannel> channel_;
  std::optional<InFlightToken> in_flight_;
  // Set while a half-closed client's request is answered (see OnPeerReadable).
  std::shared_ptr<Session> half_closed_hold_;
  uint64_t generation_ = 0;
  bool streaming_ = false;
  bool chat_ = false;       // /v1/chat/completions: chat shapes for the same generation
  bool role_sent_ = false;  // chat stream: the assistant-role chunk went out
  bool include_usage_ = false;
  std::optional<json> read_policy_;
  std::string completion_id_;
  int64_t created_ = 0;
  int prompt_tokens_ = 0;
  Clock::time_point received_{};   // the request read in full (its arrival)
  Clock::time_point submitted_{};  // Engine::Submit returned
  std::string text_;               // non-streamed text so far

  // SSE state.
  std::string sse_;  // pending bytes
  std::string out_;  // bytes being written
  std::optional<http::response<http::empty_body>> sse_header_;
  std::optional<http::response_serializer<http::empty_body>> sse_serializer_;
  bool headers_sent_ = false;
  bool writing_ = false;
  bool finishing_ = false;
  // Time to first token, stage by stage (LogFirstTokenTimeline): the engine's stamps of the
  // first token and of the first token that released text, and when the write that carried
  // that text completed.
  Clock::time_point first_token_at_{};
  Clock::time_point first_text_at_{};
  Clock::time_point first_text_written_{};
  bool first_text_queued_ = false;   // the first text is in sse_, not yet being written
  bool first_text_writing_ = false;  // ... is in out_, being written

  std::array<char, 8192> scratch_{};
  size_t lingered_ = 0;
};

// The whole answer to a connection over the limit: 503 and close (built once).
std::string TooManyConnectionsResponse(int retry_after_seconds) {
  const std::string body =
      ApiError(503, "too_many_connections",
               "the server has as many open connections as it allows; close idle ones or retry "
               "after " +
                   std::to_string(retry_after_seconds) + " s")
          .Body();
  return "HTTP/1.1 503 Service Unavailable\r\nServer: kvgate\r\nContent-Type: application/json\r\n"
         "Retry-After: " +
         std::to_string(retry_after_seconds) + "\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A connection turned away: the 503 written, the sending side shut, what the client still sends
// read and dropped for a moment (so the close does not reset the connection before the client
// read the answer), then closed.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  Refusal(tcp::socket socket, const std::string& response)
      : stream_(std::move(socket)), response_(response) {}
  void Start() {
    stream_.expires_after(kLingerTime);
    net::async_write(stream_, net::buffer(response_),
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec) return self->Close();
                       beast::error_code ignored;
                       self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                       self->Discard();
                     });
  }

 private:
  void Discard() {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) return self->Close();
                              self->Discard();
                            });
  }
  void Close() {
    beast::error_code ignored;
    stream_.socket().close(ignored);
  }
  beast::tcp_stream stream_;
  const std::string& response_;
  std::array<char, 1024> scratch_{};
};

}  // namespace

long RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  const rlim_t cap = rlim_t{1} << 20;
  const rlim_t want = limit.rlim_max == RLIM_INFINITY ? cap : std::min(limit.rlim_max, cap);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < want) {
    rlimit raised = limit;
    raised.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? static_cast<long>(cap)
                                         : static_cast<long>(limit.rlim_cur);
}

namespace {

// max_connections when the options leave it to the open-file limit.
int ConnectionLimitFromDescriptors() {
  rlimit limit{};
  long soft = 1024;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    soft = limit.rlim_cur == RLIM_INFINITY ? 1L << 20 : static_cast<long>(limit.rlim_cur);
  }
  return static_cast<int>(std::max<long>(16, std::min<long>(soft, 1L << 20) -
                                                 kReservedDescriptors));
}

}  // namespace

struct Server::Impl {
  Impl(engine::Engine& engine, const engine::Tokenizer& tokenizer, ServerOptions options)
      : shared(engine, tokenizer, std::move(options)) {}
  ~Impl() {
    if (reserve_fd >= 0) ::close(reserve_fd);
  }

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
          RefuseOneWithTheReserve();
        } else {
          WarnAcceptFailed(ec.message());
        }
        // Back off briefly instead of spinning on a condition that persists.
        auto timer = std::make_shared<net::steady_timer>(acceptor.get_executor(),
                                                         std::chrono::milliseconds(50));
        timer->async_wait([this, timer](beast::error_code) { Accept(); });
        return;
      }
      if (shared.connections.load() >= shared.max_connections) {
        shared.CountError("too_many_connections");
        std::make_shared<Refusal>(std::move(socket), too_many_response)->Start();
        return Accept();
      }
      // Each SSE chunk is one small write. With Nagle's algorithm a chunk written while the
      // previous segment is unacknowledged (the header just before the first chunk; the
      // terminating chunk right after [DONE]) waits for the client's delayed ACK, up to 40 ms on
      // Linux: the first token would reach the client that much after the engine produced it.
      beast::error_code nodelay_ec;  // a socket that refuses it still works, only slower
      socket.set_option(tcp::no_delay(true), nodelay_ec);
      std::make_shared<Session>(std::move(socket), shared)->Start();
      Accept();
    });
  }

  // Out of descriptors with a connection waiting: give the reserved descriptor up for a moment,
  // take the connection, answer it 503 and close it, and reserve again. The waiting client gets
  // an answer instead of a hang, and the backlog drains instead of failing 20 times a second.
  void RefuseOneWithTheReserve() {
    shared.CountError("too_many_connections");
    if (reserve_fd >= 0) {
      ::close(reserve_fd);
      reserve_fd = -1;
    }
    const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      // A fresh socket's send buffer takes the few hundred bytes at once.
      (void)!::send(fd, too_many_response.data(), too_many_response.size(),
                    MSG_DONTWAIT | MSG_NOSIGNAL);
      ::shutdown(fd, SHUT_WR);
      ::close(fd);
    }
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    WarnAcceptFailed("out of file descriptors (" + std::to_string(shared.connections.load()) +
                     " connections open); answered 503");
  }

  // At most one warning a second: a condition that persists must not flood the log.
  void WarnAcceptFailed(const std::string& what) {
    shared.CountError("accept_failed");
    const auto now = Clock::now();
    if (now - last_accept_warning < std::chrono::seconds(1)) return;
    last_accept_warning = now;
    spdlog::warn("accept failed: {}", what);
  }

  // Declared first so that it is destroyed last: sessions destroyed with `ioc` still touch it.
  Shared shared;
  std::string too_many_response;
  int reserve_fd = -1;
  Clock::time_point last_accept_warning{};
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::vector<std::thread> threads;
  uint16_t port = 0;
  std::string address;
  bool started = false;
  bool stopped = false;
};

Server::Server(engine::Engine& engine, const engine::Tokenizer& tokenizer, ServerOptions options) {
  if (options.threads < 1) throw std::invalid_argument("threads must be >= 1");
  if (options.max_body_bytes < 1) throw std::invalid_argument("max_body_bytes must be >= 1");
  if (options.max_header_bytes < 512)
    throw std::invalid_argument("max_header_bytes must be >= 512");
  if (options.idle_timeout.count() <= 0) throw std::invalid_argument("idle_timeout must be > 0");
  if (options.write_timeout.count() <= 0) throw std::invalid_argument("write_timeout must be > 0");
  if (options.retry_after_seconds < 0) {
    throw std::invalid_argument("retry_after_seconds must be >= 0");
  }
  if (options.max_connections < 0) throw std::invalid_argument("max_connections must be >= 0");
  impl_ = std::make_unique<Impl>(engine, tokenizer, std::move(options));
}

Server::~Server() { Shutdown(std::chrono::milliseconds(0)); }

void Server::Start() {
  Impl& impl = *impl_;
  if (impl.started) throw std::logic_error("Server::Start called twice");
  const ServerOptions& options = impl.shared.options;
  beast::error_code ec;
  tcp::endpoint endpoint;
  const auto address = net::ip::make_address(options.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, options.port);
  } else {
    tcp::resolver resolver(impl.ioc);
    const auto results = resolver.resolve(options.host, std::to_string(options.port), ec);
    if (ec || results.empty()) {
      throw std::runtime_error("host: cannot resolve \"" + options.host + "\": " + ec.message());
    }
    endpoint = results.begin()->endpoint();
  }
  impl.acceptor.open(endpoint.protocol());
  impl.acceptor.set_option(net::socket_base::reuse_address(true));
  impl.acceptor.bind(endpoint, ec);
  if (ec) {
    throw std::runtime_error("cannot bind " + options.host + ":" + std::to_string(options.port) +
                             ": " + ec.message());
  }
  impl.acceptor.listen(net::socket_base::max_listen_connections);
  impl.shared.max_connections = options.max_connections > 0 ? options.max_connections
                                                            : ConnectionLimitFromDescriptors();
  impl.too_many_response = TooManyConnectionsResponse(options.retry_after_seconds);
  impl.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const tcp::endpoint bound = impl.acceptor.local_endpoint();
  impl.port = bound.port();
  const std::string host = bound.address().to_string();
  impl.address = (bound.address().is_v6() ? "[" + host + "]" : host) + ":" +
                 std::to_string(impl.port);
  impl.started = true;
  impl.Accept();
  for (int i = 0; i < impl.shared.options.threads; ++i) {
    impl.threads.emplace_back([&impl] { impl.ioc.run(); });
  }
}

uint16_t Server::port() const { return impl_->port; }

int Server::max_connections() const { return impl_->shared.max_connections; }

std::string Server::address() const { return impl_->address; }

void Server::Shutdown(std::chrono::milliseconds grace) {
  Impl& impl = *impl_;
  if (impl.stopped) return;
  impl.stopped = true;
  if (impl.started) {
    net::post(impl.acceptor.get_executor(), [&impl] {
      beast::error_code ignored;
      impl.acceptor.close(ignored);
    });
  }
  Shared& shared = impl.shared;
  shared.engine.BeginDrain();
  shared.engine.Shutdown(grace);  // every accepted request has now had its last event
  {
    std::unique_lock<std::mutex> lock(shared.in_flight_mu);
    shared.in_flight_cv.wait_for(lock, kFinalWriteWait, [&] { return shared.in_flight == 0; });
  }
  impl.ioc.stop();
  for (std::thread& thread : impl.threads) thread.join();
  impl.threads.clear();
}

}  // namespace readkv::server
