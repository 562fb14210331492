// Scheduler tests against TableDecodeModel (a fixed-table stand-in, see its header): they pin
// batching, streaming, stopping, cancellation and draining, not model quality.
#include "readkv/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "readkv/engine/serving_metrics.h"
#include "table_decode_model.h"

namespace readkv::engine {
namespace {

using std::chrono::milliseconds;
using testing::TableDecodeModel;

struct Outcome {
  std::string text;
  int token_events = 0;
  GenerationEvent finished;
  bool got_finished = false;
};

// Reads events until the kFinished one (bounded in time).
Outcome Await(RequestChannel& channel, milliseconds timeout = milliseconds(10000)) {
  Outcome out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto event = channel.WaitPop(milliseconds(50));
    if (!event) continue;
    out.text += event->text;
    if (event->kind == GenerationEvent::Kind::kToken) {
      ++out.token_events;
    } else {
      out.finished = *event;
      out.got_finished = true;
      break;
    }
  }
  return out;
}

CompletionRequest Request(const std::string& prompt, int max_tokens, double temperature = 0.0) {
  CompletionRequest request;
  ByteTokenizer tokenizer;
  request.prompt = tokenizer.Encode(prompt);
  request.params.max_tokens = max_tokens;
  request.params.temperature = temperature;
  return request;
}

std::string Complete(Engine& engine, CompletionRequest request) {
  auto channel = std::make_shared<RequestChannel>();
  EXPECT_EQ(engine.Submit(std::move(request), channel), SubmitStatus::kAccepted);
  Outcome out = Await(*channel);
  EXPECT_TRUE(out.got_finished);
  return out.text;
}

EngineOptions Options(int max_batch, int max_waiting) {
  EngineOptions options;
  options.max_batch = max_batch;
  options.max_waiting = max_waiting;
  return options;
}

// Four sequences per step, prompts fed at most `chunk` tokens per step.
EngineOptions ChunkedOptions(int chunk) {
  EngineOptions options = Options(4, 16);
  options.prefill_chunk = chunk;
  return options;
}

class EngineTest : public ::testing::Test {
 protected:
  ByteTokenizer tokenizer_;
};

TEST_F(EngineTest, CompletesToMaxTokensWithUsage) {
  TableDecodeModel model;
  Engine engine(model, tokenizer_, EngineOptions{});
  auto channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("Hello", 6), channel), SubmitStatus::kAccepted);
  Outcome out = Await(*channel);
  ASSERT_TRUE(out.got_finished);
  EXPECT_EQ(out.finished.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.finished.prompt_tokens, 6);  // BOS + 5 bytes
  EXPECT_EQ(out.finished.completion_tokens, 6);
  EXPECT_EQ(out.token_events, 6);
  // The table model continues its text from the sequence length (6 after the prompt).
  EXPECT_EQ(out.text, std::string("The grass is green. ").substr(6, 6));
  engine.Shutdown(milliseconds(1000));
  EXPECT_EQ(model.live_sequences(), 0);
  EXPECT_EQ(engine.counters().finished, 1);
}

// The known-truth test aid: each step sleeps the injected delay after the forward pass, so a
// request of N tokens (one prefill step and N - 1 decode steps) takes at least N delays longer,
// and its text is the same.
TEST_F(EngineTest, AnInjectedStepDelaySlowsEveryStepAndChangesNoToken) {
  TableDecodeModel model;
  EngineOptions slow;
  slow.inject_step_delay = std::chrono::milliseconds(40);
  Engine delayed(model, tokenizer_, slow);
  const auto start = std::chrono::steady_clock::now();
  const std::string text = Complete(delayed, Request("Hello", 6));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 6 * std::chrono::milliseconds(40));
  delayed.Shutdown(milliseconds(1000));
  Engine plain(model, tokenizer_, EngineOptions{});
  EXPECT_EQ(Complete(plain, Request("Hello", 6)), text);
  plain.Shutdown(milliseconds(1000));
  EngineOptions negative;
  negative.inject_step_delay = std::chrono::microseconds(-1);
  EXPECT_THROW(Engine(model, tokenizer_, negative), std::invalid_argument);
}

