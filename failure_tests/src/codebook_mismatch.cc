// Scenario "codebook_mismatch" (issue 6, failure 1): a prefix cache written under one codebook
// (W = 8, the Lloyd tree of 8 levels) is offered to a server restarted under another (W = 6). Every
// stale object must be refused (readkv_cache_rejections_total{reason="identity_mismatch"} equal
// to the number of objects, each moved to quarantine/, the warning naming store_bits), nothing
// decoded from it, and the restarted server's answers must equal those of a fresh W = 6 server on
// an empty cache directory — on the first pass (recomputed) and the second (its own new objects).
#include <exception>
#include <filesystem>

#include "kvgate/failure_tests/scenario.h"
#include "kvgate/suite/server_process.h"
#include "prefix_cache_servers.h"

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
    const int64_t stale = pc::CountObjects(cache);
    ev["stale_objects"] = stale;
    if (stale == 0) return result.Done(false, "the W=8 server stored no prefix objects in " + cache);

    auto restarted = pc::StartServer(context, "restarted_w6", new_codebook);
    auto reference = pc::StartServer(context, "fresh_w6", fresh);
    pc::Progress(context, "first pass: stale cache vs empty cache");
    const auto first = pc::Complete(restarted->url(), prompts);
    const auto expected = pc::Complete(reference->url(), prompts);
    pc::Progress(context, "second pass: the restarted server's own objects");
    const auto second = pc::Complete(restarted->url(), prompts);
    const auto rejections = pc::Rejections(restarted->url());
    const double mismatches = pc::RejectionCount(rejections, "identity_mismatch");
    const double corrupt = pc::RejectionCount(rejections, "corrupt");
    const double fresh_rejections =
        pc::RejectionCount(pc::Rejections(reference->url()), "identity_mismatch");
    restarted->Stop();
    reference->Stop();
    const pc::PrefixLog log = pc::ReadPrefixLog(restarted->log_path());
    const int64_t quarantined = pc::CountQuarantined(cache);
    ev["rejections"] = rejections;
    ev["fresh_server_identity_rejections"] = fresh_rejections;
    ev["quarantined"] = quarantined;
    ev["objects_after"] = pc::CountObjects(cache);
    ev["restarted_log"] = log.ToJson();
    ev["first_pass_equal"] = pc::FirstDifference(first, expected) < 0;
    ev["second_pass_equal"] = pc::FirstDifference(second, expected) < 0;

    if (mismatches != static_cast<double>(stale) || corrupt != 0.0) {
      return result.Done(false, "readkv_cache_rejections_total{reason=\"identity_mismatch\"} is " +
                               std::to_string(mismatches) + " (corrupt " + std::to_string(corrupt) +
                               "), expected one per stale object (" + std::to_string(stale) + ")");
    }
    if (quarantined != stale) {
      return result.Done(false, std::to_string(quarantined) + " objects quarantined, expected " +
                               std::to_string(stale));
    }
    const auto field = log.refused_fields.find("store_bits");
    if (field == log.refused_fields.end() || field->second != stale) {
      return result.Done(false, "the refusal warnings do not name store_bits once per stale object");
    }
    if (log.loaded != log.blocks - log.computed || log.computed != stale || log.loaded != stale) {
      return result.Done(false, "expected the first pass to recompute all " + std::to_string(stale) +
                               " blocks and the second to load them all; the log says " +
                               log.ToJson().dump());
    }
    if (const int i = pc::FirstDifference(first, expected); i >= 0) {
      return result.Done(false, "prompt " + std::to_string(i) +
                               ": the server restarted on the stale cache answered differently "
                               "from a fresh one");
    }
    if (const int i = pc::FirstDifference(second, expected); i >= 0) {
      return result.Done(false, "prompt " + std::to_string(i) +
                               ": answers from the restarted server's own cache objects differ "
                               "from a fresh server's");
    }
    return result.Done(true, "all " + std::to_string(stale) +
                            " W=8 objects refused as identity_mismatch (store_bits), "
                            "quarantined and recomputed; answers equal a fresh W=6 server's on "
                            "both passes");
  } catch (const std::exception& e) {
    return result.Done(false, std::string("error: ") + e.what());
  }
}

KVGATE_REGISTER_SCENARIO("codebook_mismatch",
                         "a cache written under one codebook/W is refused by a server restarted "
                         "under another; answers equal a fresh server's",
                         &RunCodebookMismatch);

}  // namespace
}  // namespace kvgate::failure_tests
