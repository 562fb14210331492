// `kvgate serve`: the reference decode server. Loads the model runtime (readkv/model) with the
// chosen KV backend, puts the continuous-batching engine (readkv/engine) and the OpenAI-compatible
// HTTP server (readkv/server) in front of it, prints `listening on HOST:PORT` as the only line on
// stdout, and serves until SIGTERM or SIGINT, which drains and exits 0.
#include <fcntl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kvgate/command.h"
#include "readkv/codec/readers.h"
#include "readkv/engine/engine.h"
#include "readkv/engine/tokenizer.h"
#include "readkv/model/cli.h"
#include "readkv/model/config.h"
#include "readkv/model/runtime.h"
#include "readkv/model/tokenizer.h"
#include "readkv/server/server.h"

namespace kvgate {
namespace {

// SIGTERM/SIGINT arrive on whichever thread the kernel picks (torch and Asio own several), so
// the handler only writes a byte to a pipe that the main thread waits on.
int g_signal_pipe[2] = {-1, -1};

extern "C" void OnServeStopSignal(int signal_number) {
  const auto byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
}

int WaitForStopSignal() {
  unsigned char byte = 0;
  for (;;) {
    const ssize_t n = ::read(g_signal_pipe[0], &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    throw std::runtime_error("signal pipe failed");
  }
}

void InstallStopHandlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  struct sigaction action {};
  action.sa_handler = OnServeStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a vanished client is an error code, never a process kill
}

struct ServeOptions {
  std::string model_dir;
  std::string served_model_name;
  std::string log_level = "info";
  int max_batch = 8;
  int max_waiting = 64;
  int prefill_chunk = 0;
  double drain_timeout_s = 20.0;
  double idle_timeout_s = 30.0;
  double inject_step_delay_ms = 0.0;  // test aid only
  readkv::server::ServerOptions server;
};

// The flags' ranges and combinations, each refused with the flag it names (exit 2).
void ValidateServeOptions(const ServeOptions& o, const readkv::model::RuntimeOptions& runtime) {
  if (o.max_batch < 1) throw UsageError("--max-batch must be >= 1");
  if (o.max_waiting < 0) throw UsageError("--max-waiting must be >= 0");
  if (o.prefill_chunk < 0) throw UsageError("--prefill-chunk must be >= 0");
  if (o.prefill_chunk > 0 && !runtime.prefix_cache.directory.empty()) {
    throw UsageError(
        "--prefill-chunk: a prompt in chunks cannot go through the persistent prefix cache "
        "(--cache-dir); use one or the other");
  }
  if (!(o.drain_timeout_s >= 0.0)) throw UsageError("--drain-timeout must be >= 0");
  if (!(o.idle_timeout_s > 0.0)) throw UsageError("--idle-timeout must be > 0");
  if (o.server.threads < 1) throw UsageError("--http-threads must be >= 1");
  if (o.server.max_body_bytes < 1) throw UsageError("--max-body-bytes must be >= 1");
  if (o.server.max_header_bytes < 512) {
    throw UsageError("--max-header-bytes must be >= 512");
  }
  if (o.server.retry_after_seconds < 0) throw UsageError("--retry-after must be >= 0");
  if (o.server.max_connections < 0) throw UsageError("--max-connections must be >= 0");
  if (!(o.inject_step_delay_ms >= 0.0 && o.inject_step_delay_ms <= 60000.0)) {
    throw UsageError("--inject-step-delay-ms must be in [0, 60000]");
  }
}

void AddServeCommand(CLI::App& app, CommandContext& context) {
  auto* cmd = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (dense, fp8 or readkv KV cache)");
  auto options = std::make_shared<ServeOptions>();
  options->model_dir = readkv::model::DefaultModelDirectory();
  // --kv, --store-bits, --read-bits, --reader, --kv-split, --fp8-scale, --prefill, --device,
  // --dtype, --threads (torch intra-op), --cuda-graphs, --calibration: shared with the other model
  // commands.
  auto runtime_flags = std::make_shared<readkv::model::RuntimeFlags>(*cmd);
  cmd->add_option("--model", options->model_dir,
                  "model directory (config.json + "
                  "model.safetensors)")
      ->capture_default_str();
  cmd->add_option("--served-model-name", options->served_model_name,
                  "the name /v1/models lists and requests must use (default: the model id)");
  cmd->add_option("--host", options->server.host, "address to bind")->capture_default_str();
  cmd->add_option("--port", options->server.port, "port to bind; 0 = any free port")
      ->capture_default_str();
  cmd->add_option("--max-batch", options->max_batch, "sequences decoded together, >= 1")
      ->capture_default_str();
  cmd->add_option("--max-waiting", options->max_waiting,
                  "requests queued beyond the batch before answering 429, >= 0")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", options->prefill_chunk,
                  "prompt tokens fed per step over all new sequences, so running ones keep "
                  "decoding while a long prompt is read (chunked prefill; each chunk attends "
                  "exactly to the ones before it); 0 = each prompt whole in one step")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", options->server.max_body_bytes,
                  "largest request body; larger gets 413")
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", options->server.max_header_bytes,
                  "largest request header; larger gets 431")
      ->capture_default_str();
  cmd->add_option("--http-threads", options->server.threads, "HTTP I/O threads")
      ->capture_default_str();
  cmd->add_option("--idle-timeout", options->idle_timeout_s,
                  "seconds a connection may sit idle or take to send a request")
      ->capture_default_str();
  cmd->add_option("--drain-timeout", options->drain_timeout_s,
                  "on SIGTERM, seconds in-flight requests get to finish before they are "
                  "cancelled (their streams end with an error event)")
      ->capture_default_str();
  cmd->add_option("--retry-after", options->server.retry_after_seconds,
                  "Retry-After seconds of a 429 or a connection-limit 503")
      ->capture_default_str();
  cmd->add_option("--max-connections", options->server.max_connections,
                  "open connections at once; one more gets 503 too_many_connections at once "
                  "(0 = the open-file limit, raised to its hard limit, less " +
                      std::to_string(readkv::server::kReservedDescriptors) + ")")
      ->capture_default_str();
  cmd->add_option("--log-level", options->log_level, "stderr log level: debug|info|warn|error")
      ->capture_default_str();
  cmd->add_option("--inject-step-delay-ms", options->inject_step_delay_ms,
                  "TEST AID, never for production: sleep this long after every decode step, so "
                  "the server is slower by a known amount (latency up, throughput down); "
                  "GET /v1/models shows it")
      ->capture_default_str();

  cmd->callback([options, runtime_flags, &context] {
    readkv::model::RuntimeOptions runtime = runtime_flags->Resolve();
    ValidateServeOptions(*options, runtime);
    const auto level = spdlog::level::from_str(options->log_level);
    if (level == spdlog::level::off && options->log_level != "off") {
      throw UsageError("--log-level: unknown level \"" + options->log_level + "\"");
    }

    // Logs go to stderr: stdout carries exactly one line, the address.
    auto logger = spdlog::stderr_color_mt("kvgate");
    spdlog::set_default_logger(logger);
    spdlog::set_level(level);
    InstallStopHandlers();

    // The persistent prefix cache reports refusals (with the differing identity field) and
    // failed writes as warnings, and each prompt's prefix-block hits as info.
    runtime.prefix_cache.warn = [](std::string_view line) { spdlog::warn("{}", line); };
    runtime.prefix_cache.info = [](std::string_view line) { spdlog::info("{}", line); };
    std::unique_ptr<readkv::engine::DecodeModel> model =
        readkv::model::LoadDecodeModel(options->model_dir, runtime);
    readkv::engine::TokenizerAdapter<readkv::model::Tokenizer> tokenizer(
        readkv::model::MakeTokenizer(readkv::model::ModelConfig::Load(options->model_dir)));

    readkv::engine::EngineOptions engine_options;
    engine_options.max_batch = options->max_batch;
    engine_options.max_waiting = options->max_waiting;
    engine_options.prefill_chunk = options->prefill_chunk;
    engine_options.model_name = options->served_model_name;
    engine_options.inject_step_delay = std::chrono::microseconds(
        static_cast<int64_t>(options->inject_step_delay_ms * 1000.0));
    if (options->inject_step_delay_ms > 0) {
      spdlog::warn("TEST AID: every decode step sleeps {} ms (--inject-step-delay-ms)",
                   options->inject_step_delay_ms);
    }
    readkv::engine::Engine engine(*model, tokenizer, engine_options);

    options->server.idle_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(options->idle_timeout_s * 1000.0));
    const long open_files = readkv::server::RaiseOpenFileLimit();
    readkv::server::Server server(engine, tokenizer, options->server);
    server.Start();
    std::cout << "listening on " << server.address() << std::endl;  // endl: scripts wait on it
    spdlog::info("open-file limit {}, at most {} connections", open_files,
                 server.max_connections());
    spdlog::info(
        "serving {} (kv={} store_bits={} read_bits={} reader={}) max_batch={} "
        "max_waiting={} prefill_chunk={}",
        engine.model_name(), engine.model_info().kv_backend, runtime.kv.store_bits,
        runtime.kv.read_bits, readkv::codec::ReaderName(runtime.kv.reader), options->max_batch,
        options->max_waiting, options->prefill_chunk);
    if (!runtime.prefix_cache.directory.empty()) {
      spdlog::info("prefix cache: {} (max {} bytes, 0 = unbounded)",
                   runtime.prefix_cache.directory, runtime.prefix_cache.max_bytes);
    }

    const int signal_number = WaitForStopSignal();
    spdlog::info("signal {}: draining (up to {} s), then exiting", signal_number,
                 options->drain_timeout_s);
    server.Shutdown(
        std::chrono::milliseconds(static_cast<int64_t>(options->drain_timeout_s * 1000.0)));
    const readkv::engine::EngineCounters counters = engine.counters();
    spdlog::info("stopped: {} finished, {} cancelled, {} errored, {} rejected", counters.finished,
                 counters.cancelled, counters.errored, counters.rejected_queue_full);
    if (const auto* llama = dynamic_cast<const readkv::model::LlamaDecodeModel*>(model.get());
        llama != nullptr && !runtime.prefix_cache.directory.empty()) {
      const readkv::model::PrefixCacheCounters cache = llama->prefix_cache_counters();
      int64_t refused = 0;
      for (const auto& [reason, count] : cache.rejections) refused += count;
      spdlog::info("prefix cache: {} hits, {} misses, {} refused, {} stored ({} bytes), {} evicted",
                   cache.hits, cache.misses, refused, cache.stored, cache.stored_bytes,
                   cache.evicted);
    }
    context.exit_code = 0;
  });
}

KVGATE_REGISTER_COMMAND(100, AddServeCommand);

}  // namespace
}  // namespace kvgate
