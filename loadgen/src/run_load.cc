// RunLoad: settings and target checked, the schedule planned (PlanSchedule), the workload
// rendered into request bodies (RequestBodies), then one Run (run_loop.h) on this thread. The
// client: one io_context on the calling thread runs the scheduler, a keep-alive connection
// pool and every request's state machine (connect → write → streamed read), so nothing needs a
// lock and a send is never delayed by a hand-off between threads.
#include "kvgate/loadgen/run_load.h"

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "file_workloads.h"
#include "http_target.h"
#include "run_loop.h"
#include "session.h"
#include "thread_guards.h"
#include "token_sizer.h"
#include "kvgate/http/stream.h"
#include "kvgate/loadgen/datasets.h"
#include "kvgate/loadgen/schedule.h"
#include "kvgate/secrets/redact.h"
#include "kvgate/stats/random.h"

namespace kvgate::loadgen {
namespace {

using internal::Clock;
using internal::PreparedRequest;
using internal::RequestSource;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Time from building the run to the schedule's time zero: enough for the event loop to start
// so that request 0 is not late by construction.
constexpr auto kLead = std::chrono::milliseconds(20);

// A dataset workload of a closed loop bounded only by time cycles through this many requests.
constexpr int64_t kDatasetPoolRequests = 1000;

// The source's kind and path; its digest comes from the loader that parsed the file.
WorkloadSource SourceOf(const WorkloadSettings& workload) {
  WorkloadSource source{std::string(WorkloadName(workload.kind)), "", ""};
  switch (workload.kind) {
    case WorkloadKind::kPromptFile:
      source.path = workload.prompt_file;
      break;
    case WorkloadKind::kShareGpt:
      source.path = workload.dataset;
      break;
    case WorkloadKind::kTrace:
      source.path = workload.trace;
      break;
    case WorkloadKind::kSynthetic:
    case WorkloadKind::kPasskey:
      break;
  }
  return source;
}

// Fills LoadResult::output_lengths from the completed requests' usage.
void DescribeOutputLengths(LoadResult& result) {
  int64_t counted = 0, exact = 0, without_usage = 0;
  for (const RequestRecord& record : result.records) {
    if (!record.ok() || record.end_ns < 0) continue;
    if (record.completion_tokens < 0) {
      ++without_usage;
      continue;
    }
    ++counted;
    exact += record.completion_tokens == record.max_tokens;
  }
  result.output_tokens_exact = counted > 0 && exact == counted;
  result.output_lengths =
      counted == 0 ? "unknown: no completed request had usage.completion_tokens"
                   : "exact for " + std::to_string(exact) + "/" + std::to_string(counted) +
                         " completed requests (usage.completion_tokens == max_tokens)";
  if (counted > 0 && without_usage > 0) {
    result.output_lengths += "; " + std::to_string(without_usage) + " without usage";
  }
}

// The open loop's records, one per arrival, before the run (a closed loop adds its own).
std::deque<RequestRecord> ScheduledRecords(const LoadSettings& settings,
                                           const std::vector<int64_t>& arrivals) {
  std::deque<RequestRecord> records;
  if (settings.mode != LoadMode::kOpenLoop) return records;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    RequestRecord& record = records.emplace_back();
    record.index = static_cast<int64_t>(i);
    record.session = record.index;
    record.warmup = record.index < settings.warmup_requests;
    record.scheduled_ns = arrivals[i];
  }
  return records;
}

// The records moved into the result, with the summary, validity and output lengths.
void FinishResult(LoadResult& result, std::deque<RequestRecord>& records,
                  const LoadSettings& settings) {
  result.records.reserve(records.size());
  for (RequestRecord& record : records) result.records.push_back(std::move(record));
  result.settings = settings;
  result.summary = Summarize(result.records, settings.slo, MeasuredDurationSeconds(result.records));
  result.validity = CheckValidity(result.records, settings.mode, settings.validity);
  DescribeOutputLengths(result);
  if (result.stopped) {
    int64_t cancelled = 0;
    for (const RequestRecord& record : result.records) {
      cancelled += record.error_cause == "cancelled";
    }
    result.validity.valid = false;
    result.validity.reasons.insert(result.validity.reasons.begin(),
                                   "stopped by request before the run ended (" +
                                       std::to_string(cancelled) + " requests cancelled)");
  }
}

// What runs when: the arrivals (open loop, trace), how many requests are planned (0 = a closed
// loop bounded by time only) and the workload the bodies come from.
struct Schedule {
  std::vector<int64_t> arrivals;
  int64_t planned = 0;
  std::optional<Workload> workload;
};

Schedule PlanSchedule(const LoadSettings& settings, const Target& target,
                      const kvgate::http::Url& url, const std::string& model, LoadResult& result) {
  Schedule schedule;
  schedule.planned = settings.requests;
  if (settings.workload.kind == WorkloadKind::kTrace) {
    internal::BuiltTrace trace = internal::BuildTrace(settings);
    schedule.arrivals = std::move(trace.arrivals);
    schedule.planned = static_cast<int64_t>(schedule.arrivals.size());
    schedule.workload.emplace(std::move(trace.built.workload));
    result.input_lengths = std::move(trace.built.input_lengths);
    result.workload_source.sha256 = std::move(trace.built.sha256);
  } else if (settings.mode == LoadMode::kOpenLoop) {
    // With sessions the arrivals are when sessions start: enough of them for the request count.
    const int64_t turns = settings.workload.multi_turn;
    schedule.arrivals = GenerateArrivals(settings.arrival, settings.rate_rps, settings.burstiness,
                                         settings.seed, (settings.requests + turns - 1) / turns,
                                         settings.duration_s);
    schedule.planned = static_cast<int64_t>(schedule.arrivals.size());
    if (schedule.planned == 0) throw SettingsError("duration", "the schedule holds no request");
  }
  if (schedule.planned > 0 && settings.warmup_requests >= schedule.planned) {
    throw SettingsError("warmup", "all " + std::to_string(schedule.planned) +
                                      " scheduled requests would be warmup");
  }
  // Datasets measured in the server's tokens are chosen before the run, like token-true prompts.
  if (settings.workload.kind == WorkloadKind::kShareGpt) {
    const int64_t distinct = settings.workload.distinct_prompts;
    const int64_t count = distinct > 0           ? distinct
                          : schedule.planned > 0 ? schedule.planned
                                                 : kDatasetPoolRequests;
    internal::BuiltWorkload share = internal::BuildShareGpt(settings, count, url, target, model);
    schedule.workload.emplace(std::move(share.workload));
    result.input_lengths = std::move(share.input_lengths);
    result.input_tokens_exact = share.input_tokens_exact;
    result.workload_source.sha256 = std::move(share.sha256);
  }
  if (!schedule.workload) {
    schedule.workload.emplace(Workload::Create(settings.workload, settings.seed));
  }
  if (settings.workload.kind == WorkloadKind::kPromptFile) {
    result.workload_source.sha256 = schedule.workload->file_sha256();
  }
  return schedule;
}

// The request bodies of a run. Token-true lengths: each synthetic prompt is cut to its token
// target through /tokenize before the run (never inside the event loop). Bodies are rendered
// before the run when the count is known, so sending costs no JSON work; a closed loop bounded
// only by time renders them as it goes (its schedule is its pace), each distinct one once.
class RequestBodies {
 public:
  RequestBodies(const LoadSettings& settings, const Target& target, const kvgate::http::Url& url,
                const std::string& model, const Workload& workload, int64_t planned,
                LoadResult& result)
      : settings_(settings), target_(target), model_(model), workload_(workload) {
    if (settings.workload.input_unit != InputUnit::kTokens) return;
    if (planned == 0) {
      throw SettingsError("input-unit",
                          "tokens sizes prompts before the run: give --requests (a closed loop "
                          "bounded only by --duration renders its prompts as it goes)");
    }
    sizer_.emplace(url, target, model);
    if (!sizer_->Available()) {
      sizer_.reset();
      result.input_lengths =
          "words (approximate): tokens were asked for, but the server has no POST /tokenize";
    }
  }

