// One TCP connection of the server (internal): the state every session shares, and Session,
// which reads requests one at a time and answers each, on its own strand. Its members are
// defined along the connection's seams: session_io.cc (reading requests, plain responses,
// disconnect detection, closing), routes.cc (which endpoint answers a request, and the small
// ones), generation.cc (a completion handed to the engine: JSON answer or SSE stream).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http_types.h"
#include "readkv/engine/engine.h"
#include "readkv/engine/tokenizer.h"
#include "readkv/server/api_error.h"
#include "readkv/server/server.h"

namespace readkv::server::detail {

// State every session reads; outlives the sessions (see Server::Impl's member order).
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

// One TCP connection: reads requests one at a time and answers each, on its own strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared);
  ~Session();  // cancels the request in flight, if any

  void Start();

 private:
  using Request = http::request<http::string_body>;
  using Headers = std::vector<std::pair<std::string, std::string>>;

  // ---- reading (session_io.cc) ---------------------------------------------------------------
  void ReadHeader();
  void OnHeader(beast::error_code ec, std::size_t);
  void ReadBody();
  void OnRead(beast::error_code ec, std::size_t);
  void OnReadError(beast::error_code ec);

  // ---- routing and the small endpoints (routes.cc) -------------------------------------------
  void Handle(const Request& request);
  void HandleModel(std::string_view encoded);
  void HandleModels();
  void HandleTokenize(const Request& request);
  json ModelObject() const;
  void HandleHealth();
  void HandleMetrics();

  // ---- completions (generation.cc) -----------------------------------------------------------
  void HandleCompletion(const Request& request, bool chat);
  void OnEvents();
  json ChunkBase() const;
  static json Usage(const engine::GenerationEvent& finished);
  void AppendChunk(const std::string& text, const char* finish_reason);
  json CompletionBody(const engine::GenerationEvent& finished) const;
  void Log(const engine::GenerationEvent& finished) const;
  void LogFirstTokenTimeline() const;
  void Pump();  // the SSE writer

  // ---- disconnect detection while a request is in flight (session_io.cc) ---------------------
  void WatchForDisconnect();
  void OnPeerReadable(beast::error_code ec, uint64_t generation);
  void ReleaseHold();
  void ClientGone();

  // ---- ending a request, plain responses, closing (session_io.cc) ----------------------------
  void WriteFailed();
  void EndRequest();
  void Fail(const ApiError& error, Headers headers = {});
  void Send(const ApiError& error, Headers headers = {});
  void SendBody(http::status status, std::string body, const char* content_type,
                Headers headers = {});
  void SendHead(http::status status, size_t body_bytes, const char* content_type,
                Headers headers);
  template <class Response>
  void Write(std::shared_ptr<Response> response);
  void LingerAndClose();
  void Discard();
  void Close();

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

}  // namespace readkv::server::detail
