// Test support: a tiny random Llama written in the Hugging Face layout, and a straightforward
// reference forward pass in double precision written from the architecture's definition (no
// torch), against which the runtime and the trainer are checked.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "kvgate/stats/random.h"
#include "kvgate/filesystem/remove_tree.h"
#include "readkv/model/config.h"
#include "readkv/model/safetensors.h"

namespace readkv::model::testing {

struct TinyModel {
  ModelConfig config;
  std::map<std::string, std::vector<float>> tensors;  // row-major, HF names
  std::map<std::string, std::vector<int64_t>> shapes;
};

inline ModelConfig TinyConfig() {
  ModelConfig c;
  c.model_id = "test/tiny";
  c.vocab_size = 258;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.rope_theta = 500.0;  // small theta: positions rotate visibly within a short test
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 160;
  c.torch_dtype = "float32";
  return c;
}

inline TinyModel MakeTinyModel(uint64_t seed, ModelConfig c = TinyConfig()) {
  TinyModel m;
  m.config = c;
  kvgate::stats::SplitMixRng rng(seed);
  const int64_t d = c.hidden_size, f = c.intermediate_size, v = c.vocab_size;
  const int64_t q = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_key_value_heads} * c.head_dim;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double scale, double base) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> values(static_cast<size_t>(n));
    for (auto& x : values) x = static_cast<float>(base + scale * rng.Normal());
    m.tensors[name] = values;
    m.shapes[name] = shape;
  };
  add("model.embed_tokens.weight", {v, d}, 1.0, 0.0);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {d}, 0.1, 1.0);
    add(p + "self_attn.q_proj.weight", {q, d}, 0.4, 0.0);
    add(p + "self_attn.k_proj.weight", {kv, d}, 0.4, 0.0);
    add(p + "self_attn.v_proj.weight", {kv, d}, 0.3, 0.0);
    add(p + "self_attn.o_proj.weight", {d, q}, 0.2, 0.0);
    add(p + "post_attention_layernorm.weight", {d}, 0.1, 1.0);
    add(p + "mlp.gate_proj.weight", {f, d}, 0.2, 0.0);
    add(p + "mlp.up_proj.weight", {f, d}, 0.2, 0.0);
    add(p + "mlp.down_proj.weight", {d, f}, 0.2, 0.0);
  }
  add("model.norm.weight", {d}, 0.1, 1.0);
  add("lm_head.weight", {v, d}, 0.3, 0.0);
  return m;
}

// Writes config.json and model.safetensors (in the config's torch_dtype) into `dir`.
inline void WriteTinyModel(const TinyModel& m, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << m.config.ToJson();
  std::vector<std::vector<uint8_t>> keep;
  std::vector<TensorToWrite> out;
  const bool bf16 = m.config.torch_dtype == "bfloat16";
  for (const auto& [name, values] : m.tensors) {
    std::vector<uint8_t> bytes;
    if (bf16) {
      bytes.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t b = FloatToBf16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
    } else {
      bytes.resize(values.size() * 4);
      std::memcpy(bytes.data(), values.data(), bytes.size());
    }
    keep.push_back(std::move(bytes));
    out.push_back({name, bf16 ? TensorDType::kBF16 : TensorDType::kF32, m.shapes.at(name),
                   keep.back()});
  }
  WriteSafetensors(dir + "/model.safetensors", out, {});
}

// Logits [T][V] of every position, computed the plain way in double.
inline std::vector<std::vector<double>> ReferenceLogits(const TinyModel& m,
                                                        const std::vector<int32_t>& tokens) {
  const ModelConfig& c = m.config;
  const int d = c.hidden_size, hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  const int hd = c.head_dim, f = c.intermediate_size, g = hq / hkv;
  const int n = static_cast<int>(tokens.size());
  auto w = [&](const std::string& name) -> const std::vector<float>& { return m.tensors.at(name); };
  auto matvec = [](const std::vector<float>& mat, const std::vector<double>& x, int rows) {
    const int cols = static_cast<int>(x.size());
    std::vector<double> y(static_cast<size_t>(rows), 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int k = 0; k < cols; ++k) y[r] += static_cast<double>(mat[r * cols + k]) * x[k];
    }
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const std::vector<float>& weight) {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / x.size() + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * weight[i];
    return y;
  };
  // Rotate-half RoPE on one head vector at position pos.
  auto rope = [&](std::vector<double>& x, int offset, int pos) {
    const int half = hd / 2;
    std::vector<double> out(static_cast<size_t>(hd));
    for (int i = 0; i < hd; ++i) {
      const int fi = i % half;
      const double angle = pos / std::pow(c.rope_theta, 2.0 * fi / hd);
      const double rot = i < half ? -x[offset + i + half] : x[offset + i - half];
      out[i] = x[offset + i] * std::cos(angle) + rot * std::sin(angle);
    }
    for (int i = 0; i < hd; ++i) x[offset + i] = out[i];
  };
  std::vector<std::vector<double>> h(static_cast<size_t>(n), std::vector<double>(d));
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < d; ++i) h[t][i] = w("model.embed_tokens.weight")[tokens[t] * d + i];
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      const auto a = rms(h[t], w(p + "input_layernorm.weight"));
      q[t] = matvec(w(p + "self_attn.q_proj.weight"), a, hq * hd);
      k[t] = matvec(w(p + "self_attn.k_proj.weight"), a, hkv * hd);
      v[t] = matvec(w(p + "self_attn.v_proj.weight"), a, hkv * hd);
      for (int hh = 0; hh < hq; ++hh) rope(q[t], hh * hd, t);
      for (int hh = 0; hh < hkv; ++hh) rope(k[t], hh * hd, t);
    }
    for (int t = 0; t < n; ++t) {
      std::vector<double> attn(static_cast<size_t>(hq * hd), 0.0);
      for (int hh = 0; hh < hq; ++hh) {
        const int kvh = hh / g;
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int i = 0; i < hd; ++i) dot += q[t][hh * hd + i] * k[j][kvh * hd + i];
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0.0;
        for (auto& x : s) z += (x = std::exp(x - mx));
        for (int j = 0; j <= t; ++j) {
          for (int i = 0; i < hd; ++i) attn[hh * hd + i] += s[j] / z * v[j][kvh * hd + i];
        }
      }
      const auto o = matvec(w(p + "self_attn.o_proj.weight"), attn, d);
      for (int i = 0; i < d; ++i) h[t][i] += o[i];
      const auto a = rms(h[t], w(p + "post_attention_layernorm.weight"));
      const auto gate = matvec(w(p + "mlp.gate_proj.weight"), a, f);
      const auto up = matvec(w(p + "mlp.up_proj.weight"), a, f);
      std::vector<double> act(static_cast<size_t>(f));
      for (int i = 0; i < f; ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const auto down = matvec(w(p + "mlp.down_proj.weight"), act, d);
      for (int i = 0; i < d; ++i) h[t][i] += down[i];
    }
  }
  std::vector<std::vector<double>> logits(n);
  for (int t = 0; t < n; ++t) {
    logits[t] = matvec(w("lm_head.weight"), rms(h[t], w("model.norm.weight")), c.vocab_size);
  }
  return logits;
}

// A fresh directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             ("readkv_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
                .string();
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { kvgate::RemoveTree(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace readkv::model::testing