  // The workload's request `index`, its prompt fitted to its token length when asked.
  RequestSpec Spec(int64_t index) {
    RequestSpec spec = workload_.At(index);
    if (sizer_) {
      internal::TokenSizer::Fitted fit =
          sizer_->Fit(spec.prompt.get<std::string>(), spec.input_length,
                      stats::DeriveSeed(settings_.seed, 0x70c6, static_cast<uint64_t>(index)));
      spec.prompt = std::move(fit.text);
      ++fitted_;
      exact_ += fit.exact;
    }
    return spec;
  }

  // Renders the `planned` bodies now (bounded by max_schedule_bytes).
  void RenderAll(int64_t planned) {
    const int64_t distinct = settings_.workload.distinct_prompts;
    prepared_.resize(static_cast<size_t>(planned));
    int64_t bytes = 0;
    for (int64_t i = 0; i < planned; ++i) {
      if (distinct > 0 && i >= distinct) {
        prepared_[static_cast<size_t>(i)] = prepared_[static_cast<size_t>(i % distinct)];
        continue;
      }
      prepared_[static_cast<size_t>(i)] = Render(i);
      bytes += static_cast<int64_t>(prepared_[static_cast<size_t>(i)].body->size());
      if (bytes > settings_.max_schedule_bytes) {
        throw SettingsError("max-schedule-bytes",
                            "the request bodies exceed " +
                                std::to_string(settings_.max_schedule_bytes) +
                                " bytes; use fewer requests, shorter prompts or distinct_prompts");
      }
    }
  }

