// `kvgate codec table|account|attention`: the ReadKV CPU reference from the command line.
//   table      the Lloyd tree of W bits: D(t), thresholds and centroids per depth.
//   account    the paper's payload-only write/read model (docs/ledgers.md).
//   attention  one seeded single-layer attention step on synthetic data with the chosen backend:
//              error vs exact FP64 attention and the four ledgers.
// Scripts rely on the JSON keys printed with --json. Bad arguments exit 2 naming the flag.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kvgate/command.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/attention_experiment.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/ledgers.h"
#include "readkv/codec/readers.h"

namespace kvgate {
namespace {

using readkv::codec::InvalidArgument;

// Runs `body`, renaming a codec field ("head_dim") to the flag that set it ("--head-dim").
template <typename Body>
void WithFlagNames(Body&& body) {
  try {
    body();
  } catch (const InvalidArgument& e) {
    std::string flag = "--" + e.field();
    for (char& ch : flag) {
      if (ch == '_') ch = '-';
    }
    const std::string what = e.what();
    const std::string prefix = e.field() + ": ";
    throw InvalidArgument(flag, what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
  }
}

void AddTable(CLI::App& codec, CommandContext& context) {
  auto* cmd = codec.add_subcommand("table", "Print the Gaussian Lloyd tree of W bits");
  auto store_bits = std::make_shared<int>(8);
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--store-bits", *store_bits, "W, tree depth (1..8)");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([store_bits, json, &context] {
    WithFlagNames([&] {
      const readkv::codec::LloydTree tree(*store_bits);
      const int w = tree.store_bits();
      if (*json) {
        nlohmann::json thresholds = nlohmann::json::array();
        nlohmann::json centroids = nlohmann::json::array();
        for (int t = 1; t <= w; ++t) {
          const auto th = tree.thresholds(t);
          const auto ce = tree.centroids(t);
          thresholds.push_back(std::vector<float>(th.begin(), th.end()));
          centroids.push_back(std::vector<float>(ce.begin(), ce.end()));
        }
        const nlohmann::json out = {
            {"store_bits", w},
            {"codebook_id", readkv::codec::LloydTree::kCodebookId},
            {"codebook_version", readkv::codec::LloydTree::kCodebookVersion},
            {"digest", tree.digest()},
            {"distortion", tree.distortions()},
            {"thresholds", thresholds},
            {"centroids", centroids}};
        std::cout << out.dump(2) << "\n";
      } else {
        std::cout << "Gaussian Lloyd tree, W=" << w << " (" << readkv::codec::LloydTree::kCodebookId
                  << " v" << readkv::codec::LloydTree::kCodebookVersion << ", digest "
                  << tree.digest() << ")\n";
        std::cout << "depth  D(t)          SNR(dB)  nodes\n";
        for (int t = 0; t <= w; ++t) {
          std::cout << std::setw(5) << t << "  " << std::setw(12) << std::setprecision(6)
                    << std::scientific << tree.distortion(t) << "  " << std::setw(7) << std::fixed
                    << std::setprecision(2) << -10.0 * std::log10(tree.distortion(t)) + 0.0 << "  "
                    << (1 << t) << "\n";
        }
        for (int t = 1; t <= std::min(w, 3); ++t) {
          std::cout << "depth " << t << " centroids:";
          for (float c : tree.centroids(t)) std::cout << " " << std::setprecision(4) << c;
          std::cout << "\n";
        }
      }
    });
    context.exit_code = 0;
  });
}

void AddAccount(CLI::App& codec, CommandContext& context) {
  auto* cmd = codec.add_subcommand(
      "account", "Payload-only write/read model: extra writes of storing W bits vs a baseline");
  struct Args {
    int64_t prompt_tokens = 8192;
    int64_t decode_steps = 128;
    int store_bits = 8;
    double read_bits = 4.0;
    int baseline_bits = 4;
    double outlier_rate = -1.0;
    int head_dim = 128;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "N, prompt tokens")
      ->capture_default_str();
  cmd->add_option("--decode-steps", args->decode_steps, "L, decode steps")->capture_default_str();
  cmd->add_option("--store-bits", args->store_bits, "W, stored bits per scalar")
      ->capture_default_str();
  cmd->add_option("--read-bits", args->read_bits, "R, read bits per scalar")->capture_default_str();
  cmd->add_option("--baseline-bits", args->baseline_bits, "bits stored and read by the baseline")
      ->capture_default_str();
  cmd->add_option("--outlier-rate", args->outlier_rate,
                  "also the outlier lists' cost per ledger: list entries per stored scalar "
                  "(K and V; from `kvgate calibrate --check`)");
  cmd->add_option("--head-dim", args->head_dim, "d, for the lists' block headers")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args, &context] {
    WithFlagNames([&] {
      if (args->outlier_rate >= 0.0) {
        const readkv::codec::OutlierListModel o = readkv::codec::ComputeOutlierListModel(
            args->outlier_rate, args->head_dim, args->store_bits, args->read_bits);
        if (args->json) {
          std::cout << nlohmann::json{{"entries_per_scalar", o.entries_per_scalar},
                                      {"head_dim", o.head_dim},
                                      {"store_bits", o.store_bits},
                                      {"read_bits", o.read_bits},
                                      {"bytes_per_scalar", o.bytes_per_scalar},
                                      {"capacity_share", o.capacity_share},
                                      {"logical_read_share", o.logical_read_share},
                                      {"physical_traffic_share", o.physical_traffic_share},
                                      {"workspace_bytes", o.workspace_bytes}}
                           .dump(2)
                    << "\n";
        } else {
          std::cout << "outlier lists at " << o.entries_per_scalar << " entries per scalar (d="
                    << o.head_dim << ", W=" << o.store_bits << ", R=" << o.read_bits << "):\n"
                    << "  capacity:         " << 100.0 * o.capacity_share
                    << "% of the W-bit payload\n"
                    << "  logical reads:    " << 100.0 * o.logical_read_share
                    << "% of the payload read at R\n"
                    << "  physical traffic: " << 100.0 * o.physical_traffic_share
                    << "% of the payload bytes moved at R\n"
                    << "  workspace:        " << o.workspace_bytes << " bytes\n";
        }
        return;
      }
      const readkv::codec::PayloadWriteReadModel m = readkv::codec::ComputePayloadWriteReadModel(
          args->prompt_tokens, args->decode_steps, args->store_bits, args->read_bits,
          args->baseline_bits);
      if (args->json) {
        const nlohmann::json out = {
            {"prompt_tokens", m.prompt_tokens},
            {"decode_steps", m.decode_steps},
            {"store_bits", m.store_bits},
            {"read_bits", m.read_bits},
            {"baseline_bits", m.baseline_bits},
            {"history_reads", m.history_reads},
            {"read_bits_per_lane", m.read_bits_per_lane},
            {"write_bits_per_lane", m.write_bits_per_lane},
            {"baseline_write_bits_per_lane", m.baseline_write_bits_per_lane},
            {"extra_write_bits_per_lane", m.extra_write_bits_per_lane},
            {"extra_write_ratio", m.extra_write_ratio},
            {"extra_write_percent", 100.0 * m.extra_write_ratio},
            {"capacity_ratio", m.capacity_ratio}};
        std::cout << out.dump(2) << "\n";
      } else {
        std::cout << "N=" << m.prompt_tokens << " prompt tokens, L=" << m.decode_steps
                  << " decode steps\n"
                  << "history reads S = L*N + L(L-1)/2 = " << m.history_reads << " tokens\n"
                  << "reads per lane: " << m.read_bits_per_lane << " bits (R=" << m.read_bits
                  << ", same for both)\n"
                  << "writes per lane: " << m.write_bits_per_lane << " bits (W=" << m.store_bits
                  << ") vs " << m.baseline_write_bits_per_lane << " (baseline " << m.baseline_bits
                  << ")\n"
                  << "extra writes: " << m.extra_write_bits_per_lane << " bits = " << std::fixed
                  << std::setprecision(3) << 100.0 * m.extra_write_ratio << "% of reads\n"
                  << "capacity: " << std::setprecision(2) << m.capacity_ratio
                  << "x the baseline's payload\n";
      }
    });
    context.exit_code = 0;
  });
}

