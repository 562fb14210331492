#include "fixture_server.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

#ifdef __linux__
#include <sys/prctl.h>
#endif

// GCC 12 inlines Asio 1.18's coroutine-frame allocator (operator new of a recycled block,
// operator delete of the frame) and then reports a mismatch that is not there.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace kvgate::loadgen::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::awaitable;
using asio::use_awaitable;

std::string HttpChunk(std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size);
  out += data;
  out += "\r\n";
  return out;
}

int PromptTokens(const nlohmann::json& body) {
  auto prompt = body.find("prompt");
  if (prompt == body.end()) return 0;
  if (prompt->is_array()) return static_cast<int>(prompt->size());
  if (!prompt->is_string()) return 0;
  int words = 0;
  bool in_word = false;
  for (char c : prompt->get_ref<const std::string&>()) {
    bool space = c == ' ' || c == '\n' || c == '\t';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

}  // namespace

struct FixtureServer::State {
  explicit State(const FixtureOptions& opts) : options(opts), acceptor(io) {}

  FixtureOptions options;
  std::atomic<int64_t>* completions = nullptr;
  std::atomic<int64_t>* connections = nullptr;
  std::atomic<int64_t> next_id{0};
  mutable std::mutex mutex;
  nlohmann::json last_body;
  std::map<int64_t, std::vector<int64_t>> emitted;  // request id -> token emission times
  // Slots (server thread only).
  int active = 0;
  std::deque<asio::steady_timer*> waiters;
  bool stopping = false;
  // Declared last so they are destroyed first: destroying the io_context destroys suspended
  // coroutines, whose destructors may still look at the members above.
  asio::io_context io;
  tcp::acceptor acceptor;

  awaitable<void> AcquireSlot() {
    if (options.max_active <= 0) co_return;
    while (active >= options.max_active) {
      asio::steady_timer wake(io, Clock::time_point::max());
      waiters.push_back(&wake);
      beast::error_code ec;
      co_await wake.async_wait(asio::redirect_error(use_awaitable, ec));
      if (stopping) co_return;
    }
    ++active;
  }

  void ReleaseSlot() {
    if (options.max_active <= 0 || stopping) return;
    --active;
    if (!waiters.empty()) {
      asio::steady_timer* next = waiters.front();
      waiters.pop_front();
      next->cancel();
    }
  }
};

namespace {

using State = FixtureServer::State;

// Collects response bytes and writes them in as few syscalls as the timing allows.
int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

class Output {
 public:
  // `emitted` (may be null) receives the time each token event is handed to the socket.
  Output(beast::tcp_stream& stream, bool split, std::vector<int64_t>* emitted = nullptr)
      : stream_(stream), split_(split), emitted_(emitted) {}

  void Append(std::string_view bytes) { pending_ += bytes; }

  // An SSE event as an HTTP chunk; with split_writes, as several chunks written separately.
  awaitable<bool> Event(std::string event, bool token = false) {
    if (!split_) {
      Append(HttpChunk(event));
      if (token) ++pending_tokens_;
      co_return true;
    }
    // Cut at awkward places: inside "data:", mid-JSON, and right before the final line break.
    size_t cuts[] = {1, 3, event.size() / 2, event.size() - 1};
    size_t from = 0;
    for (size_t cut : cuts) {
      if (cut <= from || cut >= event.size()) continue;
      Append(HttpChunk(std::string_view(event).substr(from, cut - from)));
      if (!co_await Flush()) co_return false;
      from = cut;
    }
    Append(HttpChunk(std::string_view(event).substr(from)));
    if (token) ++pending_tokens_;
    co_return co_await Flush();
  }

  awaitable<bool> Flush() {
    if (pending_.empty()) co_return true;
    if (emitted_ != nullptr) {
      const int64_t now = SteadyNowNs();
      for (; pending_tokens_ > 0; --pending_tokens_) emitted_->push_back(now);
    }
    beast::error_code ec;
    co_await asio::async_write(stream_, asio::buffer(pending_),
                               asio::redirect_error(use_awaitable, ec));
    pending_.clear();
    co_return !ec;
  }

 private:
  beast::tcp_stream& stream_;
  bool split_;
  std::vector<int64_t>* emitted_;
  int pending_tokens_ = 0;
  std::string pending_;
};

std::string TokenChunk(const std::string& model, std::string_view text, bool last) {
  nlohmann::json chunk = {
      {"id", "cmpl-fixture"},
      {"object", "text_completion"},
      {"created", 0},
      {"model", model},
      {"choices",
       {{{"index", 0},
         {"text", text},
         {"logprobs", nullptr},
         {"finish_reason", last ? nlohmann::json("length") : nlohmann::json(nullptr)}}}},
      {"usage", nullptr}};
  return chunk.dump();
}

std::string UsageChunk(const std::string& model, int prompt_tokens, int completion_tokens) {
  nlohmann::json chunk = {{"id", "cmpl-fixture"},
                          {"object", "text_completion"},
                          {"created", 0},
                          {"model", model},
                          {"choices", nlohmann::json::array()},
                          {"usage",
                           {{"prompt_tokens", prompt_tokens},
                            {"completion_tokens", completion_tokens},
                            {"total_tokens", prompt_tokens + completion_tokens}}}};
  return chunk.dump();
}

std::string SimpleResponse(int status, std::string_view reason, std::string_view content_type,
                           const std::string& body, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                    "\r\nContent-Type: " + std::string(content_type) +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (!keep_alive) out += "Connection: close\r\n";
  out += "\r\n" + body;
  return out;
}

awaitable<void> SleepUntil(asio::io_context& io, Clock::time_point due) {
  if (Clock::now() >= due) co_return;
  asio::steady_timer timer(io, due);
  beast::error_code ec;
  co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
}

// The request's id: its X-Request-Id header when it holds a number, else the next of the server.
int64_t RequestIdOf(State& state, const http::request<http::string_body>& request) {
  int64_t id = -1;
  auto it = request.find("X-Request-Id");
  if (it != request.end()) {
    try {
      id = std::stoll(std::string(it->value()));
    } catch (const std::exception&) {
      id = -1;
    }
  }
  return id >= 0 ? id : state.next_id.fetch_add(1);
}

// A whole (non-streamed) completion of `tokens` tokens " t0 t1 ...", with its usage.
std::string CompletionJson(const std::string& model, int tokens, int prompt_tokens) {
  std::string text;
  for (int k = 0; k < tokens; ++k) text += " t" + std::to_string(k);
  const nlohmann::json response = {
      {"id", "cmpl-fixture"},
      {"object", "text_completion"},
      {"created", 0},
      {"model", model},
      {"choices", {{{"index", 0}, {"text", text}, {"finish_reason", "length"}}}},
      {"usage",
       {{"prompt_tokens", prompt_tokens},
        {"completion_tokens", tokens},
        {"total_tokens", prompt_tokens + tokens}}}};
  return response.dump();
}

// Serves one completions request. Returns false when the connection must be closed.
awaitable<bool> ServeCompletion(State& state, beast::tcp_stream& stream,
                                const http::request<http::string_body>& request) {
  state.completions->fetch_add(1);
  nlohmann::json body = nlohmann::json::parse(request.body(), nullptr, false);
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.last_body = body;
  }
  if (body.is_discarded() || !body.is_object()) {
    std::string err =
        R"({"error":{"message":"body is not JSON","type":"invalid_request_error","code":400}})";
    Output out(stream, false);
    out.Append(SimpleResponse(400, "Bad Request", "application/json", err, true));
    co_return co_await out.Flush();
  }
  const int64_t id = RequestIdOf(state, request);
  FixtureReply reply = state.options.plan ? state.options.plan(id) : FixtureReply{};
  const int max_tokens = body.value("max_tokens", 16);
  const bool streaming = body.value("stream", false);
  const int tokens = reply.tokens >= 0 ? reply.tokens : max_tokens;
  const int prompt_tokens = PromptTokens(body);
  const std::string& model = state.options.model;
  using Kind = FixtureReply::Kind;

  if (reply.kind == Kind::kClose) {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
    co_return false;
  }
  if (reply.kind == Kind::kHttpError) {
    nlohmann::json err = {
        {"error",
         {{"message", "fixture error " + std::to_string(reply.status)},
          {"type", reply.status >= 500 ? "server_error" : "invalid_request_error"},
          {"code", reply.status}}}};
    Output out(stream, false);
    out.Append(SimpleResponse(reply.status, "Fixture Error", "application/json", err.dump(), true));
    co_return co_await out.Flush();
  }
  if (reply.kind == Kind::kStall) {
    // Hold the connection, reading until the client closes it (or the server stops).
    char sink[512];
    beast::error_code ec;
    while (!ec) {
      co_await stream.socket().async_read_some(asio::buffer(sink),
                                               asio::redirect_error(use_awaitable, ec));
    }
    co_return false;
  }

  co_await state.AcquireSlot();
  if (state.stopping) co_return false;
  struct SlotGuard {
    State& s;
    ~SlotGuard() { s.ReleaseSlot(); }
  } guard{state};
  const Clock::time_point start = Clock::now();
  auto due = [&](int k) {
    double ms = reply.ttft_ms + reply.itl_ms * k;
    return start + std::chrono::nanoseconds(static_cast<int64_t>(ms * 1e6));
  };

  if (!streaming) {
    co_await SleepUntil(state.io, due(std::max(tokens - 1, 0)));
    Output out(stream, false);
    out.Append(SimpleResponse(200, "OK", "application/json",
                              CompletionJson(model, tokens, prompt_tokens), true));
    co_return co_await out.Flush();
  }

  // Keeps the true emission times for the test, whatever way this request ends.
  struct EmissionLog {
    State& s;
    int64_t id;
    std::vector<int64_t> times;
    ~EmissionLog() {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.emitted[id] = std::move(times);
    }
  } log{state, id, {}};
  const std::string eol = reply.crlf ? "\r\n" : "\n";
  auto event = [&](const std::string& data) {
    std::string e;
    if (reply.comments) e += ": ping" + eol;
    e += "data: " + data + eol + eol;
    return e;
  };
  Output out(stream, reply.split_writes, &log.times);
  out.Append(std::string("HTTP/1.1 200 OK\r\nContent-Type: ") +
             (reply.kind == Kind::kWrongContentType ? "application/json" : "text/event-stream") +
             "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int e = 0; e < reply.empty_chunks_first; ++e) {
    if (!co_await out.Event(event(TokenChunk(model, "", false)))) co_return false;
  }
  if (!co_await out.Flush()) co_return false;
  for (int k = 0; k < tokens; ++k) {
    bool fault_now = k == reply.fault_after_tokens;
    if (fault_now && reply.kind == Kind::kResetMidStream) {
      co_await out.Flush();
      beast::error_code ignored;
      stream.socket().set_option(asio::socket_base::linger(true, 0), ignored);
      stream.socket().close(ignored);
      co_return false;
    }
    if (fault_now && reply.kind == Kind::kMalformedSse) {
      if (!co_await out.Event(event("{\"choices\": [{\"text\": \"broken"))) co_return false;
    }
    if (fault_now && reply.kind == Kind::kErrorEvent) {
      if (!co_await out.Event(event(
              R"({"error":{"message":"fixture stream error","type":"server_error","code":500}})"))) {
        co_return false;
      }
      break;
    }
    if (Clock::now() < due(k)) {
      if (!co_await out.Flush()) co_return false;
      co_await SleepUntil(state.io, due(k));
    }
    if (!co_await out.Event(event(TokenChunk(model, " t" + std::to_string(k), k == tokens - 1)),
                            /*token=*/true)) {
      co_return false;
    }
  }
  if (reply.send_usage && reply.kind != Kind::kErrorEvent) {
    if (!co_await out.Event(event(UsageChunk(model, prompt_tokens, tokens)))) co_return false;
  }
  if (reply.kind != Kind::kNoDone) {
    if (!co_await out.Event(event("[DONE]"))) co_return false;
  }
  out.Append("0\r\n\r\n");
  co_return co_await out.Flush();
}

awaitable<void> Session(State& state, tcp::socket socket) {
  state.connections->fetch_add(1);
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    // Not boost::none: Beast 1.74 compares a Content-Length against an empty optional and
    // rejects every body.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    beast::error_code ec;
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    const http::request<http::string_body>& request = parser.get();
    std::string target(request.target());
    bool keep_going = request.keep_alive();
    if (request.method() == http::verb::post && target == "/v1/completions") {
      if (!co_await ServeCompletion(state, stream, request)) co_return;
      if (state.options.close_after_response) {
        stream.socket().close(ignored);
        co_return;
      }
    } else {
      std::string out;
      if (request.method() == http::verb::get && target == "/v1/models") {
        nlohmann::json models = {
            {"object", "list"},
            {"data", {{{"id", state.options.model}, {"object", "model"}, {"owned_by", "kvgate"}}}}};
        out = SimpleResponse(200, "OK", "application/json", models.dump(), keep_going);
      } else if (request.method() == http::verb::get && target == "/health") {
        out = SimpleResponse(200, "OK", "text/plain", "ok", keep_going);
      } else {
        out = SimpleResponse(
            404, "Not Found", "application/json",
            R"({"error":{"message":"not found","type":"invalid_request_error","code":404}})",
            keep_going);
      }
      co_await asio::async_write(stream, asio::buffer(out),
                                 asio::redirect_error(use_awaitable, ec));
      if (ec) co_return;
    }
    if (!keep_going) {
      stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      co_return;
    }
  }
}

