#include "readkv/model/training.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "kvgate/stats/random.h"
#include "llama_internal.h"
#include "readkv/model/recall_data.h"
#include "readkv/model/tokenizer.h"

namespace readkv::model {
namespace {

using internal::LlamaWeights;
using nlohmann::json;

double LearningRate(const TrainOptions& o, int64_t step, double progress) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  const double p = std::clamp(progress, 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

// Gradient clipping without a host sync (torch::nn::utils::clip_grad_norm_ syncs every call).
void ClipGradients(const std::vector<torch::Tensor>& params, double max_norm) {
  std::vector<torch::Tensor> norms;
  for (const auto& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().to(torch::kFloat).pow(2).sum());
  }
  if (norms.empty()) return;
  torch::Tensor total = torch::stack(norms).sum().sqrt();
  torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(coef.to(p.grad().scalar_type()));
  }
}

struct QuickScore {
  int passkey_correct = 0, passkey_items = 0;
  double qa_f1 = 0.0;
  int qa_items = 0;
};

// Greedy decoding with the training forward (full recompute per token; right padding is safe
// under causal attention). Used for the held-out checks on the training device.
QuickScore QuickEval(const LlamaWeights& w, const ModelConfig& c, const internal::RopeTables& rope,
                     torch::ScalarType compute, torch::Device device,
                     const std::vector<RecallItem>& items) {
  torch::NoGradGuard no_grad;
  ByteTokenizer tok;
  QuickScore score;
  double f1_sum = 0.0;
  const size_t group = 16;
  for (size_t b = 0; b < items.size(); b += group) {
    const size_t e = std::min(items.size(), b + group);
    const bool passkey = items[b].kind == "passkey";
    const int max_new = passkey ? 10 : 16;
    std::vector<std::vector<int32_t>> rows;
    size_t longest = 0;
    for (size_t i = b; i < e; ++i) {
      rows.push_back(tok.Encode(items[i].prompt, true));
      longest = std::max(longest, rows.back().size());
    }
    const auto width = static_cast<int64_t>(
        std::min<size_t>(longest + max_new, static_cast<size_t>(c.max_position_embeddings)));
    const auto n = static_cast<int64_t>(rows.size());
    std::vector<int64_t> tokens(static_cast<size_t>(n * width), c.eos_token_id);
    std::vector<int64_t> len(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      std::copy(rows[i].begin(), rows[i].end(), tokens.begin() + static_cast<int64_t>(i) * width);
      len[i] = static_cast<int64_t>(rows[i].size());
    }
    std::vector<std::string> text(rows.size());
    std::vector<bool> done(rows.size(), false);
    for (int s = 0; s < max_new; ++s) {
      const int64_t cur = std::min(width, *std::max_element(len.begin(), len.end()));
      torch::Tensor input = torch::from_blob(tokens.data(), {n, width}, torch::kLong)
                                .narrow(1, 0, cur)
                                .clone()
                                .to(device);
      torch::Tensor next =
          internal::FullForward(w, c, rope, input, compute).argmax(-1).to(torch::kCPU);
      const int64_t* np = next.data_ptr<int64_t>();  // [n, cur]
      bool any = false;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (done[i]) continue;
        const int64_t t = np[static_cast<int64_t>(i) * cur + len[i] - 1];
        if (t == c.eos_token_id || len[i] >= width || (!passkey && t == '\n')) {
          done[i] = true;
          continue;
        }
        if (t < 256) text[i].push_back(static_cast<char>(t));
        tokens[static_cast<size_t>(static_cast<int64_t>(i) * width + len[i])] = t;
        ++len[i];
        any = true;
      }
      if (!any) break;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const RecallItem& item = items[b + i];
      if (passkey) {
        const auto got = FirstInteger(text[i]);
        score.passkey_correct += got && *got == item.answers.front() ? 1 : 0;
        ++score.passkey_items;
      } else {
        f1_sum += MaxTokenF1(text[i], item.answers);
        ++score.qa_items;
      }
    }
  }
  score.qa_f1 = score.qa_items ? 100.0 * f1_sum / score.qa_items : 0.0;
  return score;
}

