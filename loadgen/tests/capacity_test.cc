#include <gtest/gtest.h>

#include "fixture_server.h"
#include "kvgate/loadgen/run_load.h"

namespace kvgate::loadgen {
namespace {

using testing::FixtureOptions;
using testing::FixtureReply;
using testing::FixtureServer;

TEST(CapacityTest, FindsTheKneeOfAServerWithKnownCapacity) {
  // Two slots, 40 ms of service each: capacity 50 req/s. Below it TTFT is 20 ms; above it the
  // queue grows with every request and TTFT soon breaks the 100 ms SLO. (Millisecond-scale
  // scheduling noise of a busy machine stays well inside the 80 ms of slack.)
  FixtureOptions options;
  options.max_active = 2;
  options.plan = [](int64_t) {
    FixtureReply reply;
    reply.ttft_ms = 20;
    reply.itl_ms = 20;
    reply.tokens = 2;
    return reply;
  };
  FixtureServer server(options);
  LoadSettings s;
  s.arrival = Arrival::kConstant;
  s.requests = 60;
  s.request_timeout_s = 10;
  s.workload.output.mean = 2;
  s.validity.max_send_lag_p99_ms = 50;  // judge the server's knee, not a busy CI machine
  CapacitySearch search;
  search.slo.ttft_ms = 100;
  search.attainment = 0.9;
  search.rate_min_rps = 25;
  search.rate_max_rps = 400;
  search.tolerance = 0.1;
  search.max_probes = 8;
  CapacityResult result = FindCapacity(s, {server.url(), ""}, search);
  ASSERT_TRUE(result.capacity_rps.has_value()) << result.reason;
  // With 60 requests per probe the search resolves the knee to within ~10% above 50 req/s.
  EXPECT_GE(*result.capacity_rps, 40.0) << result.reason;
  EXPECT_LE(*result.capacity_rps, 60.0) << result.reason;
  ASSERT_TRUE(result.first_failing_rps.has_value());
  EXPECT_GT(*result.first_failing_rps, *result.capacity_rps);
  EXPECT_LE(*result.first_failing_rps / *result.capacity_rps, 1.0 + search.tolerance + 1e-9)
      << result.reason;
  EXPECT_LE(static_cast<int>(result.probes.size()), search.max_probes);
  // Bracketing doubled from rate_min (25, 50, 100, ...) before bisecting.
  EXPECT_DOUBLE_EQ(result.probes[0].rate_rps, 25);
  EXPECT_DOUBLE_EQ(result.probes[1].rate_rps, 50);
  EXPECT_TRUE(result.probes[0].passed);
}

TEST(CapacityTest, ReportsWhenEvenTheLowestRateFails) {
  FixtureOptions options;
  options.plan = [](int64_t) {
    FixtureReply reply;
    reply.ttft_ms = 60;
    return reply;
  };
  FixtureServer server(options);
  LoadSettings s;
  s.requests = 5;
  s.workload.output.mean = 1;
  CapacitySearch search;
  search.slo.ttft_ms = 20;
  search.rate_min_rps = 50;
  search.rate_max_rps = 100;
  CapacityResult result = FindCapacity(s, {server.url(), "fixture-model"}, search);
  EXPECT_FALSE(result.capacity_rps.has_value());
  EXPECT_EQ(result.probes.size(), 1u);
  EXPECT_NE(result.reason.find("below"), std::string::npos) << result.reason;
}

TEST(CapacityTest, NeedsAnSlo) {
  EXPECT_THROW(FindCapacity(LoadSettings{}, {"http://127.0.0.1:1", "m"}, CapacitySearch{}),
               SettingsError);
}

}  // namespace
}  // namespace kvgate::loadgen
