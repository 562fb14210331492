#include "readkv/model/model_calibration.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <sstream>
#include <stdexcept>

#include "readkv/codec/bitplanes.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/fp8.h"
#include "readkv/codec/fp8_cache.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/transform.h"
#include "readkv/model/errors.h"
#include "readkv/model/recall_data.h"
#include "readkv/model/runtime.h"
#include "readkv/model/tokenizer.h"

namespace readkv::model {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "kvgate-model-calibration";
constexpr int kVersion = 1;

// Feeds the seeded calibration corpus's documents (samples of at most max_bytes) through the
// model one sequence at a time, so its KV observer sees every post-RoPE key and value; returns
// the tokens fed. before_document (if set) sees each document's tokens before they are fed.
int64_t RunDocuments(LlamaDecodeModel& model, const CalibrateOptions& options,
                     const std::function<void(std::span<const int32_t>)>& before_document = {}) {
  const ModelConfig& config = model.config();
  const auto tokenizer = MakeTokenizer(config);
  const int max_bytes =
      std::min(options.max_bytes, config.max_position_embeddings - 2);  // BOS, EOS
  RecallCorpus corpus(options.seed);
  int64_t tokens = 0;
  for (int i = 0; i < options.samples; ++i) {
    std::vector<int32_t> ids = tokenizer->Encode(corpus.Next(max_bytes), /*add_bos=*/true);
    ids.push_back(tokenizer->eos_token());
    // Documents are at least 256 bytes; a model with a shorter context sees their beginning.
    ids.resize(std::min(ids.size(), static_cast<size_t>(config.max_position_embeddings)));
    if (before_document) before_document(ids);
    model.StartSequence(static_cast<uint64_t>(i + 1), {});
    engine::SequenceStep step;
    step.sequence_id = static_cast<uint64_t>(i + 1);
    step.tokens = ids;
    model.Forward(std::span<engine::SequenceStep>(&step, 1));
    model.EndSequence(static_cast<uint64_t>(i + 1));
    tokens += static_cast<int64_t>(ids.size());
  }
  return tokens;
}

}  // namespace

std::string ModelCalibration::ToJson() const {
  json j = json::object();
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model_id"] = model_id;
  j["weights_digest"] = weights_digest;
  j["layers"] = layers;
  j["heads_q"] = heads_q;
  j["heads_kv"] = heads_kv;
  j["head_dim"] = head_dim;
  j["rope_theta"] = rope_theta;
  j["seed"] = seed;
  j["samples"] = samples;
  j["tokens"] = tokens;
  j["calibration_digest"] = calibration.Digest();
  // For people reading the file: the FP8 scales the runtime derives (amax / 448).
  json per_tensor_k = json::array(), per_tensor_v = json::array();
  for (int l = 0; l < calibration.layers; ++l) {
    float k = 0.0f, v = 0.0f;
    for (int h = 0; h < calibration.kv_heads; ++h) {
      const size_t i = static_cast<size_t>(l) * calibration.kv_heads + h;
      k = std::max(k, calibration.key_amax[i]);
      v = std::max(v, calibration.value_amax[i]);
    }
    per_tensor_k.push_back(codec::Fp8ScaleFromAmax(k));
    per_tensor_v.push_back(codec::Fp8ScaleFromAmax(v));
  }
  j["fp8_k_scale_per_layer"] = per_tensor_k;
  j["fp8_v_scale_per_layer"] = per_tensor_v;
  j["calibration"] = json::parse(calibration.Serialize());
  return j.dump(1) + "\n";
}

ModelCalibration ModelCalibration::Parse(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw ModelFormatError("calibration.json", std::string("not valid JSON: ") + e.what());
  }
  auto field = [&](const char* name) -> const json& {
    auto it = j.find(name);
    if (it == j.end()) throw ModelFormatError(name, "missing from calibration.json");
    return *it;
  };
  try {
    if (field("format") != kFormat) throw ModelFormatError("format", "not a model calibration");
    if (field("version") != kVersion) throw ModelFormatError("version", "unsupported version");
    ModelCalibration c;
    c.model_id = field("model_id").get<std::string>();
    c.weights_digest = field("weights_digest").get<std::string>();
    c.layers = field("layers").get<int>();
    c.heads_q = field("heads_q").get<int>();
    c.heads_kv = field("heads_kv").get<int>();
    c.head_dim = field("head_dim").get<int>();
    c.rope_theta = field("rope_theta").get<double>();
    c.seed = field("seed").get<uint64_t>();
    c.samples = field("samples").get<int>();
    c.tokens = field("tokens").get<int64_t>();
    try {
      c.calibration = codec::Calibration::Parse(field("calibration").dump());
    } catch (const codec::InvalidArgument& e) {
      throw ModelFormatError("calibration." + e.field(), e.what());
    }
    if (c.calibration.layers != c.layers || c.calibration.kv_heads != c.heads_kv ||
        c.calibration.head_dim != c.head_dim) {
      throw ModelFormatError("calibration", "geometry differs from the file's own fields");
    }
    return c;
  } catch (const json::exception& e) {
    throw ModelFormatError("calibration.json", e.what());
  }
}

