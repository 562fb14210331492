#include "kvgate/checks/quality_record.h"

#include <map>
#include <nlohmann/json.hpp>

namespace kvgate::checks {

std::vector<SubsetSummary> SummarizeBySubset(const std::vector<QualityRecord>& records) {
  struct Sum {
    SubsetSummary summary;
    double score_sum = 0.0;
  };
  Sum all;
  all.summary.subset = "all";
  std::map<std::string, Sum> by_subset;
  auto add = [](Sum& sum, const QualityRecord& record) {
    ++sum.summary.count;
    if (record.correct) ++sum.summary.correct;
    if (!record.ok()) ++sum.summary.errors;
    sum.score_sum += record.ok() ? record.score : 0.0;
  };
  for (const QualityRecord& record : records) {
    add(all, record);
    for (const std::string& subset : record.subsets) {
      Sum& sum = by_subset[subset];
      sum.summary.subset = subset;
      add(sum, record);
    }
  }
  std::vector<SubsetSummary> out;
  auto finish = [&out](Sum& sum) {
    if (sum.summary.count > 0) sum.summary.mean_score = sum.score_sum / sum.summary.count;
    out.push_back(sum.summary);
  };
  finish(all);
  for (auto& [name, sum] : by_subset) finish(sum);
  return out;
}

void to_json(nlohmann::json& j, const QualityRecord& r) {
  j = nlohmann::json{{"check", r.check},
                     {"item_id", r.item_id},
                     {"subsets", r.subsets},
                     {"prompt_bytes", r.prompt_bytes},
                     {"prompt_tokens", r.prompt_tokens},
                     {"prediction", r.prediction},
                     {"gold", r.gold},
                     {"score", r.score},
                     {"correct", r.correct},
                     {"latency_s", r.latency_s},
                     {"error", r.error}};
}

void from_json(const nlohmann::json& j, QualityRecord& r) {
  j.at("check").get_to(r.check);
  j.at("item_id").get_to(r.item_id);
  j.at("subsets").get_to(r.subsets);
  j.at("prompt_bytes").get_to(r.prompt_bytes);
  j.at("prompt_tokens").get_to(r.prompt_tokens);
  j.at("prediction").get_to(r.prediction);
  j.at("gold").get_to(r.gold);
  j.at("score").get_to(r.score);
  j.at("correct").get_to(r.correct);
  j.at("latency_s").get_to(r.latency_s);
  j.at("error").get_to(r.error);
}

void to_json(nlohmann::json& j, const SubsetSummary& s) {
  j = nlohmann::json{{"subset", s.subset},
                     {"count", s.count},
                     {"correct", s.correct},
                     {"errors", s.errors},
                     {"mean_score", s.mean_score}};
}

}  // namespace kvgate::checks
