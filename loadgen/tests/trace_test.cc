// The Mooncake trace workload: the file read with every field checked, prompts whose equal
// hash_ids are byte-identical text, and a real run against an HTTP server on 127.0.0.1 that
// notes when each request arrives: sends follow the trace's timestamps (scaled by time_scale).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "kvgate/loadgen/datasets.h"
#include "kvgate/loadgen/run_load.h"
#include "tls_test_server.h"

namespace kvgate::loadgen {
namespace {

namespace ht = http::testing;

struct TempFile {
  explicit TempFile(const std::string& text)
      : path((std::filesystem::temp_directory_path() /
              ("kvgate_trace_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
               ".jsonl"))
                 .string()) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
  static inline int counter = 0;
};

std::string Line(int64_t ts, int input, int output, const std::vector<int64_t>& ids) {
  return nlohmann::json{
      {"timestamp", ts}, {"input_length", input}, {"output_length", output}, {"hash_ids", ids}}
             .dump() +
         "\n";
}

std::string ErrorOf(const std::string& text, int block = 512) {
  TempFile file(text);
  try {
    ReadTrace(file.path, block);
  } catch (const SettingsError& e) {
    std::string what = e.what();
    const size_t at = what.find(file.path);
    return at == std::string::npos ? what : what.substr(at + file.path.size());
  }
  return "no error";
}

TEST(TraceTest, AMalformedLineNamesTheFileTheLineAndTheField) {
  const std::string good = Line(0, 600, 10, {1, 2});
  EXPECT_EQ(ErrorOf(good + "{oops\n"), ":2: line: not a JSON object");
  EXPECT_EQ(ErrorOf(good + R"({"timestamp": 5, "input_length": 3, "hash_ids": [1]})" + "\n"),
            ":2: output_length: missing");
  EXPECT_EQ(ErrorOf(good + Line(5, 10, 10, {})),
            ":2: hash_ids: must be a non-empty array of integers >= 0");
  EXPECT_EQ(ErrorOf(Line(0, 1025, 10, {1, 2})),
            ":1: input_length: 1025 tokens do not fit in 2 blocks of 512");
  EXPECT_EQ(ErrorOf(Line(10, 5, 1, {1}) + Line(9, 5, 1, {1})),
            ":2: timestamp: 9 is earlier than the line before (10)");
  EXPECT_NE(ErrorOf(R"({"timestamp": -1, "input_length": 3, "output_length": 1, "hash_ids": [1]})")
                .find(":1: timestamp: must be an integer"),
            std::string::npos);
}

TEST(TraceTest, EqualHashIdsGiveByteIdenticalPromptPrefixes) {
  const int block = 16;
  TraceEntry a{0, 40, 1, {7, 8, 9}};
  TraceEntry b{0, 48, 1, {7, 8, 10}};
  TraceEntry c{0, 20, 1, {7, 8}};
  const std::string pa = TracePrompt(a, block, 3), pb = TracePrompt(b, block, 3),
                    pc = TracePrompt(c, block, 3);
  auto words = [](const std::string& s) { return std::count(s.begin(), s.end(), ' ') + 1; };
  EXPECT_EQ(words(pa), 40);
  EXPECT_EQ(words(pb), 48);
  // The two shared blocks (32 words) are the same bytes; the third differs.
  size_t common = 0;
  while (common < std::min(pa.size(), pb.size()) && pa[common] == pb[common]) ++common;
  const std::string shared = pa.substr(0, common);
  EXPECT_GE(words(shared), 32);
  EXPECT_LT(words(shared), 34);
  // A cut block is a prefix of the whole block: c (1.25 blocks) is a prefix of a.
  EXPECT_EQ(pa.compare(0, pc.size(), pc), 0);
  // The seed changes the text.
  EXPECT_NE(TracePrompt(a, block, 4), pa);
}

TEST(TraceTest, SendsHappenAtTheTracesTimesAndSharedBlocksArriveIdentical) {
  // 24 requests over 920 ms of trace time, sent at time_scale 2 (460 ms); every third request
  // shares its first two blocks with the one before it.
  std::string text;
  std::vector<int64_t> ts_ms;
  for (int i = 0; i < 24; ++i) {
    const int64_t ts = 1000 + 40 * i;
    ts_ms.push_back(ts);
    const int64_t base = i % 3 == 2 ? 100 * (i - 1) : 100 * i;
    text += Line(ts, 34 + i / 2, 2, {base, base + 1, 100 * i + 50});
  }
  TempFile file(text);
  std::mutex mutex;
  std::map<int64_t, int64_t> arrived_ns;  // request id -> steady ns when the server read it
  ht::TestServer server(false, {}, "", [&](const ht::TestRequest& r) -> ht::TestReply {
    if (r.target != "/v1/chat/completions") return {404, "application/json", {"{}"}, {}};
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    for (const auto& [name, value] : r.headers) {
      if (name == "X-Request-Id") {
        std::lock_guard lock(mutex);
        arrived_ns[std::stoll(value)] = now;
      }
    }
    return {200, "text/event-stream", ht::ChatStreamParts(2, 1), {}};
  });
  LoadSettings s;
  s.workload.kind = WorkloadKind::kTrace;
  s.workload.trace = file.path;
  s.workload.trace_block_tokens = 16;
  s.workload.time_scale = 2.0;
  s.request_timeout_s = 10;
  LoadResult result = RunLoad(s, Target(server.url(), "m", {}, http::Endpoint::kChat));
  ASSERT_EQ(result.records.size(), 24u);
  std::vector<double> lag_ms;
  for (const RequestRecord& r : result.records) {
    ASSERT_TRUE(r.ok()) << r.error_text;
    const int64_t planned = (ts_ms[static_cast<size_t>(r.index)] - 1000) * 1'000'000 / 2;
    EXPECT_EQ(r.scheduled_ns, planned);
    EXPECT_EQ(r.max_tokens, 2);
    std::lock_guard lock(mutex);
    ASSERT_EQ(arrived_ns.count(r.index), 1u);
    lag_ms.push_back((arrived_ns[r.index] - (result.start_steady_ns + planned)) * 1e-6);
  }
  std::sort(lag_ms.begin(), lag_ms.end());
  const double median = lag_ms[lag_ms.size() / 2], max = lag_ms.back();
  std::cout << "trace send -> server read lag: median " << median << " ms, max " << max
            << " ms over " << lag_ms.size() << " requests\n";
  RecordProperty("lag_median_ms", std::to_string(median));
  RecordProperty("lag_max_ms", std::to_string(max));
  EXPECT_GE(lag_ms.front(), 0.0);
  EXPECT_LT(median, 5.0);

  std::map<int64_t, std::string> prompt_of;
  for (const ht::TestRequest& r : server.requests()) {
    if (r.target != "/v1/chat/completions") continue;
    for (const auto& [name, value] : r.headers) {
      if (name == "X-Request-Id") {
        prompt_of[std::stoll(value)] =
            nlohmann::json::parse(r.body)["messages"][0]["content"].get<std::string>();
      }
    }
  }
  ASSERT_EQ(prompt_of.size(), 24u);
  for (int64_t i = 2; i < 24; i += 3) {
    // Requests i - 1 and i share their first two 16-token blocks: 32 identical words.
    const std::string& a = prompt_of[i - 1];
    const std::string& b = prompt_of[i];
    size_t common = 0;
    while (common < std::min(a.size(), b.size()) && a[common] == b[common]) ++common;
    EXPECT_GE(std::count(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(common), ' '), 31)
        << i;
    // Requests that share nothing differ from the first word on.
    EXPECT_NE(prompt_of[i - 2].substr(0, 20), a.substr(0, 20)) << i;
  }
  EXPECT_NE(result.input_lengths.find("trace"), std::string::npos) << result.input_lengths;
}

TEST(TraceTest, TheTraceIsOpenLoop) {
  LoadSettings s;
  s.workload.kind = WorkloadKind::kTrace;
  s.workload.trace = "t.jsonl";
  s.mode = LoadMode::kClosedLoop;
  EXPECT_THROW(ValidateSettings(s), SettingsError);
  s.mode = LoadMode::kOpenLoop;
  s.workload.time_scale = 0;
  EXPECT_THROW(ValidateSettings(s), SettingsError);
}

}  // namespace
}  // namespace kvgate::loadgen
