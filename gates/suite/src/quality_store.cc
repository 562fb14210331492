#include "quality_store.h"

#include <utility>

#include "evidence.h"
#include "kvgate/checks/passkey.h"
#include "kvgate/checks/qa_set.h"

namespace kvgate::suite {

QualityItems MakeQualityItems(const policy::Policy& p) {
  QualityItems items;
  checks::PasskeySettings passkey;
  passkey.items = p.passkey.items;
  passkey.lengths.assign(p.passkey.lengths.begin(), p.passkey.lengths.end());
  passkey.depths = p.passkey.depths;
  passkey.seed = p.seed;
  passkey.key_digits = p.passkey.key_digits;
  passkey.max_tokens = p.passkey.max_tokens;
  items.passkey = checks::GeneratePasskeyItems(passkey);
  if (!p.qa.dataset.empty()) {
    items.qa = checks::LoadQaJsonl(p.qa.dataset);
  } else {
    checks::QaSetSettings qa;
    qa.items = p.qa.items;
    qa.lengths.assign(p.qa.lengths.begin(), p.qa.lengths.end());
    qa.seed = p.seed + 1;
    qa.max_tokens = p.qa.max_tokens;
    items.qa = checks::GenerateQaSet(qa);
  }
  return items;
}

QualityStore::QualityStore(history::HistoryDb& db, int64_t run_id, std::string label,
                           std::function<bool()> servers_alive)
    : db_(db), run_id_(run_id), label_(std::move(label)), alive_(std::move(servers_alive)) {}

checks::RecordSink QualityStore::Sink() {
  return [this](const checks::QualityRecord& record) {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(ToHistoryItem(record, label_));
    if (pending_.size() >= kBatch) FlushLocked();
  };
}

size_t QualityStore::Flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  FlushLocked();
  return stored_;
}

void QualityStore::FlushLocked() {
  if (pending_.empty()) return;
  if (!alive_()) {
    const size_t before = pending_.size();
    std::erase_if(pending_, [](const history::QualityItem& item) {
      return !item.extra.value("error", std::string()).empty();
    });
    dropped_ += before - pending_.size();
  }
  db_.AddQualityItems(run_id_, pending_);
  stored_ += pending_.size();
  pending_.clear();
}

}  // namespace kvgate::suite