ModelCalibration ModelCalibration::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ModelFormatError("calibration.json",
                           "cannot open " + path + " (run `kvgate calibrate --model DIR`)");
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Parse(buffer.str());
}

ModelCalibration CalibrateModel(const CalibrateOptions& options) {
  if (options.samples < 1) throw std::invalid_argument("samples: must be at least 1");
  RuntimeOptions runtime;
  runtime.threads = options.threads;
  LlamaDecodeModel model(options.model_dir, runtime);
  const ModelConfig& config = model.config();
  codec::Calibrator calibrator(config.num_hidden_layers, config.num_key_value_heads,
                               config.head_dim);
  model.set_kv_observer([&](int layer, int head, std::span<const float> k,
                            std::span<const float> v) { calibrator.Observe(layer, head, k, v); });
  const int64_t tokens = RunDocuments(model, options);
  ModelCalibration out;
  out.model_id = config.model_id;
  out.weights_digest = model.weights_digest();
  out.layers = config.num_hidden_layers;
  out.heads_q = config.num_attention_heads;
  out.heads_kv = config.num_key_value_heads;
  out.head_dim = config.head_dim;
  out.rope_theta = config.rope_theta;
  out.seed = options.seed;
  out.samples = options.samples;
  out.tokens = tokens;
  out.calibration = calibrator.Finish();
  const std::string path = options.output_path.empty()
                               ? options.model_dir + "/calibration.json"
                               : options.output_path;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot write " + tmp);
    f << out.ToJson();
    if (!f) throw std::runtime_error("write failed: " + tmp);
  }
  std::filesystem::rename(tmp, path);
  return out;
}

