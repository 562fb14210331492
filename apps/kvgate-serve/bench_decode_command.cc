// `kvgate bench decode`: the serving runtime's decode step, end to end, for one KV backend. Starts
// --batch sequences of --context prompt tokens each (seeded passkey texts, prefilled one by one
// and timed), then decodes them together for --steps timed steps (after --warmup untimed ones,
// where CUDA graphs are captured) and prints the step time's median and spread and the decode
// tokens per second. Every runtime flag of `kvgate serve` applies (--kv, --device, --cuda-graphs,
// ...), so two invocations compare what the go/no-go servers run. Each timed step is one
// LlamaDecodeModel::Forward, which returns logits on the host: the time includes the device work.
// It also prints what the timed steps spent in the KV backend's append and attention calls, a
// step on average, from the model's ledgers (GPU time by CUDA events on a CUDA device, wall time
// on the CPU): the rest of a step is the dense layers and the host.
// Exit statuses: 0 done; 2 bad arguments (the message names the flag); 3 the model failed.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvgate/command.h"
#include "kvgate/stats/percentile.h"
#include "readkv/codec/attention.h"
#include "readkv/engine/decode_model.h"
#include "readkv/engine/sampler.h"
#include "readkv/model/cli.h"
#include "readkv/model/recall_data.h"
#include "readkv/model/runtime.h"
#include "readkv/model/tokenizer.h"

