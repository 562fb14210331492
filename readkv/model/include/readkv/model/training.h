// `kvgate train`: trains the built-in byte-level recall model on the seeded corpus of
// recall_data.h and writes config.json + model.safetensors. Runs on CUDA when available (bf16
// matmuls with fp32 master weights and fp32 norms/residuals; flash SDPA on libtorch >= 2), else
// on CPU in fp32. Data, initialisation and evaluation sets are fixed by the seed; GPU kernels may
// still add float nondeterminism. Blocking; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "readkv/model/config.h"
#include "readkv/model/recall_data.h"

namespace readkv::model {

struct TrainOptions {
  std::string output_dir;
  ModelConfig model;                // architecture (defaults: the built-in model)
  uint64_t seed = 20261129;
  int64_t steps = 6000;             // schedule length
  double time_limit_s = 0.0;        // > 0: progress = max(step/steps, elapsed/limit)
  int64_t tokens_per_step = 65536;
  int max_length = 8704;            // longest training row (bytes + BOS/EOS); <= max positions
  double lr = 1e-3;
  double min_lr_ratio = 0.1;        // cosine decay to lr * ratio
  int64_t warmup_steps = 200;
  double weight_decay = 0.01;       // on matrices only
  double beta1 = 0.9, beta2 = 0.95;
  double grad_clip = 1.0;
  std::string device = "auto";      // "auto" | "cpu" | "cuda"
  bool bf16 = true;                 // on CUDA
  int64_t eval_every = 300;         // steps between held-out checks (from 60% progress on)
  int eval_passkeys = 40;           // held-out passkey prompts per check
  int eval_qa = 20;                 // held-out QA prompts per check
  int eval_edge_passkeys = 0;       // and passkeys at the longest length, half with the key at
                                    // depth 0 and half at depth 1 (the edges a spread misses)
  std::string storage_dtype = "bfloat16";  // of model.safetensors
  std::string init_from;            // optional model dir to continue from
  CorpusMix mix;                    // training data shares (recall_data.h)
  bool curriculum = true;           // false: the full-length mix from the first step
  double mid_length_share = 0.0;    // share of rows at max_length / 2 (from the full length's 60%)
  double check_from = 0.6;          // progress at which held-out checks begin
  std::function<void(const std::string& json_line)> log;  // one JSON object per event
};

struct TrainResult {
  int64_t steps = 0;
  double seconds = 0.0;
  double final_loss = 0.0;
  int64_t best_step = -1;
  int best_passkey_correct = 0, passkey_items = 0;
  double best_qa_f1 = 0.0;
  std::string device;
};

TrainResult Train(const TrainOptions& options);

// The training-path forward (the same code the trainer differentiates) of a model directory on
// CPU in fp32: logits of every position, [tokens.size() x vocab] row-major. For tests that pin
// the trainer and the runtime to one reference.
std::vector<float> TrainingForwardLogits(const std::string& model_dir,
                                         std::span<const int32_t> tokens);

}  // namespace readkv::model
