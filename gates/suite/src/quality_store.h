// A run's quality evidence on its way in: the policy's items (made once per run, so a resume can
// compare them with what its earlier legs stored) and a check's records stored as they are
// answered. Internal to the suite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "kvgate/checks/check_runner.h"
#include "kvgate/history/history_db.h"
#include "kvgate/policy/policy.h"

namespace kvgate::suite {

// The policy's quality items: its seeded passkeys, and its QA set (generated from the policy's
// seed, or read from its dataset file).
struct QualityItems {
  std::vector<checks::PasskeyItem> passkey;
  std::vector<checks::QaItem> qa;
};
QualityItems MakeQualityItems(const policy::Policy& policy);

// A check's records stored as they are answered (checks::RecordSink), kBatch at a time in one
// transaction each, so a run cut inside a check keeps what it measured. The sink runs on the
// check's worker threads one at a time while the suite's thread waits in the check, so the
// history's one connection is never used by two threads at once. Once a server the suite
// started has died (servers_alive() false), answers with an error are not stored: they record
// the crash, not the system, and a resume asks them again.
class QualityStore {
 public:
  static constexpr size_t kBatch = 16;

  QualityStore(history::HistoryDb& db, int64_t run_id, std::string label,
               std::function<bool()> servers_alive);

  checks::RecordSink Sink();
  // The rest, after the check returned (or threw). Returns how many items were stored in all.
  size_t Flush();
  size_t dropped() const { return dropped_; }  // errored answers left out after a death

 private:
  void FlushLocked();

  history::HistoryDb& db_;
  const int64_t run_id_;
  const std::string label_;
  const std::function<bool()> alive_;
  std::mutex mutex_;
  std::vector<history::QualityItem> pending_;
  size_t stored_ = 0, dropped_ = 0;
};

}  // namespace kvgate::suite
