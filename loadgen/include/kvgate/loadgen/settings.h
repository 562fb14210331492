// What a load run does: the one settings struct a caller fills in (the CLI `kvgate load`, or the
// gates calling the library). Modelled on MLPerf LoadGen's TestSettings: every field has a
// default and a unit, and ValidateSettings() checks the whole struct once, before anything runs,
// throwing SettingsError that names the field.
//
// Plain data; copyable; no thread-safety concerns.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::loadgen {

// A setting that is out of range or inconsistent. field() is the settings field (or CLI flag
// without dashes) that is wrong, so a caller can point at it.
class SettingsError : public std::invalid_argument {
 public:
  SettingsError(std::string field, const std::string& message)
      : std::invalid_argument(field + ": " + message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// Open loop sends at pre-scheduled times regardless of responses; closed loop keeps a fixed
// number of requests in flight and sends the next one when one finishes.
enum class LoadMode { kOpenLoop, kClosedLoop };

// Inter-arrival distribution of an open-loop schedule.
//   kPoisson:  exponential gaps with mean 1/rate.
//   kGamma:    gamma gaps with shape = burstiness and scale = 1/(rate * burstiness) — vLLM
//              `bench serve --burstiness` definition (mean gap 1/rate at any burstiness; 1 is
//              Poisson, < 1 burstier, > 1 more regular; the gaps' CV is 1/sqrt(burstiness)).
//   kConstant: every gap exactly 1/rate.
enum class Arrival { kPoisson, kGamma, kConstant };

// A distribution of a per-request length (prompt words or output tokens).
//   kConstant:  always `mean`.
//   kUniform:   integers in [mean*(1-spread), mean*(1+spread)] (vLLM's --random-range-ratio).
//   kNormal:    normal with sd = spread*mean, rounded.
//   kLogNormal: log-normal with sigma = spread (of the log) and the given mean.
// Samples are clamped to [1, max].
enum class LengthDistributionKind { kConstant, kUniform, kNormal, kLogNormal };

struct LengthDistribution {
  LengthDistributionKind kind = LengthDistributionKind::kConstant;
  int mean = 128;       // words for prompts, tokens for outputs
  double spread = 0.0;  // meaning depends on kind, see above; >= 0
  int max = 1 << 20;    // upper clamp
};

enum class WorkloadKind {
  kSynthetic,   // seeded text of words drawn from a fixed vocabulary, lengths from `input`
  kPasskey,     // docs/definitions.md's passkey template at the given lengths and depths
  kPromptFile,  // JSONL: {"prompt": string or [token ids], "max_tokens": int (optional)}
  kShareGpt,    // ShareGPT conversations (datasets.h): first human turn, its gpt reply's length
  kTrace,       // Mooncake JSONL trace (datasets.h): sent at its timestamps, shared prefix blocks
};

// What a synthetic prompt's length counts.
//   kWords:  words of the fixed vocabulary (approximate tokens; the server's usage tells).
//   kTokens: the server's tokens, as its vLLM-style POST /tokenize counts them for the request
//            as sent (chat: the templated messages), BOS included, i.e. usage.prompt_tokens.
//            Each prompt is cut to the target by asking /tokenize (loadgen/src/token_sizer.h);
//            a server without /tokenize falls back to words and the result says so.
enum class InputUnit { kWords, kTokens };

struct WorkloadSettings {
  WorkloadKind kind = WorkloadKind::kSynthetic;
  InputUnit input_unit = InputUnit::kWords;  // synthetic only
  // Prompt length in words (synthetic). The server's `usage` gives the real token count.
  LengthDistribution input{LengthDistributionKind::kConstant, 128, 0.0, 1 << 20};
  // max_tokens per request (sent with ignore_eos, so every request generates exactly this many
  // tokens on a compliant server). Used by every workload kind unless the prompt file sets it.
  LengthDistribution output{LengthDistributionKind::kConstant, 128, 0.0, 1 << 20};
  // Passkey: request i uses length passkey_lengths[i % L] (approximate words) and depth
  // passkey_depths[(i / L) % D] (0 = needle first, 1 = needle last); keys are seeded.
  std::vector<int> passkey_lengths = {1024};
  std::vector<double> passkey_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  // Prompt file (JSONL); request i uses line i % lines.
  std::string prompt_file;
  // ShareGPT JSON (kShareGpt): the first human turn of a conversation is the prompt and the
  // token count of the gpt reply that follows is max_tokens (vLLM `bench serve`'s rule, with its
  // pruning, kvgate/loadgen/datasets.h); pairs picked in a seeded order. Counts come from the
  // server's POST /tokenize, else from ApproximateTokens (the result says which).
  std::string dataset;
  // Mooncake trace (kTrace, open loop only): request k is line k, sent at (timestamp_k -
  // timestamp_0) / time_scale, with output_length as max_tokens and a prompt of input_length
  // vocabulary words built from blocks of trace_block_tokens words, one block per hash id, so
  // equal hash ids are equal text (TracePrompt). The whole trace unless requests/duration cut it.
  std::string trace;
  double time_scale = 1.0;      // > 1 replays faster
  int trace_block_tokens = 512;  // Mooncake's block size
  // 0: every request has its own prompt. K > 0: request i reuses prompt i % K (bounds memory
  // for long prompts; note that a server with prefix caching then sees repeats).
  int64_t distinct_prompts = 0;
  // Multi-turn sessions (docs/workloads.md, "Multi-turn sessions"). 1 = every request is on its
  // own (today's requests, byte for byte). N > 1: each closed-loop slot (open loop: each
  // arrival) runs a conversation of up to N turns; turn 1 is the workload's request, turn k + 1
  // sends the whole conversation so far (every earlier prompt and the server's replies as
  // returned) plus a new user message, the workload's request of that turn's index. Chat sends
  // it as a growing `messages` list (user/assistant), completions as one text with
  // kTurnSeparator before each new user message. At most kMaxMultiTurn.
  int multi_turn = 1;
  // Mean pause in milliseconds between a reply and the session's next turn: each pause is drawn
  // uniformly from [1, 2 * think_time_ms] (seeded by the turn's request index). 0 = none.
  // At most kMaxThinkTimeMs.
  int think_time_ms = 0;
  // > 0: a session ends before a turn whose request would pass this many tokens (the previous
  // turn's usage.prompt_tokens + completion_tokens, the new message at bytes/4, its max_tokens):
  // the model's context. 0 = no limit (N turns bound the session).
  int max_context_tokens = 0;
};

// Bounds of the multi-turn settings (a typo must fail clearly, not run for days).
inline constexpr int kMaxMultiTurn = 1000;
inline constexpr int kMaxThinkTimeMs = 600'000;
// What separates the turns of a completions conversation: the text of turn k + 1 is turn k's
// prompt, its reply as returned, kTurnSeparator, then the new user message.
inline constexpr std::string_view kTurnSeparator = "\n\n";

// Service-level objectives in milliseconds; an unset field is not checked. A request meets the
// SLO when it completed without error and every set bound holds (TPOT is not checked for a
// request with exactly one output token; a request whose server sent no `usage` cannot show its
// TPOT and therefore does not meet a TPOT bound).
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2e_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2e_ms; }
};

