// Session's completions: a parsed request handed to the engine, the engine's events turned into
// the OpenAI answer (one JSON body, or an SSE stream of chunks ending in `data: [DONE]`), and the
// SSE writer. Chat and completions share all of it; only the shapes differ.
#include <spdlog/spdlog.h>

#include <stdexcept>

#include "readkv/server/chat_request.h"
#include "readkv/server/completion_request.h"
#include "session.h"

namespace readkv::server::detail {
namespace {

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

}  // namespace

void Session::HandleCompletion(const Request& request, bool chat) {
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

void Session::OnEvents() {
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

json Session::ChunkBase() const {
  return {{"id", completion_id_},
          {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", shared_.served_model}};
}

json Session::Usage(const engine::GenerationEvent& finished) {
  return {{"prompt_tokens", finished.prompt_tokens},
          {"completion_tokens", finished.completion_tokens},
          {"total_tokens", finished.prompt_tokens + finished.completion_tokens}};
}

// Completions: choices[0].text. Chat: a first chunk with the assistant role (no text), then
// choices[0].delta.content ({} when a chunk carries no text), as OpenAI and vLLM stream.
void Session::AppendChunk(const std::string& text, const char* finish_reason) {
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

json Session::CompletionBody(const engine::GenerationEvent& finished) const {
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

void Session::Log(const engine::GenerationEvent& finished) const {
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
void Session::LogFirstTokenTimeline() const {
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

// Writes, one at a time: the header, then every pending SSE byte as one chunk, then (once
// finishing) the last chunk. HTTP/1.0 clients get the raw stream and a close instead.
void Session::Pump() {
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

}  // namespace readkv::server::detail