namespace kvgate {

namespace {

struct DecodeBenchArgs {
  std::string model_dir;
  int batch = 16;
  int context = 16000;
  int steps = 64;
  int warmup = 8;
  std::string json;
};

// kvgate's one percentile rule (an observed sample, no interpolation); the vectors are never empty.
double Percentile(const std::vector<double>& x, double p) {
  return kvgate::stats::Percentile(x, p).value_or(0.0);
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

void RunBenchDecode(const DecodeBenchArgs& a, const readkv::model::RuntimeOptions& options,
                    CommandContext& context) {
  if (a.batch < 1) throw UsageError("--batch must be >= 1");
  if (a.context < 2) throw UsageError("--context must be >= 2");
  if (a.steps < 5) throw UsageError("--steps must be >= 5");
  if (a.warmup < 0) throw UsageError("--warmup must be >= 0");
  std::unique_ptr<readkv::model::LlamaDecodeModel> model;
  try {
    model = std::make_unique<readkv::model::LlamaDecodeModel>(a.model_dir, options);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    context.exit_code = 3;
    return;
  }
  if (a.context + a.warmup + a.steps > model->max_context()) {
    throw UsageError("--context + --warmup + --steps: " +
                     std::to_string(a.context + a.warmup + a.steps) +
                     " tokens exceed the model's " + std::to_string(model->max_context()));
  }
  readkv::model::ByteTokenizer tokenizer;
  std::vector<double> prefill_ms, step_ms;
  readkv::engine::KvLedgers before;  // at the first timed step
  std::vector<std::vector<float>> logits(static_cast<size_t>(a.batch));
  try {
    for (int i = 0; i < a.batch; ++i) {
      // A passkey text per sequence (key and depth vary), cut to exactly --context tokens.
      const std::string key = std::to_string(10000 + 7919 * i % 90000);
      std::vector<int32_t> prompt = tokenizer.Encode(
          readkv::model::PasskeyPrompt(key, a.context + 64, (i % 5) / 4.0), true);
      prompt.resize(static_cast<size_t>(a.context));
      const auto id = static_cast<uint64_t>(i + 1);
      model->StartSequence(id, {});
      readkv::engine::SequenceStep step;
      step.sequence_id = id;
      step.tokens = prompt;
      const auto start = std::chrono::steady_clock::now();
      model->Forward(std::span<readkv::engine::SequenceStep>(&step, 1));
      prefill_ms.push_back(MillisecondsSince(start));
      logits[static_cast<size_t>(i)] = std::move(step.logits);
    }
    std::vector<int32_t> next(static_cast<size_t>(a.batch));
    for (int t = 0; t < a.warmup + a.steps; ++t) {
      std::vector<readkv::engine::SequenceStep> steps(static_cast<size_t>(a.batch));
      for (size_t i = 0; i < steps.size(); ++i) {
        next[i] = readkv::engine::Sampler::Greedy(logits[i]);  // the server's greedy rule
        steps[i].sequence_id = i + 1;
        steps[i].tokens = std::span<const int32_t>(&next[i], 1);
      }
      if (t == a.warmup) before = model->ledgers();
      const auto start = std::chrono::steady_clock::now();
      model->Forward(steps);
      if (t >= a.warmup) step_ms.push_back(MillisecondsSince(start));
      for (size_t i = 0; i < steps.size(); ++i) logits[i] = std::move(steps[i].logits);
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    context.exit_code = 3;
    return;
  }
  const double step_median = Percentile(step_ms, 0.5);
  const readkv::engine::KvLedgers after = model->ledgers();
  const double per_step = 1000.0 / static_cast<double>(step_ms.size());  // s in all -> ms a step
  const double append_ms = (after.encode_seconds - before.encode_seconds) * per_step;
  const double attention_ms = (after.attention_seconds - before.attention_seconds) * per_step;
  const double tokens_per_s = 1000.0 * a.batch / step_median;
  std::cout << std::fixed << std::setprecision(3) << "decode "
            << readkv::codec::KvBackendName(options.kv.kind) << " on " << options.device
            << ", cuda_graphs " << options.cuda_graphs << ": batch " << a.batch << ", context "
            << a.context << "\n  prefill " << Percentile(prefill_ms, 0.5)
            << " ms per prompt (median of " << prefill_ms.size() << ")\n  step " << step_median
            << " ms median [p10 " << Percentile(step_ms, 0.1) << ", p90 "
            << Percentile(step_ms, 0.9) << "] over " << step_ms.size() << " steps, "
            << std::setprecision(0) << tokens_per_s << " tokens/s\n"
            << std::setprecision(3) << "  per step: append " << append_ms << " ms, attention "
            << attention_ms << " ms (the KV backend's calls, mean over the timed steps)\n";
  if (!a.json.empty()) {
    const nlohmann::json out = {
        {"kv", std::string(readkv::codec::KvBackendName(options.kv.kind))},
        {"device", options.device},
        {"cuda_graphs", options.cuda_graphs},
        {"read_bits", options.kv.read_bits},
        {"key_bits", options.kv.key_bits ? nlohmann::json(*options.kv.key_bits) : nullptr},
        {"value_bits", options.kv.value_bits ? nlohmann::json(*options.kv.value_bits) : nullptr},
        {"batch", a.batch},
        {"context", a.context},
        {"prefill_ms", prefill_ms},
        {"step_ms", step_ms},
        {"step_ms_median", step_median},
        {"append_ms_per_step", append_ms},
        {"attention_ms_per_step", attention_ms},
        {"decode_tokens_per_s", tokens_per_s}};
    if (a.json == "-") {
      std::cout << out.dump(2) << "\n";
    } else {
      std::ofstream file(a.json);
      file << out.dump(2) << "\n";
      if (!file) throw UsageError("--json: cannot write " + a.json);
    }
  }
  context.exit_code = 0;
}

}  // namespace

// Adds `decode` under `kvgate bench` (bench_command.cc).
void AddBenchDecode(CLI::App& bench, CommandContext& context) {
  auto* cmd = bench.add_subcommand(
      "decode",
      "The serving runtime's decode step for one KV backend: prefill a batch of long prompts, "
      "then time batched decode steps (any device; the runtime flags of `kvgate serve`)");
  auto args = std::make_shared<DecodeBenchArgs>();
  args->model_dir = readkv::model::DefaultModelDirectory();
  auto runtime_flags = std::make_shared<readkv::model::RuntimeFlags>(*cmd);
  cmd->add_option("--model", args->model_dir, "model directory")->capture_default_str();
  cmd->add_option("--batch", args->batch, "sequences decoded together")->capture_default_str();
  cmd->add_option("--context", args->context, "prompt tokens per sequence")
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "timed decode steps (>= 5)")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed decode steps first")->capture_default_str();
  cmd->add_option("--json", args->json, "Write JSON to FILE, or '-' for stdout");
  cmd->callback([args, runtime_flags, &context] {
    RunBenchDecode(*args, runtime_flags->Resolve(), context);
  });
}

}  // namespace kvgate