TEST_F(EngineTest, GreedyOutputIsTheSameAloneAndInABatchThatNeverExceedsMaxBatch) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(2000);  // a window for the batch to fill
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, Options(4, 16));
  const std::string alone = Complete(engine, Request("abc", 60));
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 8; ++i) {
    channels.push_back(std::make_shared<RequestChannel>());
    const std::string prompt = i == 5 ? "abc" : std::string(static_cast<size_t>(i + 1), 'x');
    ASSERT_EQ(engine.Submit(Request(prompt, 60), channels.back()), SubmitStatus::kAccepted);
  }
  std::vector<Outcome> outs;
  for (auto& channel : channels) outs.push_back(Await(*channel));
  EXPECT_EQ(outs[5].text, alone);
  EXPECT_GE(engine.counters().max_batch_seen, 2);
  EXPECT_LE(engine.counters().max_batch_seen, 4);
  EXPECT_EQ(engine.counters().finished, 9);
}

TEST_F(EngineTest, RequestsJoinARunningBatchWithoutWaitingForItToFinish) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(2000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, Options(4, 4));
  auto long_channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("long", 200), long_channel), SubmitStatus::kAccepted);
  ASSERT_TRUE(long_channel->WaitPop(milliseconds(5000)).has_value());  // it is running
  const std::string short_text = Complete(engine, Request("short", 3));
  EXPECT_EQ(short_text.size(), 3u);
  // The short request finished while the long one was still generating.
  EXPECT_EQ(engine.counters().running, 1);
  Outcome long_out = Await(*long_channel);
  EXPECT_EQ(long_out.finished.completion_tokens, 200);
}

TEST_F(EngineTest, ChunkedPrefillFeedsAPromptInChunksWhileARunningSequenceKeepsDecoding) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(2000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, ChunkedOptions(8));
  // A decodes; once its first token is out, B arrives with a 51-token prompt (BOS + 50 bytes).
  auto a = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("ab", 40), a), SubmitStatus::kAccepted);
  auto first = a->WaitPop(milliseconds(5000));
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->kind, GenerationEvent::Kind::kToken);
  const std::string long_prompt(50, 'y');
  auto b = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request(long_prompt, 5), b), SubmitStatus::kAccepted);
  const Outcome out_b = Await(*b);
  Outcome out_a = Await(*a);
  ASSERT_TRUE(out_a.got_finished);
  ASSERT_TRUE(out_b.got_finished);
  EXPECT_EQ(out_a.token_events + 1, 40);
  EXPECT_EQ(out_b.finished.prompt_tokens, 51);
  EXPECT_EQ(out_b.token_events, 5);
  // The table model continues its text from the sequence length: B's first token comes after
  // all 51 prompt positions, as with the prompt fed whole.
  const std::string text = TableDecodeModel::Options{}.text;
  std::string expected;
  for (int length = 51; length < 56; ++length) expected += text[length % text.size()];
  EXPECT_EQ(out_b.text, expected);

  // B's prompt went in chunks of at most 8 tokens, 7 steps, logits only with the last; A was in
  // the calls that fed B's chunks.
  const uint64_t id_a = 1, id_b = 2;  // sequence ids count from 1 in submission order
  int fed = 0, chunks = 0, with_a = 0;
  for (const auto& call : model.calls()) {
    bool has_a = false;
    for (const auto& step : call) has_a = has_a || step.sequence_id == id_a;
    for (const auto& step : call) {
      if (step.sequence_id != id_b || fed >= 51) continue;
      EXPECT_LE(step.tokens, 8);
      fed += step.tokens;
      ++chunks;
      EXPECT_EQ(step.logits_wanted, fed == 51) << "chunk " << chunks;
      with_a += has_a ? 1 : 0;
    }
  }
  EXPECT_EQ(fed, 51);
  EXPECT_EQ(chunks, 7);
  EXPECT_EQ(with_a, 7);
  engine.Shutdown(milliseconds(1000));
  EXPECT_EQ(model.live_sequences(), 0);
}

