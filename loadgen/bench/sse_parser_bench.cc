// SSE parsing throughput: events per second through SseParser (framing only) and through
// CompletionStream (framing + OpenAI chunk JSON + timestamps), on a realistic vLLM-style stream
// fed in network-sized reads. Run: build/loadgen/kvgate_loadgen_bench.
#include <benchmark/benchmark.h>

#include <string>

#include "kvgate/loadgen/sse.h"

namespace {

// A completions stream of `tokens` token chunks plus usage and [DONE], as vLLM sends it.
std::string MakeStream(int tokens) {
  std::string stream;
  for (int k = 0; k < tokens; ++k) {
    stream +=
        "data: {\"id\":\"cmpl-8c2a54e4\",\"object\":\"text_completion\",\"created\":1732870000,"
        "\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{\"index\":0,\"text\":\" "
        "word" +
        std::to_string(k) +
        "\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n";
  }
  stream +=
      "data: {\"id\":\"cmpl-8c2a54e4\",\"object\":\"text_completion\",\"created\":1732870000,"
      "\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[],\"usage\":{\"prompt_tokens\":"
      "128,\"total_tokens\":" +
      std::to_string(128 + tokens) + ",\"completion_tokens\":" + std::to_string(tokens) +
      "}}\n\ndata: [DONE]\n\n";
  return stream;
}

constexpr int kTokens = 256;
constexpr size_t kReadSize = 1448;  // one TCP segment's payload on a 1500-byte MTU

void BM_SseParserFraming(benchmark::State& state) {
  const std::string stream = MakeStream(kTokens);
  int64_t events = 0;
  for (auto _ : state) {
    kvgate::loadgen::SseParser parser(
        [&](const kvgate::loadgen::SseEvent& e) { benchmark::DoNotOptimize(e.data.data()); });
    for (size_t at = 0; at < stream.size(); at += kReadSize) {
      parser.Feed(std::string_view(stream).substr(at, kReadSize));
    }
    events += parser.events();
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}
BENCHMARK(BM_SseParserFraming);

void BM_CompletionStreamDecode(benchmark::State& state) {
  const std::string stream = MakeStream(kTokens);
  int64_t events = 0;
  for (auto _ : state) {
    kvgate::loadgen::CompletionStream decoder;
    int64_t now = 0;
    for (size_t at = 0; at < stream.size(); at += kReadSize) {
      decoder.Feed(std::string_view(stream).substr(at, kReadSize), ++now);
    }
    if (!decoder.done() || decoder.token_chunk_ns().size() != kTokens) {
      state.SkipWithError("decoder did not see the whole stream");
      break;
    }
    events += decoder.events();
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}
BENCHMARK(BM_CompletionStreamDecode);

}  // namespace
