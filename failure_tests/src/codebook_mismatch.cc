// Scenario "codebook_mismatch" (issue 6, failure 1): a prefix cache written under one codebook
// (W = 8, the Lloyd tree of 8 levels) is shared with a server restarted under another (W = 6).
// Objects are named by the writer's identity, so the W = 6 server never reads a W = 8 object:
// its first pass recomputes every block (no loads, no refusals) and answers as a fresh W = 6
// server on an empty cache; its second pass loads its own objects; the W = 8 objects stay
// byte for byte (nothing destroyed), and a W = 8 server started again hits all of them
// (alternating configurations keep their caches). The refusal path behind the name: the W = 8
// objects copied under the W = 6 identity's names must each be refused
// (the cache rejections counter, reason="identity_mismatch", the warning naming store_bits),
// quarantined, never decoded, and the answers must again equal the fresh server's.
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kvgate/failure_tests/scenario.h"
#include "kvgate/suite/server_process.h"
#include "prefix_cache_servers.h"
#include "reference_server.h"

namespace kvgate::failure_tests {
namespace {

namespace pc = prefix_cache;

ScenarioResult RunCodebookMismatch(const ScenarioContext& context) {
  ScenarioResult result;
  nlohmann::json& ev = result.evidence;
  try {
    const std::string cache = (std::filesystem::path(context.work_dir) / "cache").string();
    const std::string fresh_cache =
        (std::filesystem::path(context.work_dir) / "fresh_cache").string();
    const std::vector<std::string> prompts = pc::Prompts(3, 1);
    pc::ServeSettings old_codebook{context.model_dir, cache, 8, 4.0};
    pc::ServeSettings new_codebook{context.model_dir, cache, 6, 3.0};
    pc::ServeSettings fresh = new_codebook;
    fresh.cache_dir = fresh_cache;
    ev["old"] = {{"store_bits", 8}, {"read_bits", 4.0}};
    ev["new"] = {{"store_bits", 6}, {"read_bits", 3.0}};
    ev["prompts"] = prompts.size();

    {
      auto writer = pc::StartServer(context, "writer_w8", old_codebook);
      pc::Complete(writer->url(), prompts);
      writer->Stop();
    }
    const std::map<std::string, std::string> w8_objects = pc::ObjectDigests(cache);
    const auto stale = static_cast<int64_t>(w8_objects.size());
    ev["w8_objects"] = stale;
    if (stale == 0) return result.Done(false, "the W=8 server stored no prefix objects in " + cache);

    // 1. The W=6 server beside the W=8 objects: neither reads nor touches them.
    auto reference = pc::StartServer(context, "fresh_w6", fresh);
    std::vector<std::string> first, second;
    std::map<std::string, double> shared_rejections;
    pc::PrefixLog shared_log;
    {
      auto restarted = pc::StartServer(context, "restarted_w6", new_codebook);
      pc::Progress(context, "first pass: a W=6 server on the W=8 server's cache directory");
      first = pc::Complete(restarted->url(), prompts);
      pc::Progress(context, "second pass: the restarted server's own objects");
      second = pc::Complete(restarted->url(), prompts);
      shared_rejections = pc::Rejections(restarted->url());
      restarted->Stop();
      shared_log = pc::ReadPrefixLog(restarted->log_path());
    }
    const auto expected = pc::Complete(reference->url(), prompts);
    const std::string w6_identity = pc::NewIdentity(cache, w8_objects);
    const bool w8_untouched = pc::Untouched(cache, w8_objects);
    ev["shared"] = {{"rejections", shared_rejections},
                    {"log", shared_log.ToJson()},
                    {"w8_objects_untouched", w8_untouched},
                    {"w6_identity", w6_identity},
                    {"first_pass_equal", pc::FirstDifference(first, expected) < 0},
                    {"second_pass_equal", pc::FirstDifference(second, expected) < 0}};
    if (!shared_rejections.empty() && (pc::RejectionCount(shared_rejections, "identity_mismatch") +
                                       pc::RejectionCount(shared_rejections, "corrupt")) != 0.0) {
      return result.Done(false, "the W=6 server refused objects it should never have read: " +
                                    nlohmann::json(shared_rejections).dump());
    }
    if (shared_log.computed != stale || shared_log.loaded != stale) {
      return result.Done(false, "expected the first pass to compute all " + std::to_string(stale) +
                                    " blocks and the second to load its own; the log says " +
                                    shared_log.ToJson().dump());
    }
    if (!w8_untouched) {
      return result.Done(false, "the W=6 server removed or rewrote W=8 objects");
    }
    if (w6_identity.empty()) {
      return result.Done(false, "could not tell the W=6 server's objects by their names");
    }
    if (const int i = pc::FirstDifference(first, expected); i >= 0) {
      return result.Done(false, "prompt " + std::to_string(i) +
                                    ": the W=6 server beside W=8 objects answered differently "
                                    "from a fresh one");
    }
    if (const int i = pc::FirstDifference(second, expected); i >= 0) {
      return result.Done(false, "prompt " + std::to_string(i) +
                                    ": answers from the W=6 server's own cache objects differ "
                                    "from a fresh server's");
    }

    // 2. Alternation: a W=8 server again finds every one of its objects.
    {
      auto again = pc::StartServer(context, "writer_again_w8", old_codebook);
      pc::Complete(again->url(), prompts);
      const auto rejections = pc::Rejections(again->url());
      again->Stop();
      const pc::PrefixLog log = pc::ReadPrefixLog(again->log_path());
      ev["alternation"] = {{"log", log.ToJson()}, {"rejections", rejections}};
      if (log.loaded != stale || log.computed != 0) {
        return result.Done(false, "a W=8 server started again did not load all " +
                                      std::to_string(stale) + " of its objects: " +
                                      log.ToJson().dump());
      }
    }

    // 3. Behind the name: W=8 objects under the W=6 identity's names are refused by header.
    const int64_t planted = pc::PlantUnderIdentity(cache, w8_objects, w6_identity);
    auto misnamed = pc::StartServer(context, "misnamed_w6", new_codebook);
    pc::Progress(context, "third pass: W=8 objects under the W=6 server's names");
    const auto third = pc::Complete(misnamed->url(), prompts);
    const auto rejections = pc::Rejections(misnamed->url());
    misnamed->Stop();
    reference->Stop();
    const pc::PrefixLog log = pc::ReadPrefixLog(misnamed->log_path());
    const double mismatches = pc::RejectionCount(rejections, "identity_mismatch");
    const double corrupt = pc::RejectionCount(rejections, "corrupt");
    const int64_t quarantined = pc::CountQuarantined(cache);
    ev["misnamed"] = {{"planted", planted},
                      {"rejections", rejections},
                      {"quarantined", quarantined},
                      {"log", log.ToJson()},
                      {"answers_equal", pc::FirstDifference(third, expected) < 0}};
    if (mismatches != static_cast<double>(planted) || corrupt != 0.0) {
      return result.Done(false, std::string(kCacheRejectionsSeries) +
                                    "{reason=\"identity_mismatch\"} is " +
                                    std::to_string(mismatches) + " (corrupt " +
                                    std::to_string(corrupt) + "), expected one per planted object (" +
                                    std::to_string(planted) + ")");
    }
    if (quarantined != planted) {
      return result.Done(false, std::to_string(quarantined) + " objects quarantined, expected " +
                                    std::to_string(planted));
    }
    const auto field = log.refused_fields.find("store_bits");
    if (field == log.refused_fields.end() || field->second != planted) {
      return result.Done(false, "the refusal warnings do not name store_bits once per object");
    }
    if (log.loaded != 0) {
      return result.Done(false, "the misnamed W=8 objects were loaded: " + log.ToJson().dump());
    }
    if (const int i = pc::FirstDifference(third, expected); i >= 0) {
      return result.Done(false, "prompt " + std::to_string(i) +
                                    ": the server offered misnamed W=8 objects answered "
                                    "differently from a fresh one");
    }
    return result.Done(true, "a W=6 server beside " + std::to_string(stale) +
                                 " W=8 objects read none and left them whole (a W=8 server "
                                 "then hit all); the same objects under W=6 names were refused as "
                                 "identity_mismatch (store_bits) and quarantined; answers equal a "
                                 "fresh W=6 server's on every pass");
  } catch (const std::exception& e) {
    return result.Done(false, std::string("error: ") + e.what());
  }
}

KVGATE_REGISTER_SCENARIO("codebook_mismatch",
                         "a cache written under one codebook/W is never read by a server of "
                         "another (both keep their objects) and is refused by its header when "
                         "misnamed; answers equal a fresh server's",
                         &RunCodebookMismatch);

}  // namespace
}  // namespace kvgate::failure_tests
