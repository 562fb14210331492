// Scenario "budget_change" (issue 6, failure 3): the read policy is not part of a stored object's
// identity (docs/cache-identity.md), so a cache written at one budget must be reused at
// another without re-encoding. A server at R = 4 fills the cache; a server restarted on it at
// R = 2 must load every block (no rejection, nothing stored, every object byte-identical
// afterwards) and answer exactly as a fresh R = 2 server on an empty directory; the same server
// asked per request for R = 6 (`readkv.read_bits`) must answer exactly as a fresh server whose
// default is R = 6. The policy in force is recorded with every request of the evidence (the
// server's default, and the request's override as sent) and with every run (each server's flags).
#include <exception>
#include <filesystem>

#include "kvgate/failure_tests/scenario.h"
#include "kvgate/suite/server_process.h"
#include "prefix_cache_servers.h"

namespace kvgate::failure_tests {
namespace {

namespace fs = std::filesystem;
namespace pc = prefix_cache;

nlohmann::json RunRecord(const char* name, const pc::ServeSettings& s) {
  return {{"server", name},
          {"store_bits", s.store_bits},
          {"read_bits", s.read_bits},
          {"cache_dir", s.cache_dir}};
}

ScenarioResult RunBudgetChange(const ScenarioContext& context) {
  ScenarioResult result;
  nlohmann::json& ev = result.evidence;
  try {
    const fs::path work = context.work_dir;
    const std::string cache = (work / "cache").string();
    const std::vector<std::string> prompts = pc::Prompts(3, 3);
    const pc::ServeSettings writer_settings{context.model_dir, cache, 8, 4.0};
    const pc::ServeSettings reuse_settings{context.model_dir, cache, 8, 2.0};
    const pc::ServeSettings fresh2_settings{context.model_dir, (work / "fresh_r2").string(), 8,
                                            2.0};
    const pc::ServeSettings fresh6_settings{context.model_dir, (work / "fresh_r6").string(), 8,
                                            6.0};
    const nlohmann::json per_request = {{"readkv", {{"read_bits", 6.0}}}};
    ev["runs"] = {RunRecord("writer", writer_settings), RunRecord("restarted", reuse_settings),
                  RunRecord("fresh_r2", fresh2_settings), RunRecord("fresh_r6", fresh6_settings)};
    ev["requests"] = nlohmann::json::array();
    auto record = [&](const char* server, const pc::ServeSettings& s, const nlohmann::json& body,
                      const std::vector<std::string>& texts) {
      for (size_t i = 0; i < texts.size(); ++i) {
        ev["requests"].push_back(
            {{"server", server},
             {"prompt", i},
             {"server_read_bits", s.read_bits},
             {"request_readkv", body.is_null() ? nlohmann::json(nullptr) : body.at("readkv")},
             {"read_bits_in_force",
              body.is_null() ? s.read_bits : body["readkv"]["read_bits"].get<double>()},
             {"completion", texts[i]}});
      }
    };

    {
      auto writer = pc::StartServer(context, "writer_r4", writer_settings);
      record("writer", writer_settings, nullptr, pc::Complete(writer->url(), prompts));
      writer->Stop();
    }
    const auto stored = pc::ObjectDigests(cache);
    ev["objects"] = stored.size();
    if (stored.empty()) return result.Done(false, "the R=4 server stored no prefix objects");

    auto restarted = pc::StartServer(context, "restarted_r2", reuse_settings);
    auto fresh2 = pc::StartServer(context, "fresh_r2", fresh2_settings);
    auto fresh6 = pc::StartServer(context, "fresh_r6", fresh6_settings);
    const auto got2 = pc::Complete(restarted->url(), prompts);
    const auto got6 = pc::Complete(restarted->url(), prompts, per_request);
    const auto want2 = pc::Complete(fresh2->url(), prompts);
    const auto want6 = pc::Complete(fresh6->url(), prompts);
    record("restarted", reuse_settings, nullptr, got2);
    record("restarted", reuse_settings, per_request, got6);
    record("fresh_r2", fresh2_settings, nullptr, want2);
    record("fresh_r6", fresh6_settings, nullptr, want6);
    const auto rejections = pc::Rejections(restarted->url());
    restarted->Stop();
    fresh2->Stop();
    fresh6->Stop();
    const pc::PrefixLog log = pc::ReadPrefixLog(restarted->log_path());
    const auto after = pc::ObjectDigests(cache);
    ev["rejections"] = rejections;
    ev["restarted_log"] = log.ToJson();
    ev["objects_unchanged"] = after == stored;
    ev["r2_equal"] = pc::FirstDifference(got2, want2) < 0;
    ev["r6_per_request_equal"] = pc::FirstDifference(got6, want6) < 0;
    ev["budgets_differ"] = pc::FirstDifference(got2, got6) >= 0;

    double refused = 0.0;
    for (const auto& [reason, count] : rejections) {
      if (reason != "invalid_policy") refused += count;
    }
    if (refused != 0.0) return result.Done(false, "the restarted server refused stored objects");
    if (log.computed != 0 || log.stored != 0 ||
        log.loaded != 2 * static_cast<int64_t>(stored.size())) {
      return result.Done(false, "expected every prefix block loaded and none re-encoded; the log says " +
                               log.ToJson().dump());
    }
    if (after != stored) return result.Done(false, "stored objects changed: storage was rewritten");
    if (const int i = pc::FirstDifference(got2, want2); i >= 0) {
      return result.Done(false, "prompt " + std::to_string(i) +
                               ": at R=2 the reused cache answered differently from a fresh R=2 "
                               "server");
    }
    if (const int i = pc::FirstDifference(got6, want6); i >= 0) {
      return result.Done(false, "prompt " + std::to_string(i) +
                               ": readkv.read_bits=6 per request on the reused cache answered "
                               "differently from a fresh R=6 server");
    }
    return result.Done(true, "R=4 storage (" + std::to_string(stored.size()) +
                            " objects) reused unchanged at R=2 and per-request R=6; answers equal "
                            "fresh servers at those budgets");
  } catch (const std::exception& e) {
    return result.Done(false, std::string("error: ") + e.what());
  }
}

KVGATE_REGISTER_SCENARIO("budget_change",
                         "the read budget changes between runs and per request: storage is "
                         "reused without re-encoding and answers equal a fresh server's",
                         &RunBudgetChange);

}  // namespace
}  // namespace kvgate::failure_tests