  // The body of request `index`: rendered before the run, or now.
  PreparedRequest At(int64_t index) {
    if (index < static_cast<int64_t>(prepared_.size()) &&
        prepared_[static_cast<size_t>(index)].body) {
      return prepared_[static_cast<size_t>(index)];
    }
    if (const int64_t distinct = settings_.workload.distinct_prompts; distinct > 0) {
      // Closed loop bounded by time: render each distinct request once and reuse it.
      if (static_cast<int64_t>(prepared_.size()) < distinct) {
        prepared_.resize(static_cast<size_t>(distinct));
      }
      PreparedRequest& slot = prepared_[static_cast<size_t>(index % distinct)];
      if (!slot.body) slot = Render(index % distinct);
      return slot;
    }
    return Render(index);
  }

  // Says in the result how exact the token-true prompts came out.
  void Describe(LoadResult& result) const {
    if (!sizer_) return;
    result.input_tokens_exact = exact_ == fitted_;
    result.input_lengths = "tokens, exact for " + std::to_string(exact_) + "/" +
                           std::to_string(fitted_) + " prompts (server /tokenize, " +
                           std::to_string(sizer_->calls()) + " calls)";
  }

 private:
  PreparedRequest Render(int64_t index) {
    RequestSpec spec = Spec(index);
    return PreparedRequest{std::make_shared<const std::string>(internal::RenderBody(
                               model_, spec, settings_, target_.endpoint)),
                           spec.max_tokens};
  }

  const LoadSettings& settings_;
  const Target& target_;
  const std::string& model_;
  const Workload& workload_;
  std::optional<internal::TokenSizer> sizer_;
  std::vector<PreparedRequest> prepared_;
  int64_t fitted_ = 0, exact_ = 0;
};

}  // namespace