TEST_F(EngineTest, ChunkedPrefillFeedsAtMostTheBudgetPerStepOverAllPrompts) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(2000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, ChunkedOptions(10));
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 3; ++i) {
    channels.push_back(std::make_shared<RequestChannel>());
    ASSERT_EQ(engine.Submit(Request(std::string(14, 'z'), 3), channels.back()),
              SubmitStatus::kAccepted);  // 15 tokens each
  }
  for (auto& channel : channels) ASSERT_TRUE(Await(*channel).got_finished);
  // No call feeds more than 10 prompt tokens in all, and each prompt is whole (its 15 tokens, in
  // chunks without logits but the last) before its first generated token.
  for (const auto& call : model.calls()) {
    int prompt_tokens = 0;
    for (const auto& step : call) {
      if (step.tokens > 1 || !step.logits_wanted) prompt_tokens += step.tokens;
    }
    EXPECT_LE(prompt_tokens, 10);
  }
  std::map<uint64_t, int> fed;
  for (const auto& call : model.calls()) {
    for (const auto& step : call) {
      if (fed[step.sequence_id] < 15) {
        fed[step.sequence_id] += step.tokens;
        EXPECT_EQ(step.logits_wanted, fed[step.sequence_id] == 15);
      }
    }
  }
  EXPECT_EQ(fed.size(), 3u);
  for (const auto& [id, n] : fed) EXPECT_EQ(n, 15) << "sequence " << id;
}

TEST_F(EngineTest, RefusesANegativePrefillChunk) {
  TableDecodeModel model;
  EngineOptions engine_options;
  engine_options.prefill_chunk = -1;
  EXPECT_THROW(Engine(model, tokenizer_, engine_options), std::invalid_argument);
}

TEST_F(EngineTest, RejectsBeyondTheWaitingQueue) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(2000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, Options(1, 1));
  auto a = std::make_shared<RequestChannel>();
  auto b = std::make_shared<RequestChannel>();
  auto c = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("a", 100), a), SubmitStatus::kAccepted);
  ASSERT_EQ(engine.Submit(Request("b", 100), b), SubmitStatus::kAccepted);
  EXPECT_EQ(engine.Submit(Request("c", 100), c), SubmitStatus::kQueueFull);
  EXPECT_EQ(engine.counters().rejected_queue_full, 1);
  EXPECT_EQ(engine.metrics().ErrorCount("queue_full"), 1.0);
  a->Cancel();
  b->Cancel();
  EXPECT_TRUE(Await(*a).got_finished);
  EXPECT_TRUE(Await(*b).got_finished);
}

TEST_F(EngineTest, StopStringEndsTheCompletionBeforeIt) {
  TableDecodeModel model;
  Engine engine(model, tokenizer_, EngineOptions{});
  CompletionRequest request = Request("x", 100);  // length 2: generates from "e grass is ..."
  request.params.stop = {"is"};
  auto channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(std::move(request), channel), SubmitStatus::kAccepted);
  Outcome out = Await(*channel);
  EXPECT_EQ(out.finished.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.text, "e grass ");
  EXPECT_EQ(out.finished.completion_tokens, 10);  // the tokens of "is" were generated
}

TEST_F(EngineTest, EosStopsUnlessIgnored) {
  TableDecodeModel::Options options;
  options.eos_at_length = 8;
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, EngineOptions{});
  auto channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("ab", 50), channel), SubmitStatus::kAccepted);  // length 3
  Outcome out = Await(*channel);
  EXPECT_EQ(out.finished.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.finished.completion_tokens, 6);  // lengths 3..8; the EOS counts, adds no text
  EXPECT_EQ(out.text.size(), 5u);

  CompletionRequest ignoring = Request("ab", 50);
  ignoring.params.ignore_eos = true;
  auto channel2 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(std::move(ignoring), channel2), SubmitStatus::kAccepted);
  Outcome out2 = Await(*channel2);
  EXPECT_EQ(out2.finished.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out2.finished.completion_tokens, 50);
  EXPECT_EQ(out2.text.size(), 49u);
}

