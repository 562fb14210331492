// The phases of one `kvgate run` (run_suite.h's RunSuite calls them in order): register or
// resume the run, start or reach the servers, the quality checks, the load pairs, the ledgers and
// the gates. Each phase stores what it measured before the next begins. Internal to the suite.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "evidence.h"
#include "quality_store.h"
#include "resume.h"
#include "kvgate/gates/gates.h"
#include "kvgate/history/history_db.h"
#include "kvgate/http/client_config.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/policy/policy.h"
#include "kvgate/secrets/redact.h"
#include "kvgate/suite/cpu_placement.h"
#include "kvgate/suite/run_metrics.h"
#include "kvgate/suite/run_suite.h"
#include "kvgate/suite/server_process.h"

namespace kvgate::suite {

// One side of the comparison: a server the suite started, or an external URL.
struct System {
  std::string label;
  const policy::ServerSpec* spec = nullptr;
  std::unique_ptr<ServerProcess> process;
  std::string url;
  std::string model;
  http::ClientConfig client;  // TLS trust and the bearer key (from the policy's api_key_env)

  loadgen::Target target() const {
    return loadgen::Target(url, model, client, spec->endpoint);
  }
};

// One `kvgate run`, phase by phase: each phase stores what it measured before the next begins, so
// a run cut anywhere keeps its evidence (docs/architecture.md, "A verdict").
class SuiteRun {
 public:
  // `placement`: where local servers run; null when the policy has none.
  SuiteRun(const policy::Policy& policy, const SuiteOptions& options, history::HistoryDb& db,
           const CpuPlacement* placement)
      : policy_(policy),
        options_(options),
        db_(db),
        metrics_(options.metrics),
        placement_(placement) {}

  // Every line leaves through secrets::RedactText: a policy's URL may carry a password or a
  // token, which the connections need and nothing written may show.
  void Say(const std::string& line) const {
    if (options_.progress) options_.progress(secrets::RedactText(line));
  }
  void Phase(std::string_view name) const {
    if (metrics_) metrics_->SetPhase(name);
  }

  int64_t Register();
  int64_t Resume(int64_t run_id);
  void StartServers();
  void RunQualityChecks();
  void RunLoadPairs();
  void StoreLedgers();
  std::vector<gates::GateResult> DecideGates();
  void StopServers(std::chrono::seconds grace) {
    for (System& system : systems_) {
      if (system.process) system.process->Stop(grace);
    }
  }

 private:
  // The command line a local server is started with (recorded; its secrets redacted).
  std::vector<std::string> ServeCommand(const System& system) const {
    std::vector<std::string> argv = {options_.kvgate_binary, "serve"};
    argv.insert(argv.end(), system.spec->serve_args.begin(), system.spec->serve_args.end());
    return argv;
  }
  void RunLoadOnce(System& system, int pair);
  bool ServersAlive() {
    for (System& system : systems_) {
      if (system.process && !system.process->Alive()) return false;
    }
    return true;
  }

  const policy::Policy& policy_;
  const SuiteOptions& options_;
  history::HistoryDb& db_;
  RunMetrics* metrics_;
  const CpuPlacement* placement_;
  int64_t run_id_ = 0;
  int leg_ = 1;
  StoredEvidence stored_;  // what the earlier legs of a resumed run hold
  std::optional<QualityItems> items_;  // the policy's, made once (Items())
  const QualityItems& Items() {
    if (!items_) items_ = MakeQualityItems(policy_);
    return *items_;
  }
  System systems_[2] = {{kBaseline, &policy_.baseline, nullptr, "", "", {}},
                        {kCandidate, &policy_.candidate, nullptr, "", "", {}}};
};

}  // namespace kvgate::suite
