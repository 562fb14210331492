// A stand-in DecodeModel for scheduler tests: a FIXED-TABLE next-token model, not a neural net.
//
// It "generates" the bytes of a fixed text cyclically, indexed by the sequence's length, so its
// output is readable, deterministic and independent of batching; the runner-up token gets a
// slightly lower logit so temperature sampling has a real choice. It keeps honest bookkeeping
// (live sequences, KV bytes per token, ledgers) so the engine's frees and metrics can be checked,
// and can be slowed down per step to emulate compute time. Use the real runtime
// (readkv/model) wherever the test is about model behaviour.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "readkv/engine/decode_model.h"

namespace readkv::engine::testing {

class TableDecodeModel final : public DecodeModel {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int kVocab = 258;
  static constexpr int64_t kBytesPerToken = 64;

  struct Options {
    std::string text = "The grass is green. The sky is blue. ";  // generated cyclically
    int max_context = 512;
    int eos_at_length = -1;  // sequence length at which EOS is the top token (-1: never)
    std::chrono::microseconds step_delay{0};
    int64_t kv_bytes_limit = 0;
    int store_bits = 8;
    std::string kv_backend = "readkv";
  };

  TableDecodeModel() : TableDecodeModel(Options{}) {}
  explicit TableDecodeModel(Options options) : options_(std::move(options)) {}

  std::string model_id() const override { return "test/table-model"; }
  int vocab_size() const override { return kVocab; }
  int max_context() const override { return options_.max_context; }
  int32_t bos_token() const override { return kBos; }
  int32_t eos_token() const override { return kEos; }
  std::string kv_backend() const override { return options_.kv_backend; }

  void StartSequence(uint64_t sequence_id, const ReadPolicy& policy) override {
    if (policy.read_bits && (*policy.read_bits <= 0 || *policy.read_bits > options_.store_bits)) {
      throw std::invalid_argument("read_bits: must be in (0, store_bits]");
    }
    if (policy.reader && *policy.reader != "flexible" && *policy.reader != "constrained") {
      throw std::invalid_argument("reader: must be flexible or constrained");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (lengths_.count(sequence_id)) throw std::invalid_argument("sequence_id: already live");
    lengths_[sequence_id] = 0;
    policies_[sequence_id] = policy;
    ++started_;
  }

  void Forward(std::span<SequenceStep> steps) override {
    if (options_.step_delay.count() > 0) std::this_thread::sleep_for(options_.step_delay);
    std::lock_guard<std::mutex> lock(mu_);
    ++forward_calls_;
    calls_.emplace_back();
    for (SequenceStep& step : steps) {
      auto it = lengths_.find(step.sequence_id);
      if (it == lengths_.end()) throw std::invalid_argument("sequence_id: not live");
      if (step.tokens.empty()) throw std::invalid_argument("tokens: empty");
      it->second += static_cast<int>(step.tokens.size());
      if (it->second > options_.max_context) throw std::invalid_argument("tokens: context full");
      calls_.back().push_back({step.sequence_id, static_cast<int>(step.tokens.size()),
                               step.logits_wanted});
      if (!step.logits_wanted) {  // a prompt chunk before the last: no logits
        step.logits.clear();
        continue;
      }
      const int length = it->second;
      const auto& text = options_.text;
      const int32_t top = length == options_.eos_at_length
                              ? kEos
                              : static_cast<unsigned char>(text[length % text.size()]);
      const int32_t second = static_cast<unsigned char>(text[(length + 1) % text.size()]);
      step.logits.assign(kVocab, 0.0f);
      step.logits[second] = 4.0f;
      step.logits[top] = 5.0f;
      ledgers_.logical_read_bytes += static_cast<int64_t>(length) * kBytesPerToken / 2;
      ledgers_.physical_traffic_bytes += static_cast<int64_t>(length) * kBytesPerToken;
    }
  }

  void EndSequence(uint64_t sequence_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lengths_.erase(sequence_id) == 0) throw std::invalid_argument("sequence_id: not live");
    ++ended_;
  }

  int64_t kv_bytes_in_use() const override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t tokens = 0;
    for (const auto& [id, length] : lengths_) tokens += length;
    return tokens * kBytesPerToken;
  }
  int64_t kv_bytes_limit() const override { return options_.kv_bytes_limit; }

  KvLedgers ledgers() const override {
    KvLedgers out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out = ledgers_;
    }
    out.capacity_bytes = kv_bytes_in_use();
    out.read_depth_counts.assign(static_cast<size_t>(options_.store_bits) + 1, 0);
    out.read_depth_counts[4] = out.logical_read_bytes / kBytesPerToken;
    return out;
  }

  // Test-thread views.
  int live_sequences() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(lengths_.size());
  }
  int64_t started() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }
  int64_t ended() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  // Every Forward call so far: its steps as (sequence, tokens fed, logits wanted).
  struct FedStep {
    uint64_t sequence_id;
    int tokens;
    bool logits_wanted;
  };
  std::vector<std::vector<FedStep>> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  int64_t forward_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return forward_calls_;
  }

 private:
  Options options_;
  mutable std::mutex mu_;
  std::map<uint64_t, int> lengths_;
  std::map<uint64_t, ReadPolicy> policies_;
  KvLedgers ledgers_;
  int64_t started_ = 0;
  int64_t ended_ = 0;
  int64_t forward_calls_ = 0;
  std::vector<std::vector<FedStep>> calls_;
};

}  // namespace readkv::engine::testing