TEST_F(EngineTest, SeededSamplingRepeatsAndDifferentSeedsDiffer) {
  TableDecodeModel model;
  Engine engine(model, tokenizer_, EngineOptions{});
  auto sampled = [&](uint64_t seed) {
    CompletionRequest request = Request("seed", 64, 1.0);
    request.params.seed = seed;
    return Complete(engine, std::move(request));
  };
  EXPECT_EQ(sampled(5), sampled(5));
  EXPECT_NE(sampled(5), sampled(6));
}

TEST_F(EngineTest, CancelledRequestEndsAtTheNextStepAndItsKvIsFreed) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(1000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, EngineOptions{});
  auto channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("cancel me", 400), channel), SubmitStatus::kAccepted);
  ASSERT_TRUE(channel->WaitPop(milliseconds(5000)).has_value());
  channel->Cancel();
  Outcome out = Await(*channel);
  ASSERT_TRUE(out.got_finished);
  EXPECT_EQ(out.finished.finish_reason, FinishReason::kCancelled);
  EXPECT_LT(out.finished.completion_tokens, 400);
  EXPECT_EQ(model.live_sequences(), 0);
  EXPECT_EQ(model.started(), model.ended());
  EXPECT_EQ(engine.counters().cancelled, 1);
  EXPECT_EQ(engine.metrics().FinishedCount(FinishReason::kCancelled), 1.0);
}

TEST_F(EngineTest, ARequestCancelledDuringItsChunkedPrefillEndsThereAndItsKvIsFreed) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(2000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, ChunkedOptions(4));
  auto channel = std::make_shared<RequestChannel>();
  // 200 prompt tokens in chunks of 4: ~50 steps of 2 ms before the first token.
  ASSERT_EQ(engine.Submit(Request(std::string(199, 'q'), 10), channel), SubmitStatus::kAccepted);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (model.forward_calls() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  channel->Cancel();
  const Outcome out = Await(*channel);
  ASSERT_TRUE(out.got_finished);
  EXPECT_EQ(out.finished.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(out.token_events, 0);
  int fed = 0;
  for (const auto& call : model.calls()) {
    for (const auto& step : call) fed += step.tokens;
  }
  EXPECT_GE(fed, 12);   // at least three chunks went in...
  EXPECT_LT(fed, 200);  // ...and the prompt was never finished
  EXPECT_EQ(model.live_sequences(), 0);
  EXPECT_EQ(model.started(), model.ended());
}

TEST_F(EngineTest, AnInvalidReadPolicyEndsWithAnInvalidRequestError) {
  TableDecodeModel model;
  Engine engine(model, tokenizer_, EngineOptions{});
  CompletionRequest request = Request("p", 4);
  request.read_policy.read_bits = 99.0;
  auto channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(std::move(request), channel), SubmitStatus::kAccepted);
  Outcome out = Await(*channel);
  EXPECT_EQ(out.finished.finish_reason, FinishReason::kError);
  EXPECT_EQ(out.finished.error, ErrorKind::kInvalidRequest);
  EXPECT_NE(out.finished.error_message.find("read_bits"), std::string::npos);
  // The engine keeps serving.
  EXPECT_EQ(Complete(engine, Request("p", 4)).size(), 4u);
}

TEST_F(EngineTest, ShutdownLetsInFlightRequestsFinishWithinTheGrace) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(500);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, EngineOptions{});
  auto channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("drain", 40), channel), SubmitStatus::kAccepted);
  engine.Shutdown(milliseconds(10000));
  Outcome out = Await(*channel, milliseconds(100));
  EXPECT_EQ(out.finished.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.finished.completion_tokens, 40);
  EXPECT_EQ(engine.Submit(Request("late", 4), std::make_shared<RequestChannel>()),
            SubmitStatus::kShuttingDown);
}

