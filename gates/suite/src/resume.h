// `kvgate run --resume RUN`: what an interrupted run may be resumed with, and what its earlier
// legs already measured (docs/product.md, "Runs in legs"). Internal to the suite.
//
// A run is resumed only under the policy it began with (the same digest of its redacted text)
// and by kvgate of the same commit, so every leg measures the same systems the same way; the
// machine may differ and each leg records its own. What the earlier legs stored is kept: quality
// items are not asked again, and a load pair measured whole (both members, neither cut by the
// stop) is not measured again. A pair with a member missing or cut is measured again whole,
// within the new leg, its earlier members kept and marked superseded.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kvgate/history/history_db.h"

namespace kvgate::suite {

// Why a run cannot be resumed by this kvgate under this policy; nothing was changed.
class ResumeRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "xxh3-128:<32 hex>" of a policy's redacted text: how a run names the policy it ran under.
std::string PolicyDigest(const std::string& redacted_policy_text);

// Refuses (ResumeRefused) a run that is not a `kvgate run`, that began under another policy, or
// that another commit of kvgate measured. The run's state (interrupted, no gates yet) is checked
// by HistoryDb::ResumeRun itself.
void CheckResumable(const history::RunRow& run, const std::string& policy_digest,
                    const std::string& git_commit);

// The systems a leg measures, as RunLeg::servers records them: label, how it is reached (a
// local server the suite starts, or the policy's URL, redacted), the model it serves and, for a
// local server, where it ran (cpu_placement.h). JSON: {"label", "kind": "local"|"url", "url",
// "model"} and, for a local server, "cpus" and "client_cpus" (absent from runs stored before
// placement was recorded).
struct LegServer {
  std::string label;
  bool local = true;
  std::string url;  // "" for a local server (its port changes with every start)
  std::string model;
  std::string cpus;         // local: the CPUs it served on, e.g. "1-3" (FormatCpuList)
  std::string client_cpus;  // local: the CPUs of the suite and its load generator meanwhile
};
nlohmann::json ToJson(const std::vector<LegServer>& servers);

// Refuses (ResumeRefused) systems that differ from those the first leg that recorded any
// measured: another model, or an external server at another URL. Where a local server ran is
// not the system: a later leg may run on other hardware, and its CPUs are its own.
void CheckSameServers(const std::vector<history::RunLeg>& legs,
                      const std::vector<LegServer>& now);

// What the stored legs hold.
struct StoredEvidence {
  // (check, label) -> item id -> its stored reference (the gold answers, or the key).
  std::map<std::pair<std::string, std::string>, std::map<std::string, nlohmann::json>> items;
  std::set<int> whole_pairs;          // pairs measured whole: not measured again
  std::vector<int64_t> to_supersede;  // members of pairs that are measured again

  bool Has(const std::string& check, const std::string& label, const std::string& id) const;
  size_t Count(const std::string& check, const std::string& label) const;
  size_t ItemCount() const;  // over every check and label
};
StoredEvidence ReadStoredEvidence(history::HistoryDb& db, int64_t run_id);

// Refuses (ResumeRefused) a check whose items are no longer those the run stored: a stored item
// of `check` that the set `now` (id -> reference, as the items are generated or read today)
// lacks, or whose reference differs (a QA dataset file edited between legs, say). The policy's
// digest covers its text, not the files it names.
void CheckSameItems(const StoredEvidence& stored, const std::string& check,
                    const std::map<std::string, nlohmann::json>& now);

}  // namespace kvgate::suite
