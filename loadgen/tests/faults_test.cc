// Faults are data: every failure mode of a server is counted with its cause, and the run ends by
// itself in bounded time.
#include <gtest/gtest.h>

#include <chrono>

#include "fixture_server.h"
#include "kvgate/loadgen/run_load.h"

namespace kvgate::loadgen {
namespace {

using testing::FixtureOptions;
using testing::FixtureReply;
using testing::FixtureServer;
using Kind = FixtureReply::Kind;

TEST(FaultsTest, EveryFaultIsCountedWithItsCauseAndTheRunEnds) {
  struct Fault {
    Kind kind;
    int status;
    const char* cause;  // "" = success
  };
  const std::vector<Fault> faults = {
      {Kind::kStream, 0, ""},
      {Kind::kClose, 0, "reset"},
      {Kind::kResetMidStream, 0, "reset"},
      {Kind::kMalformedSse, 0, "malformed_sse"},
      {Kind::kHttpError, 429, "http_4xx"},
      {Kind::kHttpError, 503, "http_5xx"},
      {Kind::kStall, 0, "timeout"},
      {Kind::kNoDone, 0, "incomplete"},
      {Kind::kErrorEvent, 0, "stream_error"},
      {Kind::kWrongContentType, 0, "malformed_sse"},
  };
  FixtureOptions options;
  options.plan = [&](int64_t id) {
    const Fault& f = faults[static_cast<size_t>(id) % faults.size()];
    FixtureReply reply;
    reply.kind = f.kind;
    reply.status = f.status;
    reply.itl_ms = 1;
    return reply;
  };
  FixtureServer server(options);
  LoadSettings s;
  s.rate_rps = 50;
  s.arrival = Arrival::kConstant;
  s.requests = 3 * static_cast<int64_t>(faults.size());
  s.request_timeout_s = 0.5;  // bounds the stalled requests
  s.workload.output.mean = 4;
  auto start = std::chrono::steady_clock::now();
  LoadResult result = RunLoad(s, {server.url(), "fixture-model"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  ASSERT_EQ(result.records.size(), 30u);
  for (const RequestRecord& r : result.records) {
    const Fault& f = faults[static_cast<size_t>(r.index) % faults.size()];
    EXPECT_EQ(r.error_cause, f.cause) << "request " << r.index << ": " << r.error_text;
    if (!r.ok()) {
      EXPECT_FALSE(r.error_text.empty()) << "request " << r.index;
    }
    EXPECT_GE(r.end_ns, r.scheduled_ns);
  }
  const Summary& m = result.summary;
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.errored, 27);
  EXPECT_EQ(m.errors_by_cause.at("reset"), 6);
  EXPECT_EQ(m.errors_by_cause.at("malformed_sse"), 6);
  EXPECT_EQ(m.errors_by_cause.at("http_4xx"), 3);
  EXPECT_EQ(m.errors_by_cause.at("http_5xx"), 3);
  EXPECT_EQ(m.errors_by_cause.at("timeout"), 3);
  EXPECT_EQ(m.errors_by_cause.at("incomplete"), 3);
  EXPECT_EQ(m.errors_by_cause.at("stream_error"), 3);
  // HTTP errors keep their status and the server's message.
  EXPECT_EQ(result.records[4].http_status, 429);
  EXPECT_NE(result.records[5].error_text.find("fixture error 503"), std::string::npos);
  // A stalled request ends at its deadline, not later.
  const RequestRecord& stalled = result.records[6];
  EXPECT_NEAR((stalled.end_ns - stalled.scheduled_ns) * 1e-9, 0.5, 0.1);
  // Errors are not good and not in the latency statistics.
  EXPECT_EQ(m.good, 3);
  EXPECT_EQ(m.ttft.count, 3);
}

TEST(FaultsTest, ConnectionRefusedIsCountedAndTheRunStaysValid) {
  LoadSettings s;
  s.rate_rps = 100;
  s.arrival = Arrival::kConstant;
  s.requests = 10;
  LoadResult result = RunLoad(s, {FixtureServer::ClosedPortUrl(), "some-model"});
  EXPECT_EQ(result.summary.errors_by_cause.at("connect"), 10);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.sent_ns, -1);
    EXPECT_GE(r.issued_ns, r.scheduled_ns);
  }
  // The generator acted on schedule; the server was missing. That is an error count, not an
  // invalid run.
  EXPECT_EQ(result.validity.unsent, 0);
  EXPECT_FALSE(result.validity.ResultLine().find("never sent") != std::string::npos);
}

TEST(FaultsTest, ModelDiscoveryFailureIsATargetError) {
  EXPECT_THROW(RunLoad(LoadSettings{}, {FixtureServer::ClosedPortUrl(), ""}), TargetError);
  EXPECT_THROW(RunLoad(LoadSettings{}, {"ftp://127.0.0.1:1", "m"}), TargetError);
  // A CA file that cannot be read is refused before anything is sent.
  EXPECT_THROW(RunLoad(LoadSettings{}, Target("https://127.0.0.1:1", "m",
                                              {"", {}, "/nonexistent/ca.pem", false})),
               TargetError);
}

TEST(FaultsTest, StallingServerBehindOneConnectionTimesOutEveryRequestAndIsInvalid) {
  FixtureOptions options;
  options.plan = [](int64_t) {
    FixtureReply reply;
    reply.kind = Kind::kStall;
    return reply;
  };
  FixtureServer server(options);
  LoadSettings s;
  s.rate_rps = 10;  // 100 ms apart: each waiting request is still within its deadline
  s.arrival = Arrival::kConstant;
  s.requests = 5;
  s.max_connections = 1;
  s.request_timeout_s = 0.3;
  auto start = std::chrono::steady_clock::now();
  LoadResult result = RunLoad(s, {server.url(), "fixture-model"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  EXPECT_EQ(result.summary.errors_by_cause.at("timeout"), 5);
  // Request 1 could only go when request 0 gave its connection up at its deadline.
  EXPECT_GE(result.records[1].sent_ns, result.records[0].scheduled_ns + 290'000'000);
  EXPECT_FALSE(result.validity.valid);
  EXPECT_NE(result.validity.ResultLine().find("P99 send lag"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::loadgen
