#include "readkv/model/evaluation.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "readkv/model/recall_data.h"

namespace readkv::model {
namespace {

int32_t Argmax(const std::vector<float>& logits) {
  // Ties go to the lowest id, so greedy decoding is deterministic.
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Ends every started sequence, also when Forward throws.
class SequenceGuard {
 public:
  explicit SequenceGuard(engine::DecodeModel& model) : model_(model) {}
  ~SequenceGuard() {
    for (uint64_t id : ids_) model_.EndSequence(id);
  }
  void Add(uint64_t id) { ids_.push_back(id); }

 private:
  engine::DecodeModel& model_;
  std::vector<uint64_t> ids_;
};

}  // namespace

std::vector<Completion> GreedyCompleteBatch(engine::DecodeModel& model, const Tokenizer& tokenizer,
                                            const std::vector<std::string>& prompts,
                                            int max_new_tokens,
                                            const std::vector<std::string>& stop,
                                            const engine::ReadPolicy& policy,
                                            uint64_t first_sequence_id) {
  const size_t n = prompts.size();
  std::vector<Completion> out(n);
  std::vector<std::vector<int32_t>> prompt_ids(n);
  SequenceGuard guard(model);
  for (size_t i = 0; i < n; ++i) {
    prompt_ids[i] = tokenizer.Encode(prompts[i], /*add_bos=*/true);
    out[i].prompt_tokens = static_cast<int>(prompt_ids[i].size());
    model.StartSequence(first_sequence_id + i, policy);
    guard.Add(first_sequence_id + i);
  }
  std::vector<bool> done(n, max_new_tokens <= 0);
  std::vector<int32_t> next(n);
  bool first = true;
  while (true) {
    std::vector<engine::SequenceStep> steps;
    std::vector<size_t> which;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      engine::SequenceStep s;
      s.sequence_id = first_sequence_id + i;
      s.tokens = first ? std::span<const int32_t>(prompt_ids[i])
                       : std::span<const int32_t>(&next[i], 1);
      steps.push_back(s);
      which.push_back(i);
    }
    if (steps.empty()) break;
    first = false;
    model.Forward(steps);
    for (size_t k = 0; k < steps.size(); ++k) {
      const size_t i = which[k];
      const int32_t t = Argmax(steps[k].logits);
      next[i] = t;
      if (t == tokenizer.eos_token()) {
        done[i] = true;
        continue;
      }
      out[i].tokens.push_back(t);
      out[i].text = tokenizer.Decode(out[i].tokens);
      for (const std::string& s : stop) {
        const size_t at = s.empty() ? std::string::npos : out[i].text.find(s);
        if (at != std::string::npos) {
          out[i].text.resize(at);
          done[i] = true;
        }
      }
      if (static_cast<int>(out[i].tokens.size()) >= max_new_tokens) done[i] = true;
    }
  }
  return out;
}

EvalReport EvaluateRecall(engine::DecodeModel& model, const Tokenizer& tokenizer,
                          const EvalOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<RecallItem> items =
      MakePasskeySet(options.seed, options.passkey_lengths, options.passkey_depths,
                     options.passkey_per_cell);
  std::vector<RecallItem> qa =
      MakeQaSet(options.seed, options.qa_lengths, options.qa_depths, options.qa_per_cell);
  items.insert(items.end(), qa.begin(), qa.end());
  EvalReport report;
  const size_t batch = static_cast<size_t>(std::max(1, options.batch));
  uint64_t next_id = 1;
  double f1_sum = 0.0;
  size_t b = 0;
  while (b < items.size()) {
    // A batch holds one kind, so one stop rule applies.
    size_t end = b + 1;
    while (end < items.size() && end - b < batch && items[end].kind == items[b].kind) ++end;
    std::vector<std::string> prompts;
    for (size_t i = b; i < end; ++i) prompts.push_back(items[i].prompt);
    const bool passkey = items[b].kind == "passkey";
    const auto completions = GreedyCompleteBatch(
        model, tokenizer, prompts, passkey ? 12 : 24,
        passkey ? std::vector<std::string>{} : std::vector<std::string>{"\n"}, options.policy,
        next_id);
    next_id += prompts.size();
    for (size_t i = b; i < end; ++i) {
      const RecallItem& item = items[i];
      ItemResult r;
      r.kind = item.kind;
      r.length_bytes = item.length_bytes;
      r.depth = item.depth;
      r.prediction = completions[i - b].text;
      r.answer = item.answers.front();
      if (passkey) {
        const auto got = FirstInteger(r.prediction);
        r.correct = got.has_value() && *got == r.answer;
        r.f1 = r.correct ? 1.0 : 0.0;
        ++report.passkey_items;
        report.passkey_correct += r.correct ? 1 : 0;
      } else {
        r.f1 = MaxTokenF1(r.prediction, item.answers);
        r.correct = r.f1 == 1.0;
        ++report.qa_items;
        f1_sum += r.f1;
      }
      if (options.progress) {
        std::ostringstream line;
        line << r.kind << " len=" << r.length_bytes << " depth=" << r.depth
             << (r.correct ? " ok " : " MISS ") << "answer=" << r.answer << " got=\""
             << r.prediction << "\"";
        options.progress(line.str());
      }
      report.items.push_back(std::move(r));
    }
    b = end;
  }
  report.qa_f1 = report.qa_items > 0 ? 100.0 * f1_sum / report.qa_items : 0.0;
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string EvalReport::ToJson() const {
  nlohmann::json j;
  j["passkey_items"] = passkey_items;
  j["passkey_correct"] = passkey_correct;
  j["qa_items"] = qa_items;
  j["qa_f1"] = qa_f1;
  j["seconds"] = seconds;
  std::map<int, std::pair<int, int>> passkey_by_length;
  std::map<int, std::pair<double, int>> qa_by_length;
  nlohmann::json failures = nlohmann::json::array();
  for (const ItemResult& r : items) {
    if (r.kind == "passkey") {
      auto& [ok, n] = passkey_by_length[r.length_bytes];
      ok += r.correct ? 1 : 0;
      ++n;
    } else {
      auto& [sum, n] = qa_by_length[r.length_bytes];
      sum += r.f1;
      ++n;
    }
    if (!r.correct) {
      failures.push_back({{"kind", r.kind}, {"length", r.length_bytes}, {"depth", r.depth},
                          {"answer", r.answer}, {"prediction", r.prediction}, {"f1", r.f1}});
    }
  }
  nlohmann::json pk = nlohmann::json::object(), qa = nlohmann::json::object();
  for (const auto& [len, v] : passkey_by_length) {
    pk[std::to_string(len)] = std::to_string(v.first) + "/" + std::to_string(v.second);
  }
  for (const auto& [len, v] : qa_by_length) qa[std::to_string(len)] = 100.0 * v.first / v.second;
  j["passkey_by_length"] = pk;
  j["qa_f1_by_length"] = qa;
  j["failures"] = failures;
  return j.dump(2);
}

}  // namespace readkv::model