LlamaWeights CloneToCpu(const LlamaWeights& w, const ModelConfig& c) {
  LlamaWeights copy = w;
  for (auto& [name, t] : copy.Named(c)) *t = t->detach().to(torch::kCPU, torch::kFloat).clone();
  if (c.tie_word_embeddings) copy.lm_head = copy.embed;
  return copy;
}

void WriteModel(const LlamaWeights& w, ModelConfig c, const std::string& dir,
                const std::string& storage) {
  c.torch_dtype = storage;
  internal::SaveWeights(w, c, dir + "/model.safetensors", storage);
  const std::string tmp = dir + "/config.json.tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << c.ToJson();
    if (!f) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, dir + "/config.json");
}

// Held-out checks: passkeys at every standard length up to max_length, QA at the shortest and
// longest, from a seed the final evaluation (evaluation.h) does not use either.
std::vector<RecallItem> HeldOutChecks(const TrainOptions& o) {
  const uint64_t check_seed = kvgate::stats::DeriveSeed(o.seed, 3);
  std::vector<int> lengths;
  for (int l : {1024, 2048, 4096, 8192, 16384, 32768}) {
    if (l <= o.max_length - 16) lengths.push_back(l);
  }
  if (lengths.empty()) lengths.push_back(o.max_length - 16);
  const int per_length = std::max(1, o.eval_passkeys / static_cast<int>(lengths.size()));
  std::vector<double> depths;
  for (int i = 0; i < per_length; ++i) {
    depths.push_back(per_length == 1 ? 0.5 : static_cast<double>(i) / (per_length - 1));
  }
  std::vector<RecallItem> check = MakePasskeySet(check_seed, lengths, depths, 1);
  if (o.eval_edge_passkeys > 0) {
    const std::vector<int> longest = {lengths.back()};
    const std::vector<double> edges = {0.0, 1.0};
    auto edge = MakePasskeySet(kvgate::stats::DeriveSeed(o.seed, 4), longest, edges,
                               std::max(1, o.eval_edge_passkeys / 2));
    check.insert(check.end(), edge.begin(), edge.end());
  }
  const std::vector<int> qa_lengths = {lengths.front(), lengths.back()};
  const std::vector<double> qa_depths = {0.0, 0.5, 1.0};
  const int per_cell = std::max(1, o.eval_qa / 6);
  auto qa = MakeQaSet(check_seed, qa_lengths, qa_depths, per_cell);
  check.insert(check.end(), qa.begin(), qa.end());
  return check;
}

// One step's rows of `len` tokens from the corpus: inputs (EOS-padded) and next-token targets
// (-100, ignored, past each row's end).
void MakeBatch(const ModelConfig& c, int64_t rows, int len, RecallCorpus& corpus,
               kvgate::stats::SplitMixRng& length_rng, std::vector<int64_t>& inputs,
               std::vector<int64_t>& targets) {
  inputs.assign(static_cast<size_t>(rows * len), c.eos_token_id);
  targets.assign(static_cast<size_t>(rows * len), -100);
  for (int64_t r = 0; r < rows; ++r) {
    const std::string doc = corpus.Next(len - 1);
    std::vector<int64_t> row;
    row.reserve(doc.size() + 2);
    // A tenth of the rows start without BOS, so a client that sends none still gets answers.
    if (length_rng.Uniform01() >= 0.1) row.push_back(c.bos_token_id);
    for (unsigned char ch : doc) row.push_back(ch);
    row.push_back(c.eos_token_id);
    for (size_t i = 0; i + 1 < row.size() && i < static_cast<size_t>(len); ++i) {
      inputs[static_cast<size_t>(r * len) + i] = row[i];
      targets[static_cast<size_t>(r * len) + i] = row[i + 1];
    }
  }
}

}  // namespace