namespace {

// One (layer, kind)'s sums over every scalar the fidelity check saw.
struct FidelitySums {
  int64_t n = 0, saturated = 0, beyond = 0;
  std::vector<int64_t> beyond_by_token;  // [vocab]: values past the outer threshold
  double x2 = 0, fp8_err2 = 0, readkv_err2 = 0, outer_err2 = 0, z = 0, z2 = 0, z_max = 0;
  int64_t kept = 0, list_bytes = 0;  // outlier entries and their lists' bytes
  int64_t max_block_entries = 0;     // the most entries one (head, 256-token block) selected
  int64_t over_budget = 0;           // selected, then dropped by the block budget
  double after_err2 = 0;             // the W-bit code's error with the lists applied
};

// The row of one (layer, kind) from its sums (d: head_dim, w: the W-bit code's store_bits).
CodecFidelityRow FidelityRow(const FidelitySums& s, int l, int kind, int bos_token_id, int d,
                             int w) {
  CodecFidelityRow r;
  r.layer = l;
  r.kind = kind == 0 ? "key" : "value";
  r.values = s.n;
  const auto n = static_cast<double>(std::max<int64_t>(s.n, 1));
  r.fp8_relative_rms = std::sqrt(s.fp8_err2 / std::max(s.x2, 1e-300));
  r.fp8_saturated = static_cast<double>(s.saturated) / n;
  r.readkv_relative_rms = std::sqrt(s.readkv_err2 / std::max(s.x2, 1e-300));
  r.readkv_beyond_outer = static_cast<double>(s.beyond) / n;
  r.readkv_outer_error_share = s.outer_err2 / std::max(s.readkv_err2, 1e-300);
  // Every document starts with BOS, which appears nowhere else.
  r.readkv_outer_first_token =
      static_cast<double>(s.beyond_by_token[static_cast<size_t>(bos_token_id)]) /
      static_cast<double>(std::max<int64_t>(s.beyond, 1));
  for (size_t t = 0; t < s.beyond_by_token.size(); ++t) {
    if (s.beyond_by_token[t] > 0) {
      r.outer_by_token.emplace_back(static_cast<int>(t),
                                    static_cast<double>(s.beyond_by_token[t]) /
                                        static_cast<double>(s.beyond));
    }
  }
  std::stable_sort(r.outer_by_token.begin(), r.outer_by_token.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  r.z_mean = s.z / n;
  r.z_std = std::sqrt(std::max(0.0, s.z2 / n - r.z_mean * r.z_mean));
  r.z_max_abs = s.z_max;
  r.readkv_clipped_after = static_cast<double>(s.beyond - s.kept) / n;
  r.readkv_relative_rms_after = std::sqrt(s.after_err2 / std::max(s.x2, 1e-300));
  r.outlier_entries_per_vector = static_cast<double>(s.kept) * d / n;
  r.outlier_capacity_share = static_cast<double>(s.list_bytes) / (n * w / 8.0);
  r.outlier_max_block_entries = s.max_block_entries;
  r.outlier_over_budget = static_cast<double>(s.over_budget) / n;
  return r;
}

}  // namespace

std::vector<CodecFidelityRow> MeasureCodecFidelity(const CodecFidelityOptions& options) {
  const CalibrateOptions& docs = options.documents;
  if (docs.samples < 1) throw std::invalid_argument("samples: must be at least 1");
  const codec::LloydTree tree(options.store_bits);  // checks store_bits
  RuntimeOptions runtime;
  runtime.threads = docs.threads;
  LlamaDecodeModel model(docs.model_dir, runtime);
  const ModelConfig& config = model.config();
  const ModelCalibration loaded = ModelCalibration::Load(
      options.calibration_path.empty() ? docs.model_dir + "/calibration.json"
                                       : options.calibration_path);
  if (loaded.weights_digest != model.weights_digest()) {
    throw codec::IdentityMismatch("weights_digest", model.weights_digest(),
                                  loaded.weights_digest);
  }
  const codec::Calibration& cal = loaded.calibration;
  const int layers = config.num_hidden_layers, heads = config.num_key_value_heads;
  const int d = config.head_dim, w = options.store_bits;
  if (cal.layers != layers || cal.kv_heads != heads || cal.head_dim != d) {
    throw codec::IdentityMismatch("geometry", "the model's", "the calibration's");
  }
  // Per (layer, kind), index 2 * layer + kind.
  std::vector<FidelitySums> sums(static_cast<size_t>(2 * layers));
  // FP8's per-tensor scales as the FP8 cache itself derives them (equal over a layer's heads).
  std::vector<float> fp8_scale(static_cast<size_t>(2 * layers));
  std::vector<codec::HadamardTransform> transforms;  // (layer * heads + head) * 2 + kind
  for (int l = 0; l < layers; ++l) {
    const codec::Fp8LayerCache fp8({config.num_attention_heads, heads, d}, cal, l,
                                   codec::Fp8ScaleGranularity::kTensor);
    fp8_scale[2 * static_cast<size_t>(l)] = fp8.key_scale(0);
    fp8_scale[2 * static_cast<size_t>(l) + 1] = fp8.value_scale(0);
    for (int h = 0; h < heads; ++h) {
      transforms.emplace_back(d, cal.seeds.KeySeed(l, h));
      transforms.emplace_back(d, cal.seeds.ValueSeed(l, h));
    }
  }
  const float outer = tree.thresholds(w).back();  // the tree is symmetric
  const codec::OutlierOptions lists = codec::ResolveOutlierOptions(options.outliers, tree, d);
  std::vector<float> zs(static_cast<size_t>(d));
  std::vector<uint8_t> kept_channels(static_cast<size_t>(codec::kMaxOutlierCap));
  std::vector<float> xt(static_cast<size_t>(d));
  // The observer sees a document's tokens in order, per (layer, head): its position there.
  std::vector<int64_t> position(static_cast<size_t>(layers * heads), 0);
  // Per (layer * heads + head) * 2 + kind, in the current 256-token block: the entries the cap
  // selected (the per-block budget's measure, OutlierOptions::block_cap, before any budget) and
  // those the budget let in (as OutlierStore keeps them: a token past the budget keeps the first
  // of its ranking, by a shorter span).
  std::vector<int64_t> block_entries(static_cast<size_t>(2 * layers * heads), 0);
  std::vector<int64_t> block_kept(static_cast<size_t>(2 * layers * heads), 0);
  std::span<const int32_t> document;  // the tokens being fed
  for (FidelitySums& s : sums) s.beyond_by_token.assign(static_cast<size_t>(config.vocab_size), 0);
  const auto observe = [&](int layer, int head, int kind, std::span<const float> x) {
    const size_t row = 2 * static_cast<size_t>(layer) + static_cast<size_t>(kind);
    FidelitySums& s = sums[row];
    const int64_t at = position[static_cast<size_t>(layer) * heads + head];
    if (at >= static_cast<int64_t>(document.size())) {
      throw std::logic_error("fidelity check: the KV observer saw more tokens than were fed");
    }
    const auto token = static_cast<size_t>(document[static_cast<size_t>(at)]);
    const float scale = fp8_scale[row];
    const auto& t = transforms[(static_cast<size_t>(layer) * heads + head) * 2 + kind];
    const auto mean = kind == 0 ? cal.KeyMean(layer, head) : cal.ValueMean(layer, head);
    const auto sd = kind == 0 ? cal.KeyStd(layer, head) : cal.ValueStd(layer, head);
    for (int c = 0; c < d; ++c) {
      const auto i = static_cast<size_t>(c);
      const double q = scale * codec::Fp8E4m3Decode(codec::Fp8E4m3Encode(x[i] / scale));
      s.saturated += std::abs(x[i] / scale) > codec::kFp8E4m3Max;
      s.x2 += static_cast<double>(x[i]) * x[i];
      s.fp8_err2 += (x[i] - q) * (x[i] - q);
    }
    // The W-bit code's error in the transformed domain, where each value is coded: the
    // transform is orthogonal, so its squared error equals the model domain's.
    t.Forward(x, xt);
    for (int c = 0; c < d; ++c) {
      const auto i = static_cast<size_t>(c);
      zs[i] = (xt[i] - mean[i]) / sd[i];
    }
    // The lists: kept values cost their fp16 rounding instead of their clipping error.
    int64_t beyond_lists = 0;
    const size_t block_row = (static_cast<size_t>(layer) * heads + head) * 2 + kind;
    const bool block_start = at % codec::kBlockTokens == 0;
    const int selected = codec::SelectOutliers(zs, lists, kept_channels, beyond_lists);
    int64_t& in_block = block_entries[block_row];
    in_block = (block_start ? 0 : in_block) + selected;
    s.max_block_entries = std::max(s.max_block_entries, in_block);
    int64_t& kept_in_block = block_kept[block_row];
    if (block_start) kept_in_block = 0;
    const auto left = static_cast<size_t>(std::max<int64_t>(0, lists.block_cap - kept_in_block));
    const int kept =
        selected <= static_cast<int>(left)
            ? selected
            : codec::SelectOutliers(zs, lists, std::span<uint8_t>(kept_channels).first(left),
                                    beyond_lists);
    kept_in_block += kept;
    s.over_budget += selected - kept;
    s.kept += kept;
    s.list_bytes += kept * codec::kOutlierEntryBytes + (block_start ? 2 : 0);
    for (int c = 0; c < d; ++c) {
      const auto i = static_cast<size_t>(c);
      const float z = zs[i];
      const double err = static_cast<double>(sd[i]) * (z - tree.Decode(tree.Encode(z), w));
      const bool listed =
          std::find(kept_channels.begin(), kept_channels.begin() + kept, c) !=
          kept_channels.begin() + kept;
      const double after =
          listed ? static_cast<double>(sd[i]) * (z - codec::HalfToFloat(codec::FloatToHalf(z)))
                 : err;
      s.after_err2 += after * after;
      const bool beyond = std::abs(z) > outer;
      s.beyond += beyond;
      s.beyond_by_token[token] += beyond;
      s.readkv_err2 += err * err;
      if (beyond) s.outer_err2 += err * err;
      s.z += z;
      s.z2 += static_cast<double>(z) * z;
      s.z_max = std::max(s.z_max, static_cast<double>(std::abs(z)));
    }
    s.n += d;
  };
  model.set_kv_observer([&](int layer, int head, std::span<const float> k,
                            std::span<const float> v) {
    observe(layer, head, 0, k);
    observe(layer, head, 1, v);
    ++position[static_cast<size_t>(layer) * heads + head];
  });
  RunDocuments(model, docs, [&](std::span<const int32_t> ids) {
    document = ids;
    std::fill(position.begin(), position.end(), 0);
  });
  std::vector<CodecFidelityRow> rows;
  for (int l = 0; l < layers; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      rows.push_back(FidelityRow(sums[2 * static_cast<size_t>(l) + static_cast<size_t>(kind)], l,
                                 kind, config.bos_token_id, d, w));
    }
  }
  return rows;
}

}  // namespace readkv::model
