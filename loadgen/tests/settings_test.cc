#include "kvgate/loadgen/settings.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kvgate::loadgen {
namespace {

// Runs ValidateSettings and returns the field it blamed ("" when it accepted).
std::string BlamedField(const LoadSettings& settings) {
  try {
    ValidateSettings(settings);
  } catch (const SettingsError& e) {
    return e.field();
  }
  return "";
}

TEST(SettingsTest, DefaultsAreValid) { EXPECT_EQ(BlamedField(LoadSettings{}), ""); }

TEST(SettingsTest, EachBadFieldIsNamed) {
  struct Case {
    std::string field;
    std::function<void(LoadSettings&)> spoil;
  };
  std::vector<Case> cases = {
      {"rate", [](LoadSettings& s) { s.rate_rps = 0; }},
      {"rate", [](LoadSettings& s) { s.rate_rps = std::numeric_limits<double>::infinity(); }},
      {"burstiness",
       [](LoadSettings& s) {
         s.arrival = Arrival::kGamma;
         s.burstiness = -1;
       }},
      {"concurrency",
       [](LoadSettings& s) {
         s.mode = LoadMode::kClosedLoop;
         s.concurrency = 0;
       }},
      {"requests", [](LoadSettings& s) { s.requests = -1; }},
      {"duration", [](LoadSettings& s) { s.duration_s = -2; }},
      {"warmup",
       [](LoadSettings& s) {
         s.requests = 10;
         s.warmup_requests = 10;
       }},
      {"timeout", [](LoadSettings& s) { s.request_timeout_s = 0; }},
      {"input-len", [](LoadSettings& s) { s.workload.input.mean = 0; }},
      {"output-len", [](LoadSettings& s) { s.workload.output.spread = -1; }},
      {"output-len",
       [](LoadSettings& s) {
         s.workload.output.kind = LengthDistributionKind::kUniform;
         s.workload.output.spread = 1.5;
       }},
      {"passkey-depths",
       [](LoadSettings& s) {
         s.workload.kind = WorkloadKind::kPasskey;
         s.workload.passkey_depths = {1.5};
       }},
      {"prompts", [](LoadSettings& s) { s.workload.kind = WorkloadKind::kPromptFile; }},
      {"min-achieved", [](LoadSettings& s) { s.validity.min_achieved_rate_fraction = 1.5; }},
      {"max-send-lag-p99-ms", [](LoadSettings& s) { s.validity.max_send_lag_p99_ms = 0; }},
      {"max-connections", [](LoadSettings& s) { s.max_connections = 0; }},
      {"spin-us", [](LoadSettings& s) { s.spin_us = -1; }},
      {"realtime-priority", [](LoadSettings& s) { s.realtime_priority = 100; }},
      {"extra-body", [](LoadSettings& s) { s.extra_body = nlohmann::json::array({1}); }},
      // A field the generator sets itself: merged last, it would change what is measured.
      {"extra-body", [](LoadSettings& s) { s.extra_body = {{"x", 1}, {"max_tokens", 1}}; }},
      {"extra-body", [](LoadSettings& s) { s.extra_body = {{"stream", false}}; }},
  };
  for (const Case& c : cases) {
    LoadSettings settings;
    c.spoil(settings);
    EXPECT_EQ(BlamedField(settings), c.field);
  }
}

TEST(SettingsTest, ParsesSloAndRejectsBadEntries) {
  Slo slo = ParseSlo("ttft_ms=500, tpot_ms=50");
  EXPECT_EQ(slo.ttft_ms, 500.0);
  EXPECT_EQ(slo.tpot_ms, 50.0);
  EXPECT_FALSE(slo.e2e_ms.has_value());
  EXPECT_EQ(FormatSlo(slo), "ttft_ms=500,tpot_ms=50");
  EXPECT_TRUE(ParseSlo("").empty());
  for (const char* bad : {"ttft_ms", "ttft_ms=abc", "ttft_ms=-1", "latency=5", "ttft_ms=5x"}) {
    EXPECT_THROW(ParseSlo(bad), SettingsError) << bad;
  }
}

TEST(SettingsTest, NamesRoundTrip) {
  for (Arrival a : {Arrival::kPoisson, Arrival::kGamma, Arrival::kConstant}) {
    EXPECT_EQ(ParseArrival(ArrivalName(a)), a);
  }
  for (WorkloadKind k :
       {WorkloadKind::kSynthetic, WorkloadKind::kPasskey, WorkloadKind::kPromptFile}) {
    EXPECT_EQ(ParseWorkload(WorkloadName(k)), k);
  }
  EXPECT_EQ(ParseLengthDistribution("lognormal", "x"), LengthDistributionKind::kLogNormal);
  EXPECT_THROW(ParseArrival("uniform"), SettingsError);
  EXPECT_THROW(ParseLengthDistribution("zipf", "input-dist"), SettingsError);
}

}  // namespace
}  // namespace kvgate::loadgen