TrainResult Train(const TrainOptions& o) {
  if (o.output_dir.empty()) throw std::invalid_argument("output_dir: required");
  o.model.Validate();
  if (o.max_length < 512 || o.max_length > o.model.max_position_embeddings) {
    throw std::invalid_argument("max_length: must be in [512, max_position_embeddings]");
  }
  if (o.steps < 1) throw std::invalid_argument("steps: must be at least 1");
  if (o.tokens_per_step < o.max_length) {
    throw std::invalid_argument("tokens_per_step: must hold at least one full-length row");
  }
  auto log = [&](const json& j) {
    if (o.log) o.log(j.dump());
  };
  std::filesystem::create_directories(o.output_dir);

  const bool cuda = o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available());
  const torch::Device device = cuda ? internal::ParseDevice("cuda") : torch::Device(torch::kCPU);
  const torch::ScalarType compute = cuda && o.bf16 ? torch::kBFloat16 : torch::kFloat;
  const ModelConfig& c = o.model;
  torch::manual_seed(o.seed);

  LlamaWeights w = o.init_from.empty()
                       ? internal::InitWeights(c, o.seed)
                       : internal::LoadWeights(o.init_from + "/model.safetensors", c);
  w = w.To(device, torch::kFloat);
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  std::vector<torch::Tensor> params = w.Parameters(c);
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : params) {
    p.set_requires_grad(true);
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  auto group_options = [&](double wd) {
    auto opts = std::make_unique<torch::optim::AdamWOptions>(o.lr);
    opts->betas(std::make_tuple(o.beta1, o.beta2)).weight_decay(wd).eps(1e-8);
    return opts;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, group_options(o.weight_decay));
  groups.emplace_back(no_decay, group_options(0.0));
  torch::optim::AdamW optimizer(groups, torch::optim::AdamWOptions(o.lr));

  const internal::RopeTables rope = internal::MakeRope(c, device);
  RecallCorpus corpus(kvgate::stats::DeriveSeed(o.seed, 1), o.mix);
  kvgate::stats::SplitMixRng length_rng(kvgate::stats::DeriveSeed(o.seed, 2));
  std::vector<RecallItem> passkey_check, qa_check;
  for (auto& item : HeldOutChecks(o)) {
    (item.kind == "passkey" ? passkey_check : qa_check).push_back(item);
  }

  log({{"event", "start"}, {"device", cuda ? "cuda" : "cpu"},
       {"compute", compute == torch::kBFloat16 ? "bfloat16" : "float32"},
       {"parameters", [&] {
          int64_t n = 0;
          for (const auto& p : params) n += p.numel();
          return n;
        }()},
       {"steps", o.steps}, {"time_limit_s", o.time_limit_s}, {"seed", o.seed},
       {"tokens_per_step", o.tokens_per_step}, {"max_length", o.max_length},
       {"mid_length_share", o.mid_length_share}, {"edge_depths", o.mix.edge_depths},
       {"eval_edge_passkeys", o.eval_edge_passkeys},
       {"torch", TORCH_VERSION}});

  TrainResult result;
  result.device = cuda ? "cuda" : "cpu";
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double best_key = -1.0;
  LlamaWeights best;
  int64_t step = 0;
  double last_loss = 0.0;
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  int64_t loss_count = 0;

  auto run_check = [&](double progress) {
    const QuickScore pk = QuickEval(w, c, rope, compute, device, passkey_check);
    const QuickScore qa = QuickEval(w, c, rope, compute, device, qa_check);
    // Passkeys first, then QA F1; ties go to the later (lower learning rate) checkpoint.
    const double key = pk.passkey_correct * 1000.0 + qa.qa_f1;
    const bool improved = key >= best_key;
    log({{"event", "check"}, {"step", step}, {"progress", progress}, {"elapsed_s", elapsed()},
         {"passkey", std::to_string(pk.passkey_correct) + "/" + std::to_string(pk.passkey_items)},
         {"qa_f1", qa.qa_f1}, {"best", improved}});
    if (improved) {
      best_key = key;
      best = CloneToCpu(w, c);
      result.best_step = step;
      result.best_passkey_correct = pk.passkey_correct;
      result.passkey_items = pk.passkey_items;
      result.best_qa_f1 = qa.qa_f1;
      WriteModel(best, c, o.output_dir, o.storage_dtype);
    }
  };

  int64_t last_check = -1;
  while (true) {
    double progress = static_cast<double>(step) / static_cast<double>(o.steps);
    if (o.time_limit_s > 0) progress = std::max(progress, elapsed() / o.time_limit_s);
    if (progress >= 1.0) break;
    const int len = internal::RowLength(progress, o.max_length, o.curriculum, o.mid_length_share,
                                        length_rng);
    const int64_t rows = std::max<int64_t>(1, o.tokens_per_step / len);
    std::vector<int64_t> inputs, targets;
    MakeBatch(c, rows, len, corpus, length_rng, inputs, targets);
    torch::Tensor x = torch::from_blob(inputs.data(), {rows, len}, torch::kLong).clone().to(device);
    torch::Tensor y =
        torch::from_blob(targets.data(), {rows, len}, torch::kLong).clone().to(device);
    const double lr = LearningRate(o, step, progress);
    for (auto& g : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    }
    torch::Tensor logits = internal::FullForward(w, c, rope, x, compute);
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.view({-1, c.vocab_size}), y.view({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
    optimizer.zero_grad();
    loss.backward();
    ClipGradients(params, o.grad_clip);
    optimizer.step();
    loss_sum += loss.detach();
    ++loss_count;
    ++step;
    if (step % 50 == 0) {
      last_loss = loss_sum.item<double>() / static_cast<double>(loss_count);
      loss_sum.zero_();
      loss_count = 0;
      log({{"event", "step"}, {"step", step}, {"loss", last_loss}, {"lr", lr}, {"len", len},
           {"rows", rows}, {"progress", progress}, {"elapsed_s", elapsed()}});
    }
    if (progress >= o.check_from && (last_check < 0 || step - last_check >= o.eval_every)) {
      last_check = step;
      run_check(progress);
    }
  }
  run_check(1.0);
  result.steps = step;
  result.seconds = elapsed();
  result.final_loss = last_loss;
  log({{"event", "done"}, {"steps", step}, {"seconds", result.seconds},
       {"best_step", result.best_step},
       {"best_passkey", std::to_string(result.best_passkey_correct) + "/" +
                            std::to_string(result.passkey_items)},
       {"best_qa_f1", result.best_qa_f1}});
  return result;
}

std::vector<float> TrainingForwardLogits(const std::string& model_dir,
                                         std::span<const int32_t> tokens) {
  torch::NoGradGuard no_grad;
  const ModelConfig c = ModelConfig::Load(model_dir);
  const LlamaWeights w = internal::LoadWeights(model_dir + "/model.safetensors", c);
  const internal::RopeTables rope = internal::MakeRope(c, torch::kCPU);
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  torch::Tensor x =
      torch::from_blob(ids.data(), {1, static_cast<int64_t>(ids.size())}, torch::kLong).clone();
  torch::Tensor logits = internal::FullForward(w, c, rope, x, torch::kFloat).contiguous();
  return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
}

namespace internal {

// A curriculum by progress (the notes: retrieval forms first at short
// lengths and only works at lengths trained on), then a mix weighted to the full length; a share
// `mid_share` of the rows (taken from the full length's) at half of it, so a model continued to a
// longer context keeps seeing the lengths it served before.
int RowLength(double progress, int max_length, bool curriculum, double mid_share,
              kvgate::stats::SplitMixRng& rng) {
  int len = max_length;
  if (!curriculum) progress = 1.0;
  if (progress < 0.08) {
    len = 512;
  } else if (progress < 0.16) {
    len = 1024;
  } else if (progress < 0.26) {
    len = 2048;
  } else if (progress < 0.40) {
    len = 4096;
  } else {
    const double u = rng.Uniform01();
    len = u < 0.1   ? 1024
          : u < 0.2 ? 2048
          : u < 0.4 ? 4096
          : u < 0.4 + mid_share ? max_length / 2
                                : max_length;
  }
  return std::min(len, max_length);
}

}  // namespace internal
}  // namespace readkv::model