// Parses "ttft_ms=500,tpot_ms=50[,e2e_ms=…]"; throws SettingsError("slo", …) on a bad entry.
Slo ParseSlo(std::string_view text);
std::string FormatSlo(const Slo& slo);

// When an open-loop run is marked INVALID (the generator could not hold its own schedule;
// docs/definitions.md, "Validity of a load run"). The P99 send lag (sent - scheduled) may reach
// the larger of an absolute floor and a share of the run's own P99 TTFT: a send L ms late adds
// L ms to that request's TTFT, so the run's P99 TTFT moves by at most its P99-level lag, and a
// share of 2% keeps that well inside a P99 gate's 5% margin, where a fixed 1 ms called a run
// INVALID for one late wake-up while its latencies were 100x larger. A closed loop has no
// schedule to fall behind: its send lag is reported, never judged.
struct ValidityThresholds {
  double max_send_lag_p99_ms = 1.0;          // the floor of the P99 send lag bound, milliseconds
  double max_send_lag_share = 0.02;          // ... or this share of the run's P99 TTFT, if larger
  double min_achieved_rate_fraction = 0.99;  // achieved send rate / scheduled rate (open loop)
};

struct LoadSettings {
  LoadMode mode = LoadMode::kOpenLoop;
  // Open loop.
  double rate_rps = 1.0;  // offered rate, requests per second (> 0)
  Arrival arrival = Arrival::kPoisson;
  double burstiness = 1.0;  // gamma shape, see Arrival (> 0)
  // Closed loop.
  int concurrency = 1;  // requests in flight