LoadResult RunLoad(const LoadSettings& settings_in, const Target& target, LiveCounters* counters,
                   const std::atomic<bool>* stop) {
  LoadSettings settings = settings_in;
  ValidateSettings(settings);
  // A trace runs whole unless bounded; other workloads default to kDefaultRequests.
  if (settings.requests == 0 && settings.duration_s == 0 &&
      settings.workload.kind != WorkloadKind::kTrace) {
    settings.requests = LoadSettings::kDefaultRequests;
  }
  const kvgate::http::Url url = internal::ParseTargetUrl(target);
  std::optional<kvgate::http::TlsContext> tls;
  tcp::resolver::results_type endpoints;
  try {
    tls.emplace(url, target.client);
    endpoints = kvgate::http::Resolve(url);
  } catch (const kvgate::http::ConfigError& e) {
    throw TargetError(std::string("--") + e.field() + " " + e.what());
  }
  const std::string model = target.model.empty() ? DiscoverModel(target) : target.model;

  LoadResult result;
  result.url = secrets::RedactUrl(target.url);  // recorded and printed: never a secret
  result.model = model;
  result.endpoint = std::string(kvgate::http::EndpointName(target.endpoint));
  result.connection = kvgate::http::Describe(url, target.client);
  result.tls_verification_off = kvgate::http::VerificationOff(url, target.client);
  result.workload_source = SourceOf(settings.workload);

  const Schedule schedule = PlanSchedule(settings, target, url, model, result);
  const Workload& workload = *schedule.workload;
  const int64_t planned = schedule.planned;
  RequestBodies bodies(settings, target, url, model, workload, planned, result);
  // Multi-turn sessions build each turn's body from the conversation as it goes; their requests
  // (the new user messages) are fitted to their token lengths before the run.
  const bool sessions = settings.workload.multi_turn > 1;
  std::vector<RequestSpec> specs;
  if (sessions) {
    specs = internal::SessionSpecs(settings, workload,
                                   [&](int64_t index) { return bodies.Spec(index); });
  }
  if (planned > 0 && !sessions) bodies.RenderAll(planned);
  bodies.Describe(result);
  RequestSource request_of = [&](int64_t index) { return bodies.At(index); };

  std::optional<internal::Sessions> session_state;
  if (sessions) {
    const int64_t distinct = settings.workload.distinct_prompts;
    session_state.emplace(settings, target.endpoint, model, [&, distinct](int64_t index) {
      const int64_t slot = distinct > 0 ? index % distinct : index;
      return slot < static_cast<int64_t>(specs.size()) ? specs[static_cast<size_t>(slot)]
                                                       : workload.At(slot);
    });
  }

  std::deque<RequestRecord> records = ScheduledRecords(settings, schedule.arrivals);
  // The open loop's arrivals start sessions; its request bound counts every turn.
  const int64_t request_bound =
      sessions && settings.mode == LoadMode::kOpenLoop ? settings.requests : 0;
  if (counters) {
    counters->total.store(request_bound > 0 ? request_bound : planned, std::memory_order_relaxed);
    counters->sent.store(0, std::memory_order_relaxed);
    counters->finished.store(0, std::memory_order_relaxed);
    counters->errored.store(0, std::memory_order_relaxed);
  }

  {
    internal::TimerSlackGuard slack;
    internal::RealtimePriorityGuard priority(settings.realtime_priority);
    asio::io_context io(1);
    internal::Run run(io, settings, url, *tls, endpoints, request_of,
            internal::RenderHeaderPrefix(url, target, settings.stream), records, counters, stop,
            session_state ? &*session_state : nullptr);
    const Clock::time_point t0 = Clock::now() + kLead;
    result.start_steady_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
    result.start_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               (std::chrono::system_clock::now() + kLead).time_since_epoch())
                               .count();
    if (settings.mode == LoadMode::kOpenLoop) {
      run.StartOpenLoop(t0, schedule.arrivals, request_bound);
    } else {
      run.StartClosedLoop(t0, settings.requests, settings.duration_s);
    }
    io.run();
    result.stopped = run.stopped();
  }

  FinishResult(result, records, settings);
  return result;
}

}  // namespace kvgate::loadgen
