#include "resume.h"

#include <xxhash.h>

#include <cstdio>

#include "evidence.h"

namespace kvgate::suite {

std::string PolicyDigest(const std::string& redacted_policy_text) {
  const XXH128_hash_t digest = XXH3_128bits(redacted_policy_text.data(), redacted_policy_text.size());
  char hex[40];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(digest.high64),
                static_cast<unsigned long long>(digest.low64));
  return std::string("xxh3-128:") + hex;
}

void CheckResumable(const history::RunRow& run, const std::string& policy_digest,
                    const std::string& git_commit) {
  const std::string name = "run " + std::to_string(run.id);
  if (run.info.kind != "run") {
    throw ResumeRefused(name + " is a `kvgate " + run.info.kind +
                        "` run; only `kvgate run` runs can be resumed");
  }
  if (run.info.policy_digest != policy_digest) {
    throw ResumeRefused(name + " began under another policy (" + run.info.notes + ", digest " +
                        run.info.policy_digest + "; this one's is " + policy_digest +
                        "): resume it with the policy it began with");
  }
  if (run.info.git_commit != git_commit) {
    throw ResumeRefused(name + " was measured by kvgate at commit '" + run.info.git_commit +
                        "', this kvgate is '" + git_commit +
                        "': a run's legs must come from one build");
  }
}

nlohmann::json ToJson(const std::vector<LegServer>& servers) {
  nlohmann::json out = nlohmann::json::array();
  for (const LegServer& s : servers) {
    nlohmann::json server = {{"label", s.label},
                             {"kind", s.local ? "local" : "url"},
                             {"url", s.url},
                             {"model", s.model}};
    if (s.local) {
      server["cpus"] = s.cpus;
      server["client_cpus"] = s.client_cpus;
    }
    out.push_back(std::move(server));
  }
  return out;
}

void CheckSameServers(const std::vector<history::RunLeg>& legs,
                      const std::vector<LegServer>& now) {
  for (const history::RunLeg& leg : legs) {
    if (leg.servers.empty()) continue;
    for (const LegServer& s : now) {
      for (const nlohmann::json& then : leg.servers) {
        if (then.value("label", "") != s.label) continue;
        const std::string where =
            "the " + s.label + " server differs from leg " + std::to_string(leg.leg) + "'s: ";
        const std::string kind = s.local ? "local" : "url";
        if (then.value("kind", "") != kind) {
          throw ResumeRefused(where + "it is " + kind + ", was " + then.value("kind", "?"));
        }
        if (then.value("url", "") != s.url) {
          throw ResumeRefused(where + "it is at " + s.url + ", was at " + then.value("url", "?"));
        }
        if (then.value("model", "") != s.model) {
          throw ResumeRefused(where + "it serves model '" + s.model + "', was '" +
                              then.value("model", "?") + "'");
        }
      }
    }
    return;  // the first leg that recorded its servers is the reference
  }
}

bool StoredEvidence::Has(const std::string& check, const std::string& label,
                         const std::string& id) const {
  const auto at = items.find({check, label});
  return at != items.end() && at->second.count(id) > 0;
}

void CheckSameItems(const StoredEvidence& stored, const std::string& check,
                    const std::map<std::string, nlohmann::json>& now) {
  for (const auto& [key, by_id] : stored.items) {
    if (key.first != check) continue;
    for (const auto& [id, reference] : by_id) {
      const auto at = now.find(id);
      if (at == now.end()) {
        throw ResumeRefused("the " + check + " items changed since the run began: its " +
                            key.second + " item '" + id + "' is not in today's set");
      }
      if (at->second != reference) {
        throw ResumeRefused("the " + check + " items changed since the run began: item '" + id +
                            "' now expects " + at->second.dump() + ", the run stored " +
                            reference.dump());
      }
    }
  }
}

size_t StoredEvidence::Count(const std::string& check, const std::string& label) const {
  const auto at = items.find({check, label});
  return at == items.end() ? 0 : at->second.size();
}

size_t StoredEvidence::ItemCount() const {
  size_t n = 0;
  for (const auto& [key, by_id] : items) n += by_id.size();
  return n;
}

StoredEvidence ReadStoredEvidence(history::HistoryDb& db, int64_t run_id) {
  StoredEvidence out;
  for (const history::QualityItem& item : db.QualityItems(run_id)) {
    out.items[{item.check, item.label}][item.item_id] = item.reference;
  }
  struct Members {
    std::vector<int64_t> ids;
    bool baseline = false, candidate = false, cut = false;
  };
  std::map<int, Members> pairs;
  for (const history::LoadRunRow& run : db.LoadRuns(run_id)) {
    if (!run.meta.pair_index || run.superseded_in_leg) continue;
    Members& m = pairs[*run.meta.pair_index];
    m.ids.push_back(run.id);
    m.baseline |= run.meta.label == kBaseline;
    m.candidate |= run.meta.label == kCandidate;
    m.cut |= run.meta.summary.value("stopped", false);
  }
  for (const auto& [index, m] : pairs) {
    if (m.baseline && m.candidate && !m.cut) {
      out.whole_pairs.insert(index);
    } else {
      out.to_supersede.insert(out.to_supersede.end(), m.ids.begin(), m.ids.end());
    }
  }
  return out;
}

}  // namespace kvgate::suite