std::pair<double, double> ParseSplit(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    throw InvalidArgument("kv_split", "expected RK:RV (e.g. 3:1), got '" + text + "'");
  }
  try {
    size_t used_k = 0;
    size_t used_v = 0;
    const std::string k = text.substr(0, colon);
    const std::string v = text.substr(colon + 1);
    const double rk = std::stod(k, &used_k);
    const double rv = std::stod(v, &used_v);
    if (used_k != k.size() || used_v != v.size()) throw std::invalid_argument(text);
    return {rk, rv};
  } catch (const std::logic_error&) {
    throw InvalidArgument("kv_split", "expected RK:RV numbers, got '" + text + "'");
  }
}

nlohmann::json LedgersJson(const readkv::codec::AttentionLedgers& l) {
  const auto& p = l.physical;
  return {{"capacity",
           {{"payload_bytes", l.capacity.payload_bytes},
            {"metadata_bytes", l.capacity.metadata_bytes},
            {"residual_bytes", l.capacity.residual_bytes},
            {"outlier_bytes", l.capacity.outlier_bytes}}},
          {"logical_read_bits",
           {{"key", l.logical.key_bits},
            {"value", l.logical.value_bits},
            {"residual", l.logical.residual_bits},
            {"outlier", l.logical.outlier_bits}}},
          {"physical_traffic",
           {{"key_payload_bytes", p.key_payload_bytes},
            {"value_payload_bytes", p.value_payload_bytes},
            {"residual_bytes", p.residual_bytes},
            {"metadata_bytes", p.metadata_bytes},
            {"query_bytes", p.query_bytes},
            {"score_bytes", p.score_bytes},
            {"schedule_bytes", p.schedule_bytes},
            {"output_bytes", p.output_bytes},
            {"outlier_bytes", p.outlier_bytes}}},
          {"encode",
           {{"seconds", l.encode.seconds},
            {"bytes_written", l.encode.bytes_written},
            {"tokens_appended", l.encode.tokens_appended}}},
          {"depths",
           {{"encoded_tokens", l.depths.encoded_tokens},
            {"residual_tokens", l.depths.residual_tokens},
            {"key_mean", l.depths.mean_key_depth},
            {"key_min", l.depths.min_key_depth},
            {"key_max", l.depths.max_key_depth},
            {"value_mean", l.depths.mean_value_depth},
            {"value_min", l.depths.min_value_depth},
            {"value_max", l.depths.max_value_depth}}}};
}

