#include "readkv/model/cli.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string_view>
#include <type_traits>

#include "readkv/codec/errors.h"
#include "readkv/model/evaluation.h"
#include "readkv/model/model_calibration.h"
#include "readkv/model/tokenizer.h"
#include "readkv/model/training.h"

namespace readkv::model {
namespace {

// A flag naming one value of an enum, parsed once, while CLI11 parses: the transform reads the
// text with the enum's own parse function (the codec's, also used by every other front end) and
// hands CLI11 the value. --help lists the names; a bad one is a CLI11 error naming the flag, with
// the parse function's message ("--kv: must be dense, fp8 or readkv, got 'x'"), exit status 2.
template <typename Enum, size_t N>
CLI::Option* AddEnumOption(CLI::App& cmd, const std::string& flag, Enum& target,
                           const std::array<Enum, N>& values, std::string_view (*name)(Enum),
                           Enum (*parse)(std::string_view), const std::string& help) {
  std::string names;
  for (const Enum value : values) names += (names.empty() ? "" : ",") + std::string(name(value));
  CLI::Validator by_name(
      [parse](std::string& text) -> std::string {
        try {
          text = std::to_string(static_cast<std::underlying_type_t<Enum>>(parse(text)));
          return {};
        } catch (const codec::InvalidArgument& e) {
          return std::string(e.what()).substr(e.field().size() + 2);  // CLI11 names the flag
        }
      },
      "{" + names + "}");
  return cmd.add_option(flag, target, help)
      ->type_name("TEXT")
      ->transform(by_name)
      ->default_str(std::string(name(target)));
}

}  // namespace

RuntimeFlags::RuntimeFlags(CLI::App& cmd) {
  AddEnumOption(cmd, "--kv", options_.kv.kind, codec::kKvBackends, codec::KvBackendName,
                codec::ParseKvBackend, "KV cache");
  cmd.add_option("--store-bits", options_.kv.store_bits, "ReadKV stored bits W")
      ->capture_default_str();
  cmd.add_option("--read-bits", options_.kv.read_bits, "ReadKV average read bits R")
      ->capture_default_str();
  AddEnumOption(cmd, "--reader", options_.kv.reader, codec::kReaderKinds, codec::ReaderName,
                codec::ParseReaderKind,
                "ReadKV reader (on a CUDA device: tile only; full: every plane, CPU only, "
                "--read-bits = --store-bits)");
  cmd.add_option("--kv-split", kv_split_,
                 "ReadKV K/V split RK:RV (mean R; flexible, constrained or tile reader)");
  cmd.add_option("--outlier-cap", options_.kv.outlier_cap,
                 "ReadKV outlier entries per (token, KV head) for K and for V, kept exactly beside "
                 "the clipped code (0 = off; on a CUDA device the tile reader only)")
      ->capture_default_str();
  cmd.add_option("--value-window", options_.kv.value_window_tokens,
                 "ReadKV tile reader: Value depths allocated per window of this many tokens (a "
                 "multiple of 16; on a CUDA device 512, 1024, 1536 or 2048), each with R_V x its "
                 "blocks (0 = over the row)")
      ->capture_default_str();
  cmd.add_flag("--byte-keys", options_.kv.byte_keys,
               "Tile reader, W = 8, key bits 8: keys stored as uniform bytes (CPU and CUDA)");
  cmd.add_option("--one-pass", options_.kv.one_pass,
                 "CUDA tile reader, byte keys in Value windows: auto (one launch where the device "
                 "holds every row's cluster at once) or off (always two launches; same outputs)")
      ->capture_default_str();
  cmd.add_flag("--value-window-local", options_.kv.value_window_local,
               "ReadKV tile reader with --value-window: Value weights normalised per window "
               "(each head's probabilities over the window alone; CPU only)");
  cmd.add_option("--outlier-threshold", options_.kv.outlier_threshold,
                 "ReadKV |z| past which a value is an outlier (0 = the tree's outermost threshold)")
      ->capture_default_str();
  cmd.add_option("--kv-fp8-layers", options_.kv.fp8_layers,
                 "ReadKV: keep these layers as FP8 caches (comma-separated; CPU, no prefix cache)")
      ->delimiter(',');
  cmd.add_option("--fp8-scale", fp8_scale_, "FP8 scales: tensor (per layer) | head")
      ->capture_default_str();
  cmd.add_option("--prefill", prefill_,
                 "prompt attention: dense (exact within the prompt) | cache (through the KV "
                 "backend, token by token)")
      ->capture_default_str();
  cmd.add_option("--device", options_.device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd.add_option("--dtype", options_.dtype, "float32 | bfloat16 | float16")
      ->capture_default_str();
  cmd.add_option("--threads", options_.threads, "torch intra-op threads (0 = default)");
  cmd.add_option("--cuda-graphs", options_.cuda_graphs,
                 "decode steps of fp8/readkv on CUDA with their dense ops replayed as CUDA "
                 "graphs: auto (where libtorch has them) | on (required) | off")
      ->capture_default_str();
  cmd.add_option("--calibration", options_.calibration_path,
                 "calibration.json (default: beside the model)");
  cmd.add_option("--cache-dir", options_.prefix_cache.directory,
                 "persistent prefix cache: keep the encoded KV of prompts' 256-token prefix "
                 "blocks in this directory and reuse it across requests and restarts (readkv "
                 "only; objects of another identity or damaged ones are refused and recomputed)");
  cmd.add_option("--cache-max-bytes", options_.prefix_cache.max_bytes,
                 "bound on --cache-dir's objects, least recently used evicted first (0 = none)")
      ->capture_default_str();
}

std::pair<double, double> ParseKvSplit(const std::string& text) {
  const size_t colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    size_t used = 0;
    const double k = std::stod(text.substr(0, colon), &used);
    if (used != colon) throw std::invalid_argument("trailing text");
    const std::string rest = text.substr(colon + 1);
    const double v = std::stod(rest, &used);
    if (used != rest.size()) throw std::invalid_argument("trailing text");
    return {k, v};
  } catch (const std::logic_error&) {
    throw codec::InvalidArgument("kv_split", "must be RK:RV, e.g. 3:5, got \"" + text + "\"");
  }
}

RuntimeOptions RuntimeFlags::Resolve() const {
  RuntimeOptions o = options_;
  if (!kv_split_.empty()) {
    const auto [k, v] = ParseKvSplit(kv_split_);
    o.kv.key_bits = k;
    o.kv.value_bits = v;
  }
  if (fp8_scale_ == "tensor") {
    o.kv.fp8_scale = codec::Fp8ScaleGranularity::kTensor;
  } else if (fp8_scale_ == "head") {
    o.kv.fp8_scale = codec::Fp8ScaleGranularity::kHead;
  } else {
    throw codec::InvalidArgument("fp8_scale", "must be tensor or head, got \"" + fp8_scale_ + "\"");
  }
  if (prefill_ == "dense") {
    o.kv.prefill = PrefillAttention::kDense;
  } else if (prefill_ == "cache") {
    o.kv.prefill = PrefillAttention::kThroughCache;
  } else {
    throw codec::InvalidArgument("prefill", "must be dense or cache, got \"" + prefill_ + "\"");
  }
  try {
    ValidateRuntimeOptions(o);
  } catch (const codec::InvalidArgument&) {
    throw;
  } catch (const std::invalid_argument& e) {
    // ValidateRuntimeOptions says "field: why"; InvalidArgument puts the field back in front.
    const std::string what = e.what();
    const size_t colon = what.find(": ");
    if (colon == std::string::npos) throw codec::InvalidArgument("options", what);
    throw codec::InvalidArgument(what.substr(0, colon), what.substr(colon + 2));
  }
  return o;
}

void AddTrainCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "train", "Train the built-in byte-level recall model (CUDA if available) and write "
               "config.json + model.safetensors");
  auto o = std::make_shared<TrainOptions>();
  auto log_path = std::make_shared<std::string>();
  auto no_bf16 = std::make_shared<bool>(false);
  cmd->add_option("--out", o->output_dir, "output model directory")->required();
  cmd->add_option("--seed", o->seed, "seed of data, initialisation and checks")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "schedule length in steps")->capture_default_str();
  cmd->add_option("--time-limit", o->time_limit_s,
                  "seconds; progress = max(step/steps, elapsed/limit) when > 0")
      ->capture_default_str();
  cmd->add_option("--tokens-per-step", o->tokens_per_step, "tokens per optimiser step")
      ->capture_default_str();
  cmd->add_option("--max-length", o->max_length, "longest training row (tokens)")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--warmup", o->warmup_steps, "warm-up steps")->capture_default_str();
  cmd->add_option("--eval-every", o->eval_every, "steps between held-out checks")
      ->capture_default_str();
  cmd->add_option("--eval-passkeys", o->eval_passkeys, "held-out passkeys per check")
      ->capture_default_str();
  cmd->add_option("--eval-qa", o->eval_qa, "held-out QA items per check")->capture_default_str();
  cmd->add_option("--eval-edge", o->eval_edge_passkeys,
                  "and held-out passkeys at the longest length, key at depth 0 or 1")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--device", o->device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_flag("--no-bf16", *no_bf16, "fp32 matmuls on CUDA");
  cmd->add_option("--init-from", o->init_from, "continue from this model directory");
  cmd->add_option("--storage-dtype", o->storage_dtype, "float32 | bfloat16 | float16")
      ->capture_default_str();
  cmd->add_option("--layers", o->model.num_hidden_layers, "layers")->capture_default_str();
  cmd->add_option("--max-positions", o->model.max_position_embeddings,
                  "context the model is trained for (config's max_position_embeddings)")
      ->capture_default_str();
  auto mix = std::make_shared<std::string>("35:40:25");
  auto no_curriculum = std::make_shared<bool>(false);
  cmd->add_option("--mix", *mix, "percent of passkey : multi-key : QA documents")
      ->capture_default_str();
  cmd->add_option("--qa-all", o->mix.qa_all_questions,
                  "share of QA documents that ask about every fact")
      ->capture_default_str();
  cmd->add_option("--pseudo-words", o->mix.pseudo_words,
                  "share of word answers replaced by made-up words")
      ->capture_default_str();
  cmd->add_option("--edge-depths", o->mix.edge_depths,
                  "share of passkey prompts with the key within 2% of either end")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--check-from", o->check_from, "progress at which held-out checks begin")
      ->capture_default_str();
  cmd->add_flag("--no-curriculum", *no_curriculum, "full-length mix from the first step");
  cmd->add_option("--mid-rows", o->mid_length_share,
                  "share of rows at half of --max-length (taken from the full length's 0.6)")
      ->check(CLI::Range(0.0, 0.6))
      ->capture_default_str();
  cmd->add_option("--log", *log_path, "also append the JSON-lines log to this file");
  cmd->callback([o, log_path, no_bf16, mix, no_curriculum, &exit_code] {
    o->bf16 = !*no_bf16;
    o->curriculum = !*no_curriculum;
    {
      const size_t a = mix->find(':'), b = mix->find(':', a == std::string::npos ? a : a + 1);
      double p = -1, m = -1, q = -1;
      try {
        if (a == std::string::npos || b == std::string::npos) throw std::invalid_argument("");
        p = std::stod(mix->substr(0, a));
        m = std::stod(mix->substr(a + 1, b - a - 1));
        q = std::stod(mix->substr(b + 1));
      } catch (const std::logic_error&) {
        throw codec::InvalidArgument("mix", "must be P:M:Q percentages, got \"" + *mix + "\"");
      }
      if (p < 0 || m < 0 || q < 0 || p + m + q <= 0) {
        throw codec::InvalidArgument("mix", "shares must be non-negative and not all zero");
      }
      o->mix.passkey = p / (p + m + q);
      o->mix.multikey = m / (p + m + q);
    }
    auto file = std::make_shared<std::ofstream>();
    if (!log_path->empty()) file->open(*log_path, std::ios::app);
    o->log = [file](const std::string& line) {
      std::cout << line << std::endl;
      if (file->is_open()) *file << line << std::endl;
    };
    const TrainResult r = Train(*o);
    exit_code = r.best_step >= 0 ? 0 : 3;
  });
}

void AddCalibrateCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "calibrate", "Measure FP8 scales and ReadKV mu/sigma on a seeded calibration set and "
                   "write calibration.json beside the model; with --check, measure how well an "
                   "existing calibration codes another set instead");
  auto o = std::make_shared<CalibrateOptions>();
  auto check = std::make_shared<CodecFidelityOptions>();
  auto check_flag = std::make_shared<bool>(false);
  auto seed_set = std::make_shared<bool>(false);
  auto json_path = std::make_shared<std::string>();
  o->model_dir = DefaultModelDirectory();
  cmd->add_option("--model", o->model_dir, "model directory")->capture_default_str();
  cmd->add_option("--samples", o->samples, "calibration documents")->capture_default_str();
  cmd->add_option("--max-bytes", o->max_bytes, "bytes per document")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the calibration set (--check: default this + 1, "
                                     "documents the calibration did not see)")
      ->capture_default_str()
      ->each([seed_set](const std::string&) { *seed_set = true; });
  cmd->add_option("--out", o->output_path, "output file (default: <model>/calibration.json)");
  cmd->add_option("--threads", o->threads, "torch intra-op threads (0 = default)");
  cmd->add_flag("--check", *check_flag,
                "write nothing: per layer and K/V, the relative RMS error of FP8 (per-tensor "
                "scales) and of ReadKV's W-bit code read in full on these documents, the share "
                "of standardized values past the tree's outermost threshold, their share of "
                "the error and the share of them in each document's first token");
  cmd->add_option("--calibration", check->calibration_path,
                  "--check: the calibration to measure (default: <model>/calibration.json)");
  cmd->add_option("--store-bits", check->store_bits, "--check: ReadKV stored bits W")
      ->capture_default_str();
  cmd->add_option("--outlier-cap", check->outliers.cap,
                  "--check: outlier entries per (token, KV head) of the 'after' columns")
      ->capture_default_str();
  cmd->add_option("--outlier-threshold", check->outliers.threshold,
                  "--check: |z| past which a value is an outlier (0 = the tree's outermost)")
      ->capture_default_str();
  cmd->add_option("--json", *json_path, "--check: also write the rows as JSON to FILE");
  cmd->callback([o, check, check_flag, seed_set, json_path, &exit_code] {
    if (o->samples < 1) throw codec::InvalidArgument("samples", "must be at least 1");
    if (!*check_flag) {
      const ModelCalibration c = CalibrateModel(*o);
      std::cout << "calibrated " << c.model_id << " on " << c.samples << " documents ("
                << c.tokens << " tokens); weights " << c.weights_digest << "; calibration "
                << c.calibration.Digest() << "\n";
      exit_code = 0;
      return;
    }
    check->documents = *o;
    if (!*seed_set) check->documents.seed = o->seed + 1;
    const std::vector<CodecFidelityRow> rows = MeasureCodecFidelity(*check);
    std::printf(
        "%5s %-5s %10s %9s %9s %9s %10s %11s %10s %7s %6s %7s | %9s %10s %7s %7s %9s %10s\n",
        "layer", "kind", "values", "fp8_rms", "fp8_sat", "rkv_rms", "rkv_outer", "outer_err%",
        "at_first%", "z_mean", "z_std", "z_max", "rms_after", "clip_after", "ent/vec", "list%",
        "max/block", "budget_cut");
    nlohmann::json out = nlohmann::json::array();
    for (const CodecFidelityRow& r : rows) {
      std::printf(
          "%5d %-5s %10lld %9.2e %9.2e %9.2e %10.2e %10.1f%% %9.1f%% %7.3f %6.3f %7.2f | %9.2e "
          "%10.2e %7.4f %6.2f%% %9lld %10.2e\n",
          r.layer, r.kind.c_str(), static_cast<long long>(r.values), r.fp8_relative_rms,
          r.fp8_saturated, r.readkv_relative_rms, r.readkv_beyond_outer,
          100.0 * r.readkv_outer_error_share, 100.0 * r.readkv_outer_first_token, r.z_mean,
          r.z_std, r.z_max_abs, r.readkv_relative_rms_after, r.readkv_clipped_after,
          r.outlier_entries_per_vector, 100.0 * r.outlier_capacity_share,
          static_cast<long long>(r.outlier_max_block_entries), r.outlier_over_budget);
      out.push_back({{"layer", r.layer}, {"kind", r.kind}, {"values", r.values},
                     {"fp8_relative_rms", r.fp8_relative_rms}, {"fp8_saturated", r.fp8_saturated},
                     {"readkv_relative_rms", r.readkv_relative_rms},
                     {"readkv_beyond_outer", r.readkv_beyond_outer},
                     {"readkv_outer_error_share", r.readkv_outer_error_share},
                     {"readkv_outer_first_token", r.readkv_outer_first_token},
                     {"outer_by_token", [&] {
                        nlohmann::json top = nlohmann::json::array();
                        for (size_t i = 0; i < std::min<size_t>(r.outer_by_token.size(), 16); ++i) {
                          top.push_back({r.outer_by_token[i].first, r.outer_by_token[i].second});
                        }
                        return top;
                      }()},
                     {"z_mean", r.z_mean}, {"z_std", r.z_std}, {"z_max_abs", r.z_max_abs},
                     {"readkv_relative_rms_after", r.readkv_relative_rms_after},
                     {"readkv_clipped_after", r.readkv_clipped_after},
                     {"outlier_entries_per_vector", r.outlier_entries_per_vector},
                     {"outlier_capacity_share", r.outlier_capacity_share},
                     {"outlier_max_block_entries", r.outlier_max_block_entries},
                     {"outlier_over_budget", r.outlier_over_budget}});
    }
    // Which tokens' values pass the outer threshold (bytes shown as characters).
    const auto show = [](int t) {
      if (t == ByteTokenizer::kBos) return std::string("BOS");
      if (t == ByteTokenizer::kEos) return std::string("EOS");
      if (t == '\n') return std::string("'\\n'");
      if (t >= 32 && t < 127) return "'" + std::string(1, static_cast<char>(t)) + "'";
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", t);
      return std::string(hex);
    };
    std::printf("tokens holding the values past the outer threshold (share, top 6):\n");
    for (const CodecFidelityRow& r : rows) {
      std::printf("%5d %-5s", r.layer, r.kind.c_str());
      for (size_t i = 0; i < std::min<size_t>(r.outer_by_token.size(), 6); ++i) {
        std::printf(" %s %.0f%%", show(r.outer_by_token[i].first).c_str(),
                    100.0 * r.outer_by_token[i].second);
      }
      std::printf("\n");
    }
    if (!json_path->empty()) {
      std::ofstream f(*json_path);
      f << nlohmann::json{{"model_dir", o->model_dir}, {"samples", o->samples},
                          {"max_bytes", o->max_bytes}, {"seed", check->documents.seed},
                          {"store_bits", check->store_bits},
                          {"outlier_cap", check->outliers.cap},
                          {"outlier_threshold", check->outliers.threshold}, {"rows", out}}
               .dump(1)
        << "\n";
      if (!f) throw codec::InvalidArgument("json", "cannot write " + *json_path);
    }
    exit_code = 0;
  });
}