TEST_F(EngineTest, ShutdownCancelsWhatIsLeftAfterTheGraceWithAnError) {
  TableDecodeModel::Options options;
  options.step_delay = std::chrono::microseconds(2000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, Options(1, 4));
  auto running = std::make_shared<RequestChannel>();
  auto queued = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("one", 400), running), SubmitStatus::kAccepted);
  ASSERT_EQ(engine.Submit(Request("two", 400), queued), SubmitStatus::kAccepted);
  ASSERT_TRUE(running->WaitPop(milliseconds(5000)).has_value());
  engine.Shutdown(milliseconds(20));
  for (auto* channel : {running.get(), queued.get()}) {
    Outcome out = Await(*channel, milliseconds(100));
    ASSERT_TRUE(out.got_finished);
    EXPECT_EQ(out.finished.finish_reason, FinishReason::kError);
    EXPECT_EQ(out.finished.error, ErrorKind::kShuttingDown);
  }
  EXPECT_EQ(model.live_sequences(), 0);
  EXPECT_EQ(engine.metrics().ErrorCount("shutting_down"), 2.0);
}

TEST_F(EngineTest, KvLimitHoldsRequestsBackButNeverStarvesAnEmptyBatch) {
  TableDecodeModel::Options options;
  options.kv_bytes_limit = 1;  // "full" as soon as anything is held
  options.step_delay = std::chrono::microseconds(1000);
  TableDecodeModel model(options);
  Engine engine(model, tokenizer_, Options(4, 8));
  auto first = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(Request("kv", 100), first), SubmitStatus::kAccepted);
  ASSERT_TRUE(first->WaitPop(milliseconds(5000)).has_value());  // running, holding KV
  std::vector<std::shared_ptr<RequestChannel>> later;
  for (int i = 0; i < 2; ++i) {
    later.push_back(std::make_shared<RequestChannel>());
    ASSERT_EQ(engine.Submit(Request("kv", 5), later.back()), SubmitStatus::kAccepted);
  }
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(engine.counters().waiting, 2);  // batch room, but no KV room
  EXPECT_EQ(engine.counters().running, 1);
  EXPECT_EQ(Await(*first).finished.completion_tokens, 100);
  for (auto& channel : later) EXPECT_EQ(Await(*channel).finished.completion_tokens, 5);
}

TEST_F(EngineTest, ExportsTheVllmSeriesAndTheLedgers) {
  TableDecodeModel model;
  Engine engine(model, tokenizer_,
                EngineOptions{.max_batch = 8, .max_waiting = 64, .model_name = "served"});
  Complete(engine, Request("metrics", 5));
  engine.Shutdown(milliseconds(1000));
  std::map<std::string, const prometheus::MetricFamily*> by_name;
  const auto families = engine.metrics().Collect();
  for (const auto& family : families) by_name[family.name] = &family;
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds", "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total", "vllm:request_success_total",
        "readkv_logical_read_bytes_total", "readkv_read_depth", "readkv_capacity_bytes",
        "readkv_physical_traffic_bytes_total", "readkv_workspace_peak_bytes",
        "readkv_encode_seconds_total", "readkv_attention_seconds_total",
        "readkv_cache_rejections_total",
        "kvgate_request_errors_total"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
    for (const auto& metric : by_name[name]->metric) {
      bool has_backend = false;
      for (const auto& label : metric.label) {
        has_backend |= label.name == "kv_backend" && label.value == "readkv";
      }
      EXPECT_TRUE(has_backend) << name;
    }
  }
  EXPECT_EQ(by_name["vllm:generation_tokens_total"]->metric[0].counter.value, 5.0);
  EXPECT_EQ(by_name["vllm:prompt_tokens_total"]->metric[0].counter.value, 8.0);
  EXPECT_EQ(by_name["vllm:time_to_first_token_seconds"]->metric[0].histogram.sample_count, 1u);
  EXPECT_EQ(by_name["vllm:inter_token_latency_seconds"]->metric[0].histogram.sample_count, 4u);
  EXPECT_GT(by_name["readkv_logical_read_bytes_total"]->metric[0].counter.value, 0.0);
  // No rejection happened, yet the series is there at 0 for alerts and panels.
  ASSERT_EQ(by_name["readkv_cache_rejections_total"]->metric.size(), 1u);
  EXPECT_EQ(by_name["readkv_cache_rejections_total"]->metric[0].counter.value, 0.0);
  ASSERT_FALSE(by_name["kvgate_request_errors_total"]->metric.empty());
  // A model without a prefix cache exports no prefix-cache series.
  EXPECT_EQ(by_name.count("readkv_prefix_cache_objects_total"), 0u);
}