awaitable<void> AcceptLoop(State& state) {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket =
        co_await state.acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !state.acceptor.is_open()) co_return;
      continue;
    }
    asio::co_spawn(state.io, Session(state, std::move(socket)), [](std::exception_ptr error) {
      // A fixture bug must be loud: the client would only see a closed connection.
      if (!error) return;
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fixture server: session failed: %s\n", e.what());
      }
    });
  }
}

}  // namespace

FixtureServer::FixtureServer(FixtureOptions options)
    : options_(std::move(options)), state_(std::make_shared<State>(options_)) {
  state_->completions = &completions_;
  state_->connections = &connections_;
  tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  state_->acceptor.open(endpoint.protocol());
  state_->acceptor.set_option(asio::socket_base::reuse_address(true));
  state_->acceptor.bind(endpoint);
  state_->acceptor.listen(asio::socket_base::max_listen_connections);
  port_ = state_->acceptor.local_endpoint().port();
  asio::co_spawn(state_->io, AcceptLoop(*state_), asio::detached);
  thread_ = std::thread([state = state_] {
#ifdef __linux__
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // precise token timing
#endif
    state->io.run();
  });
}

FixtureServer::~FixtureServer() {
  asio::post(state_->io, [state = state_] {
    state->stopping = true;
    beast::error_code ignored;
    state->acceptor.close(ignored);
    for (asio::steady_timer* waiter : state->waiters) waiter->cancel();
    state->waiters.clear();
    state->io.stop();
  });
  thread_.join();
}

std::vector<int64_t> FixtureServer::EmittedTokenNs(int64_t request_id) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->emitted.find(request_id);
  return it == state_->emitted.end() ? std::vector<int64_t>{} : it->second;
}

nlohmann::json FixtureServer::last_request_body() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->last_body;
}

std::string FixtureServer::ClosedPortUrl() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  uint16_t port = acceptor.local_endpoint().port();
  acceptor.close();
  return "http://127.0.0.1:" + std::to_string(port);
}

}  // namespace kvgate::loadgen::testing