  // Bounds; the run ends at whichever comes first. If both are 0, `kDefaultRequests` applies.
  int64_t requests = 0;     // number of requests including warmup; 0 = no count bound
  double duration_s = 0.0;  // seconds of schedule (open loop) / of issuing (closed loop); 0 = none
  int64_t warmup_requests = 0;  // the first N requests are sent but excluded from metrics

  // Each request must finish within this many seconds of its scheduled time or it fails with
  // cause "timeout". Together with the bounds this guarantees that a run ends by itself.
  double request_timeout_s = 300.0;
  uint64_t seed = 0;  // arrivals and workload are a pure function of (settings, seed)

  WorkloadSettings workload;
  Slo slo;  // for goodput in the summary; empty = every completed request counts as good
  ValidityThresholds validity;

  // Request body options (OpenAI completions API).
  bool stream = true;        // SSE streaming; false measures TTFT = E2E
  double temperature = 0.0;  // 0 = greedy
  bool ignore_eos = true;    // so A and B generate the same number of tokens
  // > 0: every request also carries vLLM's `min_tokens` (min(min_tokens, its max_tokens)) and
  // `ignore_eos: true`, for servers that stop early without it; LoadResult::output_lengths says
  // whether the outputs then had exactly max_tokens tokens. 0 = not sent.
  int min_tokens = 0;
  // Merged into every request body last (top-level keys), e.g. {"readkv": {"read_bits": 4}}
  // for a ReadKV candidate; null or an object that names no ReservedRequestField.
  nlohmann::json extra_body;

  // Client-side cap on open connections to the target. A request that finds every connection
  // busy waits for one, and that wait counts as send lag (so a cap the schedule outruns shows up
  // as an INVALID run, not as silently lower load).
  int max_connections = 8192;
  // The scheduler wakes this many microseconds before a send time and spins the rest, trading a
  // little CPU for send-time precision (0 = never spin).
  int spin_us = 100;
  // > 0: the run's thread (which does all sending) runs under SCHED_FIFO at this priority
  // (1..99) for the run, so that other work on a shared machine cannot delay sends. Linux only;
  // needs CAP_SYS_NICE, else RunLoad throws SettingsError. 0 = normal scheduling.
  int realtime_priority = 0;
  // Memory guard: the pre-rendered request bodies of one run may not exceed this many bytes.
  int64_t max_schedule_bytes = int64_t{4} << 30;

  static constexpr int64_t kDefaultRequests = 1000;
};

// Checks ranges and consistency; throws SettingsError naming the field.
void ValidateSettings(const LoadSettings& settings);

// The first top-level key of `extra_body` that names a field the load generator or the quality
// checks set themselves (prompt, messages, model, max_tokens, min_tokens, ignore_eos,
// temperature, stream, stream_options, stop, n, best_of, max_completion_tokens), or "" when none
// does. An extra body may not override them: merged last, it would change what is measured on
// one side only (a candidate asked for fewer tokens looks faster), so every reader of an extra
// body refuses such a key, naming it.
std::string ReservedRequestField(const nlohmann::json& extra_body);

// Name <-> enum, for the CLI and JSON. Parse* throws SettingsError(field, …) on unknown names.
std::string_view ArrivalName(Arrival arrival);
Arrival ParseArrival(std::string_view name);
std::string_view LoadModeName(LoadMode mode);
std::string_view LengthDistributionName(LengthDistributionKind kind);
LengthDistributionKind ParseLengthDistribution(std::string_view name, const std::string& field);
std::string_view WorkloadName(WorkloadKind kind);
std::string_view InputUnitName(InputUnit unit);  // "words" | "tokens"
InputUnit ParseInputUnit(std::string_view name);  // throws SettingsError("input-unit", ...)
WorkloadKind ParseWorkload(std::string_view name);

}  // namespace kvgate::loadgen