namespace {

template <typename T>
void AddList(CLI::App* cmd, const char* name, std::vector<T>& values, const char* help) {
  cmd->add_option(name, values, help)->delimiter(',')->capture_default_str();
}

}  // namespace

void AddEvalCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "eval", "Held-out passkey and QA quality of a model through its KV backend");
  auto model_dir = std::make_shared<std::string>(DefaultModelDirectory());
  auto flags = std::make_shared<RuntimeFlags>(*cmd);
  auto o = std::make_shared<EvalOptions>();
  auto out_path = std::make_shared<std::string>();
  auto verbose = std::make_shared<bool>(false);
  cmd->add_option("--model", *model_dir, "model directory")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the held-out sets")->capture_default_str();
  AddList(cmd, "--lengths", o->passkey_lengths, "passkey prompt lengths (bytes)");
  AddList(cmd, "--depths", o->passkey_depths, "passkey needle depths in [0, 1]");
  cmd->add_option("--per-cell", o->passkey_per_cell, "passkeys per (length, depth)")
      ->capture_default_str();
  AddList(cmd, "--qa-lengths", o->qa_lengths, "QA prompt lengths (bytes)");
  AddList(cmd, "--qa-depths", o->qa_depths, "QA evidence depths");
  cmd->add_option("--qa-per-cell", o->qa_per_cell, "QA items per (length, depth)")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "sequences decoded together")->capture_default_str();
  cmd->add_option("--out", *out_path, "write the JSON report here");
  cmd->add_flag("--verbose", *verbose, "print one line per item");
  cmd->callback([model_dir, flags, o, out_path, verbose, &exit_code] {
    const RuntimeOptions runtime = flags->Resolve();
    LlamaDecodeModel model(*model_dir, runtime);
    const auto tokenizer = MakeTokenizer(model.config());
    if (*verbose) o->progress = [](const std::string& line) { std::cerr << line << "\n"; };
    const EvalReport report = EvaluateRecall(model, *tokenizer, *o);
    nlohmann::json j = nlohmann::json::parse(report.ToJson());
    j["kv"] = std::string(codec::KvBackendName(runtime.kv.kind));
    j["store_bits"] = runtime.kv.store_bits;
    j["read_bits"] = runtime.kv.read_bits;
    j["reader"] = std::string(codec::ReaderName(runtime.kv.reader));
    j["prefill"] = runtime.kv.prefill == PrefillAttention::kDense ? "dense" : "cache";
    j["device"] = runtime.device;
    j["model"] = *model_dir;
    j["weights_digest"] = model.weights_digest();
    const engine::KvLedgers led = model.ledgers();
    j["logical_read_bytes"] = led.logical_read_bytes;
    j["outlier_cap"] = runtime.kv.outlier_cap;
    j["byte_keys"] = runtime.kv.byte_keys;
    j["outlier_read_bytes"] = led.outlier_read_bytes;
    j["physical_traffic_bytes"] = led.physical_traffic_bytes;
    j["encode_seconds"] = led.encode_seconds;
    const std::string text = j.dump(2);
    std::cout << text << "\n";
    if (!out_path->empty()) std::ofstream(*out_path) << text << "\n";
    exit_code = 0;
  });
}

void AddGenerateCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("generate", "Greedy completion of one prompt");
  auto model_dir = std::make_shared<std::string>(DefaultModelDirectory());
  auto flags = std::make_shared<RuntimeFlags>(*cmd);
  auto prompt = std::make_shared<std::string>();
  auto max_tokens = std::make_shared<int>(32);
  cmd->add_option("--model", *model_dir, "model directory")->capture_default_str();
  cmd->add_option("--prompt", *prompt, "prompt text")->required();
  cmd->add_option("--max-tokens", *max_tokens, "tokens to generate")->capture_default_str();
  cmd->callback([model_dir, flags, prompt, max_tokens, &exit_code] {
    LlamaDecodeModel model(*model_dir, flags->Resolve());
    const auto tokenizer = MakeTokenizer(model.config());
    const auto out =
        GreedyCompleteBatch(model, *tokenizer, {*prompt}, *max_tokens, {}, engine::ReadPolicy{});
    std::cout << out.front().text << "\n";
    exit_code = 0;
  });
}

}  // namespace readkv::model
