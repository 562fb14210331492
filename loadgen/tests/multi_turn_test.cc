// Multi-turn sessions (WorkloadSettings::multi_turn) against a real HTTP server on 127.0.0.1
// that answers every request with a reply naming it: turn k + 1 sends turn k's prompt and reply
// verbatim plus the workload's next message (completions and chat), records carry session and
// turn, the budget bounds the run, and the default (one turn) sends today's requests unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http_target.h"
#include "kvgate/loadgen/report.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/loadgen/schedule.h"
#include "tls_test_server.h"

namespace kvgate::loadgen {
namespace {

namespace ht = http::testing;

std::string Header(const ht::TestRequest& request, std::string_view name) {
  for (const auto& [key, value] : request.headers) {
    if (std::equal(key.begin(), key.end(), name.begin(), name.end(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return value;
    }
  }
  return "";
}

// The reply to request `id`: two token chunks, so the client must join them.
std::string ReplyText(const std::string& id) { return " answer-" + id + " done"; }

// Streams ReplyText in two chunks (completions `text` or chat `delta.content`), then usage
// (prompt_tokens = body bytes / 4) and [DONE].
ht::TestReply Answer(const ht::TestRequest& request) {
  if (request.target == "/v1/models") {
    return {200, "application/json", {R"({"data":[{"id":"turn-model"}]})"}, {}};
  }
  const bool chat = request.target == "/v1/chat/completions";
  if (!chat && request.target != "/v1/completions") return {404, "text/plain", {"no"}, {}};
  const std::string id = Header(request, "X-Request-Id");
  const std::string text = ReplyText(id);
  const size_t half = text.size() / 2;
  auto chunk = [chat](const std::string& piece) {
    nlohmann::json choice = chat ? nlohmann::json{{"index", 0}, {"delta", {{"content", piece}}}}
                                 : nlohmann::json{{"index", 0}, {"text", piece}};
    return "data: " + nlohmann::json{{"choices", {choice}}}.dump() + "\n\n";
  };
  const nlohmann::json usage = {
      {"choices", nlohmann::json::array()},
      {"usage",
       {{"prompt_tokens", static_cast<int>(request.body.size() / 4)}, {"completion_tokens", 2}}}};
  return {200,
          "text/event-stream",
          {chunk(text.substr(0, half)), chunk(text.substr(half)),
           "data: " + usage.dump() + "\n\ndata: [DONE]\n\n"},
          {0.0, 2.0, 0.0}};
}

LoadSettings Sessions(int turns, int64_t requests, int concurrency) {
  LoadSettings s;
  s.mode = LoadMode::kClosedLoop;
  s.concurrency = concurrency;
  s.requests = requests;
  s.request_timeout_s = 10;
  s.seed = 7;
  s.workload.input.mean = 6;
  s.workload.output.mean = 2;
  s.workload.multi_turn = turns;
  return s;
}

// The generation requests the server read, by X-Request-Id (the record index).
std::map<int64_t, nlohmann::json> BodiesById(const ht::TestServer& server) {
  std::map<int64_t, nlohmann::json> bodies;
  for (const ht::TestRequest& request : server.requests()) {
    if (request.method != "POST") continue;
    bodies[std::stoll(Header(request, "X-Request-Id"))] = nlohmann::json::parse(request.body);
  }
  return bodies;
}

// Every session's records, in turn order; checks turns are 1, 2, ... with rising indexes.
std::map<int64_t, std::vector<RequestRecord>> BySession(const LoadResult& result, int turns) {
  std::map<int64_t, std::vector<RequestRecord>> sessions;
  for (const RequestRecord& r : result.records) {
    EXPECT_TRUE(r.ok()) << r.error_cause << ": " << r.error_text;
    sessions[r.session].push_back(r);
  }
  for (auto& [id, records] : sessions) {
    EXPECT_LE(static_cast<int>(records.size()), turns);
    for (size_t k = 0; k < records.size(); ++k) {
      EXPECT_EQ(records[k].turn, static_cast<int>(k) + 1) << "session " << id;
      if (k > 0) {
        EXPECT_GT(records[k].index, records[k - 1].index);
        EXPECT_GE(records[k].scheduled_ns, records[k - 1].end_ns);
      }
    }
  }
  return sessions;
}

TEST(MultiTurnTest, CompletionsTurnsResendThePromptAndReplyVerbatim) {
  ht::TestServer server(false, {}, "", Answer);
  const LoadSettings s = Sessions(3, 10, 2);
  const LoadResult result = RunLoad(s, {server.url(), ""});
  ASSERT_EQ(result.records.size(), 10u);
  const auto sessions = BySession(result, 3);
  EXPECT_GE(sessions.size(), 4u);  // 10 requests in sessions of at most 3 turns
  const auto bodies = BodiesById(server);
  ASSERT_EQ(bodies.size(), 10u);
  const Workload workload = Workload::Create(s.workload, s.seed);
  int64_t later_turns = 0;
  for (const auto& [id, records] : sessions) {
    const RequestRecord& first = records.front();
    EXPECT_EQ(bodies.at(first.index)["prompt"], workload.At(first.index).prompt);
    for (size_t k = 1; k < records.size(); ++k) {
      const auto before = bodies.at(records[k - 1].index)["prompt"].get<std::string>();
      const auto now = bodies.at(records[k].index)["prompt"].get<std::string>();
      const std::string expected = before + ReplyText(std::to_string(records[k - 1].index)) +
                                   std::string(kTurnSeparator) +
                                   workload.At(records[k].index).prompt.get<std::string>();
      EXPECT_EQ(now, expected) << "session " << id << " turn " << k + 1;
      EXPECT_EQ(bodies.at(records[k].index)["max_tokens"], workload.At(records[k].index).max_tokens);
      ++later_turns;
    }
  }
  EXPECT_GE(later_turns, 4);
  // The summary splits TTFT by turn; the JSON has it and the records' session and turn.
  ASSERT_TRUE(result.summary.ttft_by_turn.contains(1));
  ASSERT_TRUE(result.summary.ttft_by_turn.contains(2));
  const nlohmann::json json = LoadResultToJson(result);
  EXPECT_EQ(json["settings"]["workload"]["multi_turn"], 3);
  EXPECT_TRUE(json["summary"]["ttft_by_turn"].contains("2"));
  EXPECT_EQ(json["records"][1]["session"], result.records[1].session);
  EXPECT_EQ(RecordFromJson(json["records"][3]).turn, result.records[3].turn);
  EXPECT_NE(FormatSummary(result).find("Turn 2 P50 / P99 TTFT"), std::string::npos);
}

TEST(MultiTurnTest, ChatTurnsGrowTheMessagesWithTheRepliesAsReturned) {
  ht::TestServer server(false, {}, "", Answer);
  const LoadSettings s = Sessions(4, 8, 1);
  const LoadResult result =
      RunLoad(s, {server.url(), "turn-model", {}, http::Endpoint::kChat});
  ASSERT_EQ(result.records.size(), 8u);
  const auto sessions = BySession(result, 4);
  ASSERT_EQ(sessions.size(), 2u);  // one slot: two whole sessions of 4 turns
  const auto bodies = BodiesById(server);
  const Workload workload = Workload::Create(s.workload, s.seed);
  for (const auto& [id, records] : sessions) {
    ASSERT_EQ(records.size(), 4u);
    for (size_t k = 1; k < records.size(); ++k) {
      nlohmann::json expected = bodies.at(records[k - 1].index)["messages"];
      expected.push_back(
          {{"role", "assistant"}, {"content", ReplyText(std::to_string(records[k - 1].index))}});
      expected.push_back({{"role", "user"}, {"content", workload.At(records[k].index).prompt}});
      EXPECT_EQ(bodies.at(records[k].index)["messages"], expected) << "turn " << k + 1;
    }
  }
}

TEST(MultiTurnTest, OpenLoopArrivalsStartSessionsWithinTheRequestBound) {
  ht::TestServer server(false, {}, "", Answer);
  LoadSettings s = Sessions(3, 7, 1);
  s.mode = LoadMode::kOpenLoop;
  s.rate_rps = 50;
  s.arrival = Arrival::kConstant;
  const LoadResult result = RunLoad(s, {server.url(), "turn-model"});
  // ceil(7 / 3) = 3 arrivals; their sessions' later turns fill the 7-request budget.
  ASSERT_EQ(result.records.size(), 7u);
  const auto sessions = BySession(result, 3);
  EXPECT_EQ(sessions.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(result.records[static_cast<size_t>(i)].session, i);
    EXPECT_EQ(result.records[static_cast<size_t>(i)].turn, 1);
  }
  EXPECT_EQ(BodiesById(server).size(), 7u);
}

TEST(MultiTurnTest, ThinkTimeSeparatesAReplyFromTheNextTurn) {
  ht::TestServer server(false, {}, "", Answer);
  LoadSettings s = Sessions(2, 4, 1);
  s.workload.think_time_ms = 40;  // each pause in [1, 80] ms
  const LoadResult result = RunLoad(s, {server.url(), "turn-model"});
  ASSERT_EQ(result.records.size(), 4u);
  for (const auto& [id, records] : BySession(result, 2)) {
    ASSERT_EQ(records.size(), 2u);
    const double pause_ms = (records[1].scheduled_ns - records[0].end_ns) * 1e-6;
    EXPECT_GE(pause_ms, 1.0);
    EXPECT_LT(pause_ms, 80.0 + 50.0);  // the timer's own lateness on a busy machine
  }
  EXPECT_EQ(LoadResultToJson(result)["settings"]["workload"]["think_time_ms"], 40);
}

TEST(MultiTurnTest, TheContextLimitEndsSessionsEarly) {
  ht::TestServer server(false, {}, "", Answer);
  LoadSettings s = Sessions(5, 6, 2);
  s.workload.max_context_tokens = 20;  // less than any turn 2 (usage says ~bytes/4)
  const LoadResult result = RunLoad(s, {server.url(), "turn-model"});
  ASSERT_EQ(result.records.size(), 6u);
  for (const RequestRecord& r : result.records) EXPECT_EQ(r.turn, 1);
  EXPECT_EQ(BySession(result, 5).size(), 6u);
}

// Answer without the usage chunk: the session then bounds its context by its own approximate
// count of the conversation's texts (ApproximateTokens, kept as the conversation grows).
ht::TestReply AnswerWithoutUsage(const ht::TestRequest& request) {
  ht::TestReply reply = Answer(request);
  if (reply.parts.size() == 3) reply.parts.back() = "data: [DONE]\n\n";
  return reply;
}

TEST(MultiTurnTest, WithoutUsageTheContextLimitUsesTheApproximateCount) {
  ht::TestServer server(false, {}, "", AnswerWithoutUsage);
  // One slot, so which request index becomes which session's turn does not depend on timing:
  // with two, a session whose first reply is slow can see the other finish its 3 turns and a
  // third session take the budget's last request (sessions of 2, 3 and 1 turns, seen in 10 of
  // 30 runs under the sanitizers), and a turn 2 can pair with a message short enough to fit.
  LoadSettings s = Sessions(3, 6, 1);
  s.workload.max_context_tokens = 20;  // below any turn 2: prompt + reply + message + max_tokens
  const LoadResult tight = RunLoad(s, {server.url(), "turn-model"});
  ASSERT_EQ(tight.records.size(), 6u);
  for (const RequestRecord& r : tight.records) EXPECT_EQ(r.turn, 1);
  s.workload.max_context_tokens = 1'000'000;  // never reached: every session runs all turns
  const LoadResult loose = RunLoad(s, {server.url(), "turn-model"});
  ASSERT_EQ(loose.records.size(), 6u);
  for (const auto& [id, records] : BySession(loose, 3)) EXPECT_EQ(records.size(), 3u) << id;
}

TEST(MultiTurnTest, OneTurnSendsTodaysRequestsByteForByte) {
  ht::TestServer server(false, {}, "", Answer);
  const LoadSettings s = Sessions(1, 6, 2);
  const LoadResult result = RunLoad(s, {server.url(), "turn-model"});
  ASSERT_EQ(result.records.size(), 6u);
  const Workload workload = Workload::Create(s.workload, s.seed);
  std::map<int64_t, std::string> raw;
  for (const ht::TestRequest& request : server.requests()) {
    raw[std::stoll(Header(request, "X-Request-Id"))] = request.body;
  }
  ASSERT_EQ(raw.size(), 6u);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.session, r.index);
    EXPECT_EQ(r.turn, 1);
    EXPECT_EQ(raw.at(r.index), internal::RenderBody("turn-model", workload.At(r.index), s,
                                                    http::Endpoint::kCompletions));
  }
  EXPECT_TRUE(result.summary.ttft_by_turn.empty());
  EXPECT_FALSE(LoadResultToJson(result)["summary"].contains("ttft_by_turn"));
  // The body as it was rendered before sessions existed (key order, number forms).
  RequestSpec spec;
  spec.prompt = "two words";
  spec.max_tokens = 3;
  EXPECT_EQ(internal::RenderBody("m", spec, s, http::Endpoint::kCompletions),
            R"({"ignore_eos":true,"max_tokens":3,"model":"m","prompt":"two words",)"
            R"("stream":true,"stream_options":{"include_usage":true},"temperature":0.0})");
  EXPECT_EQ(internal::RenderBody("m", spec, s, http::Endpoint::kChat),
            R"({"ignore_eos":true,"max_tokens":3,"messages":[{"content":"two words",)"
            R"("role":"user"}],"model":"m","stream":true,"stream_options":)"
            R"({"include_usage":true},"temperature":0.0})");
}

TEST(MultiTurnTest, BadValuesNameTheirFlag) {
  for (int turns : {0, -2, kMaxMultiTurn + 1, 1 << 30}) {
    LoadSettings s = Sessions(turns, 4, 1);
    try {
      ValidateSettings(s);
      ADD_FAILURE() << "multi_turn " << turns << " was accepted";
    } catch (const SettingsError& e) {
      EXPECT_EQ(e.field(), "multi-turn");
      EXPECT_NE(std::string(e.what()).find("got " + std::to_string(turns)), std::string::npos)
          << e.what();
    }
  }
  for (int think : {-1, kMaxThinkTimeMs + 1}) {
    LoadSettings s = Sessions(2, 4, 1);
    s.workload.think_time_ms = think;
    try {
      ValidateSettings(s);
      ADD_FAILURE() << "think_time_ms " << think << " was accepted";
    } catch (const SettingsError& e) {
      EXPECT_EQ(e.field(), "think-time-ms");
    }
  }
  LoadSettings think_alone = Sessions(1, 4, 1);
  think_alone.workload.think_time_ms = 10;
  EXPECT_THROW(ValidateSettings(think_alone), SettingsError);
  LoadSettings trace = Sessions(2, 4, 1);
  trace.mode = LoadMode::kOpenLoop;
  trace.workload.kind = WorkloadKind::kTrace;
  trace.workload.trace = "t.jsonl";
  try {
    ValidateSettings(trace);
    ADD_FAILURE();
  } catch (const SettingsError& e) {
    EXPECT_EQ(e.field(), "multi-turn");
  }
}

}  // namespace
}  // namespace kvgate::loadgen