TEST(ServingMetricsTest, PrefixCacheObjectsAreExportedByOutcome) {
  ServingMetrics metrics("served", "readkv");
  KvLedgers ledgers;
  ledgers.prefix_cache_objects = {{"hit", 7}, {"miss", 2}, {"stored", 2}};
  metrics.PublishLedgers(ledgers);
  std::map<std::string, double> by_result;
  for (const auto& family : metrics.Collect()) {
    if (family.name != "readkv_prefix_cache_objects_total") continue;
    EXPECT_EQ(family.type, prometheus::MetricType::Counter);
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "result") by_result[label.value] = metric.counter.value;
      }
    }
  }
  EXPECT_EQ(by_result, (std::map<std::string, double>{{"hit", 7}, {"miss", 2}, {"stored", 2}}));
}

TEST_F(EngineTest, LatenciesCountFromTheFrontEndsArrivalStampAndEventsCarryTheirTime) {
  TableDecodeModel model;
  Engine engine(model, tokenizer_, Options(4, 4));
  // A request that arrived at the front end 10 s before it reached Submit (parsing, queueing
  // in front of the engine): TTFT and E2E must include those 10 s, as vLLM's do.
  CompletionRequest request = Request("arrival", 3);
  const auto before_submit = std::chrono::steady_clock::now();
  request.arrival = before_submit - std::chrono::seconds(10);
  auto channel = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.Submit(std::move(request), channel), SubmitStatus::kAccepted);
  std::vector<std::chrono::steady_clock::time_point> stamps;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto event = channel->WaitPop(milliseconds(50));
    if (!event) continue;
    stamps.push_back(event->produced_at);
    if (event->kind == GenerationEvent::Kind::kFinished) break;
  }
  const auto after = std::chrono::steady_clock::now();
  ASSERT_EQ(stamps.size(), 4u);  // three tokens, then kFinished
  for (size_t i = 0; i < stamps.size(); ++i) {
    EXPECT_GE(stamps[i], before_submit) << i;
    EXPECT_LE(stamps[i], after) << i;
    if (i > 0) {
      EXPECT_GE(stamps[i], stamps[i - 1]) << i;
    }
  }
  const double waited = std::chrono::duration<double>(after - before_submit).count();
  for (const auto& family : engine.metrics().Collect()) {
    if (family.name != "vllm:time_to_first_token_seconds" &&
        family.name != "vllm:e2e_request_latency_seconds") {
      continue;
    }
    ASSERT_EQ(family.metric.at(0).histogram.sample_count, 1u) << family.name;
    EXPECT_GE(family.metric[0].histogram.sample_sum, 10.0) << family.name;
    EXPECT_LE(family.metric[0].histogram.sample_sum, 10.0 + waited) << family.name;
  }
  // Without a stamp, Submit's time is the arrival: that TTFT lies far below 10 s.
  Complete(engine, Request("no stamp", 2));
  for (const auto& family : engine.metrics().Collect()) {
    if (family.name != "vllm:time_to_first_token_seconds") continue;
    const auto& histogram = family.metric.at(0).histogram;
    ASSERT_EQ(histogram.sample_count, 2u);
    const auto below_5s = std::find_if(histogram.bucket.begin(), histogram.bucket.end(),
                                       [](const auto& b) { return b.upper_bound >= 5.0; });
    ASSERT_NE(below_5s, histogram.bucket.end());
    EXPECT_EQ(below_5s->cumulative_count, 1u);
  }
}

TEST(GeometricBucketsTest, CoverTheRangeAtTheRequestedResolution) {
  const auto bounds = GeometricBuckets(0.001, 120.0, 16);
  EXPECT_DOUBLE_EQ(bounds.front(), 0.001);
  EXPECT_GE(bounds.back(), 120.0);
  for (size_t i = 1; i < bounds.size(); ++i) EXPECT_NEAR(bounds[i] / bounds[i - 1], 1.0443, 1e-3);
  EXPECT_THROW(GeometricBuckets(0.0, 1.0, 4), std::invalid_argument);
}

}  // namespace
}  // namespace readkv::engine