void AddAttention(CLI::App& codec, CommandContext& context) {
  auto* cmd = codec.add_subcommand(
      "attention", "One seeded attention step on synthetic data: error vs exact and ledgers");
  struct Args {
    int64_t tokens = 4096;
    int heads_q = 32;
    int heads_kv = 8;
    int head_dim = 128;
    std::string kv = "readkv";
    int store_bits = 8;
    double read_bits = 4.0;
    std::string reader = "constrained";
    std::string kv_split;
    int value_window = 0;
    bool value_window_local = false;
    bool byte_keys = false;
    std::string fp8_scale = "tensor";
    std::string dense_storage = "fp32";
    bool no_residual_window = false;
    int outlier_cap = 0;
    int64_t calibration_samples = 4096;
    uint64_t seed = 1;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--tokens", args->tokens, "T, cached tokens")->capture_default_str();
  cmd->add_option("--heads-q", args->heads_q, "H_q, query heads")->capture_default_str();
  cmd->add_option("--heads-kv", args->heads_kv, "H_kv, KV heads")->capture_default_str();
  cmd->add_option("--head-dim", args->head_dim, "d, head dimension (power of two)")
      ->capture_default_str();
  cmd->add_option("--kv", args->kv, "Backend: dense | fp8 | readkv")->capture_default_str();
  cmd->add_option("--store-bits", args->store_bits, "ReadKV W (1..8)")->capture_default_str();
  auto* read_bits_opt =
      cmd->add_option("--read-bits", args->read_bits, "ReadKV R (<= W)")->capture_default_str();
  cmd->add_option("--reader", args->reader, "ReadKV reader: flexible | constrained | full | tile")
      ->capture_default_str();
  cmd->add_option("--kv-split", args->kv_split, "The reader's R_K:R_V (mean must be R)");
  cmd->add_option("--value-window", args->value_window,
                  "Tile reader: Value depths allocated per window of this many tokens (a "
                  "multiple of 16), each with R_V x its blocks; 0: over the whole row")
      ->capture_default_str();
  cmd->add_flag("--value-window-local", args->value_window_local,
                "Tile reader with --value-window: Value weights normalised per window");
  cmd->add_flag("--byte-keys", args->byte_keys,
                "Tile reader, W = 8, key bits 8: keys stored as uniform bytes (docs/readkv.md)");
  cmd->add_option("--fp8-scale", args->fp8_scale, "FP8 scale granularity: tensor | head")
      ->capture_default_str();
  cmd->add_option("--dense-storage", args->dense_storage, "Dense storage: fp32 | bf16")
      ->capture_default_str();
  cmd->add_flag("--no-residual-window", args->no_residual_window,
                "ReadKV: encode every token at once (no BF16 window)");
  cmd->add_option("--outlier-cap", args->outlier_cap,
                  "ReadKV outlier entries per (token, KV head) for K and for V (0 = off)")
      ->capture_default_str();
  cmd->add_option("--calibration-samples", args->calibration_samples,
                  "Tokens in the calibration sample")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the synthetic data")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args, read_bits_opt, &context] {
    WithFlagNames([&] {
      namespace rc = readkv::codec;
      rc::AttentionExperimentConfig config;
      config.data.geometry = {args->heads_q, args->heads_kv, args->head_dim};
      config.data.tokens = args->tokens;
      config.data.seed = args->seed;
      config.data.Validate();
      config.calibration_samples = args->calibration_samples;
      if (args->calibration_samples < 2) {
        throw InvalidArgument("calibration_samples", "must be >= 2");
      }
      config.cache.backend = rc::ParseKvBackend(args->kv);
      if (args->fp8_scale == "tensor") {
        config.cache.fp8_scale = rc::Fp8ScaleGranularity::kTensor;
      } else if (args->fp8_scale == "head") {
        config.cache.fp8_scale = rc::Fp8ScaleGranularity::kHead;
      } else {
        throw InvalidArgument("fp8_scale", "must be tensor or head, got '" + args->fp8_scale + "'");
      }
      if (args->dense_storage == "fp32") {
        config.cache.dense_storage = rc::DenseStorage::kFp32;
      } else if (args->dense_storage == "bf16") {
        config.cache.dense_storage = rc::DenseStorage::kBf16;
      } else {
        throw InvalidArgument("dense_storage",
                              "must be fp32 or bf16, got '" + args->dense_storage + "'");
      }
      rc::ReadPolicy policy;
      policy.reader = rc::ParseReaderKind(args->reader);
      policy.read_bits = args->read_bits;
      // The full reader reads every plane, so R defaults to W there.
      if (policy.reader == rc::ReaderKind::kFull && read_bits_opt->count() == 0) {
        policy.read_bits = args->store_bits;
      }
      if (!args->kv_split.empty()) {
        const auto [rk, rv] = ParseSplit(args->kv_split);
        policy.key_bits = rk;
        policy.value_bits = rv;
      }
      policy.value_window_tokens = args->value_window;
      policy.value_window_local = args->value_window_local;
      if (args->value_window != 0 && config.cache.backend != rc::KvBackend::kReadKv) {
        throw InvalidArgument("value_window", "only the readkv tile reader has Value windows, "
                                              "not --kv " + args->kv);
      }
      config.cache.store_bits = args->store_bits;
      config.cache.policy = policy;
      config.cache.residual_window = !args->no_residual_window;
      config.cache.outliers.cap = args->outlier_cap;
      if (args->byte_keys && config.cache.backend != rc::KvBackend::kReadKv) {
        throw InvalidArgument("byte_keys", "only the readkv tile reader stores byte keys, not "
                                           "--kv " + args->kv);
      }
      config.cache.byte_keys = args->byte_keys;
      rc::ReaderPlan plan;
      if (config.cache.backend == rc::KvBackend::kReadKv) {
        plan = rc::MakeReaderPlan(policy, args->store_bits);
      }

      const rc::AttentionExperimentResult r = rc::RunAttentionExperiment(config);
      const rc::AttentionLedgers& l = r.ledgers;
      nlohmann::json out = {{"kv", args->kv},
                            {"tokens", args->tokens},
                            {"heads_q", args->heads_q},
                            {"heads_kv", args->heads_kv},
                            {"head_dim", args->head_dim},
                            {"seed", args->seed},
                            {"rel_l2_error", r.rel_l2_error},
                            {"capacity_bytes", l.capacity.Total()},
                            {"logical_read_bytes", l.logical.Bytes()},
                            {"physical_traffic_bytes", l.physical.Total()},
                            {"workspace_peak_bytes", l.workspace_peak_bytes},
                            {"dense_payload_bytes", r.dense_payload_bytes},
                            {"encode_seconds", l.encode.seconds},
                            {"attend_seconds", r.attend_seconds},
                            {"planted_token", r.planted_token}};
      if (config.cache.backend == rc::KvBackend::kReadKv) {
        out["store_bits"] = args->store_bits;
        out["read_bits"] = policy.read_bits;
        out["reader"] = std::string(rc::ReaderName(plan.reader));
        out["kv_split"] = {plan.key_bits, plan.value_bits};
        out["value_window_tokens"] = plan.value_window_tokens;
        out["value_window_local"] = plan.value_window_local;
        out["residual_window"] = !args->no_residual_window;
        out["outlier_cap"] = args->outlier_cap;
        out["byte_keys"] = args->byte_keys;
      } else if (config.cache.backend == rc::KvBackend::kFp8) {
        out["fp8_scale"] = args->fp8_scale;
      } else {
        out["dense_storage"] = args->dense_storage;
      }
      out["ledgers"] = LedgersJson(l);
      if (args->json) {
        std::cout << out.dump(2) << "\n";
      } else {
        std::cout << "kv=" << args->kv << " T=" << args->tokens << " H_q=" << args->heads_q
                  << " H_kv=" << args->heads_kv << " d=" << args->head_dim << " seed=" << args->seed
                  << "\n"
                  << "rel L2 error vs exact FP64:  " << r.rel_l2_error << "\n"
                  << "capacity bytes:              " << l.capacity.Total() << " (payload "
                  << l.capacity.payload_bytes << ", metadata " << l.capacity.metadata_bytes
                  << ", residual " << l.capacity.residual_bytes << ", outliers "
                  << l.capacity.outlier_bytes << ")\n"
                  << "logical read bytes:          " << l.logical.Bytes() << "\n"
                  << "physical traffic bytes:      " << l.physical.Total() << "\n"
                  << "workspace peak bytes:        " << l.workspace_peak_bytes << "\n"
                  << "dense (BF16) payload bytes:  " << r.dense_payload_bytes << "\n"
                  << "encode seconds:              " << l.encode.seconds << "\n";
      }
    });
    context.exit_code = 0;
  });
}

void AddCodecCommand(CLI::App& app, CommandContext& context) {
  auto* codec =
      app.add_subcommand("codec", "ReadKV codec reference: codebook, accounting, attention");
  codec->require_subcommand(1);
  AddTable(*codec, context);
  AddAccount(*codec, context);
  AddAttention(*codec, context);
}

KVGATE_REGISTER_COMMAND(600, AddCodecCommand);

}  // namespace
}  // namespace kvgate
