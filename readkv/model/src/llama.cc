#include "llama_internal.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "kvgate/stats/random.h"
#include "readkv/model/errors.h"
#include "readkv/model/safetensors.h"

namespace readkv::model::internal {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

TensorDType StorageDType(const std::string& name) {
  if (name == "float32") return TensorDType::kF32;
  if (name == "bfloat16") return TensorDType::kBF16;
  if (name == "float16") return TensorDType::kF16;
  throw ModelFormatError("torch_dtype", "unsupported \"" + name + "\"");
}

torch::Tensor ToFloatTensor(const TensorEntry& entry, std::span<const uint8_t> data) {
  // Copy out of the mapping: offsets need not be aligned for the element type.
  torch::ScalarType type = torch::kFloat;
  switch (entry.dtype) {
    case TensorDType::kF32: type = torch::kFloat; break;
    case TensorDType::kBF16: type = torch::kBFloat16; break;
    case TensorDType::kF16: type = torch::kHalf; break;
    default:
      throw ModelFormatError(entry.name, "dtype " + TensorDTypeName(entry.dtype) +
                                             " is not a float type this runtime loads");
  }
  torch::Tensor t = torch::empty(entry.shape, torch::TensorOptions().dtype(type));
  if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size());
  return t.to(torch::kFloat);
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor*>> LlamaWeights::Named(
    const ModelConfig& config) {
  std::vector<std::pair<std::string, torch::Tensor*>> out;
  out.emplace_back("model.embed_tokens.weight", &embed);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = layers[i];
    out.emplace_back(p + "input_layernorm.weight", &l.attn_norm);
    out.emplace_back(p + "self_attn.q_proj.weight", &l.wq);
    out.emplace_back(p + "self_attn.k_proj.weight", &l.wk);
    out.emplace_back(p + "self_attn.v_proj.weight", &l.wv);
    out.emplace_back(p + "self_attn.o_proj.weight", &l.wo);
    out.emplace_back(p + "post_attention_layernorm.weight", &l.mlp_norm);
    out.emplace_back(p + "mlp.gate_proj.weight", &l.w_gate);
    out.emplace_back(p + "mlp.up_proj.weight", &l.w_up);
    out.emplace_back(p + "mlp.down_proj.weight", &l.w_down);
  }
  out.emplace_back("model.norm.weight", &final_norm);
  if (!config.tie_word_embeddings) out.emplace_back("lm_head.weight", &lm_head);
  return out;
}

std::vector<torch::Tensor> LlamaWeights::Parameters(const ModelConfig& config) {
  std::vector<torch::Tensor> out;
  for (auto& [name, t] : Named(config)) out.push_back(*t);
  return out;
}

LlamaWeights LlamaWeights::To(torch::Device device, torch::ScalarType dtype) const {
  auto conv = [&](const torch::Tensor& t) { return t.to(device, dtype).contiguous(); };
  LlamaWeights w;
  w.embed = conv(embed);
  for (const auto& l : layers) {
    w.layers.push_back({conv(l.attn_norm), conv(l.wq), conv(l.wk), conv(l.wv), conv(l.wo),
                        conv(l.mlp_norm), conv(l.w_gate), conv(l.w_up), conv(l.w_down)});
  }
  w.final_norm = conv(final_norm);
  w.lm_head = lm_head.is_same(embed) ? w.embed : conv(lm_head);
  return w;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedTensors(
    const ModelConfig& c) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, v = c.vocab_size;
  const int64_t q = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_key_value_heads} * c.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"model.embed_tokens.weight", {v, d}});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {d}});
    out.push_back({p + "self_attn.q_proj.weight", {q, d}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, d}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, d}});
    out.push_back({p + "self_attn.o_proj.weight", {d, q}});
    out.push_back({p + "post_attention_layernorm.weight", {d}});
    out.push_back({p + "mlp.gate_proj.weight", {f, d}});
    out.push_back({p + "mlp.up_proj.weight", {f, d}});
    out.push_back({p + "mlp.down_proj.weight", {d, f}});
  }
  out.push_back({"model.norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {v, d}});
  return out;
}

LlamaWeights LoadWeights(const std::string& path, const ModelConfig& config) {
  const SafetensorsFile file = SafetensorsFile::Open(path);
  const TensorDType want = StorageDType(config.torch_dtype);
  const auto expected = ExpectedTensors(config);
  for (const TensorEntry& e : file.tensors()) {
    bool known = false;
    for (const auto& [name, shape] : expected) known = known || name == e.name;
    if (!known && e.name.find("rotary_emb.inv_freq") == std::string::npos) {
      throw ModelFormatError(e.name, "unexpected tensor for this config (" +
                                         std::to_string(config.num_hidden_layers) + " layers" +
                                         (config.tie_word_embeddings ? ", tied embeddings" : "") +
                                         ")");
    }
  }
  std::map<std::string, torch::Tensor> loaded;
  for (const auto& [name, shape] : expected) {
    const TensorEntry* e = file.Find(name);
    if (e == nullptr) throw ModelFormatError(name, "missing from " + path);
    if (e->dtype != want) {
      throw ModelFormatError(name, "dtype " + TensorDTypeName(e->dtype) + ", config.json says " +
                                       config.torch_dtype + " (" + TensorDTypeName(want) + ")");
    }
    if (e->shape != shape) {
      throw ModelFormatError(name, "shape " + ShapeText(e->shape) + ", the config needs " +
                                       ShapeText(shape));
    }
    loaded[name] = ToFloatTensor(*e, file.Data(*e));
  }
  LlamaWeights w;
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (auto& [name, t] : w.Named(config)) *t = loaded.at(name);
  if (config.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

LlamaWeights InitWeights(const ModelConfig& c, uint64_t seed) {
  kvgate::stats::SplitMixRng rng(seed);
  auto normal = [&](std::vector<int64_t> shape, double sigma) {
    torch::Tensor t = torch::empty(shape, torch::kFloat);
    float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng.Normal() * sigma);
    return t;
  };
  const double sigma = 0.02;
  const double out_sigma = sigma / std::sqrt(2.0 * c.num_hidden_layers);
  LlamaWeights w;
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (auto& [name, t] : w.Named(c)) {
    std::vector<int64_t> shape;
    for (const auto& [n, s] : ExpectedTensors(c)) {
      if (n == name) shape = s;
    }
    if (shape.size() == 1) {
      *t = torch::ones(shape, torch::kFloat);
    } else if (name.find("o_proj") != std::string::npos ||
               name.find("down_proj") != std::string::npos) {
      *t = normal(shape, out_sigma);
    } else {
      *t = normal(shape, sigma);
    }
  }
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

void SaveWeights(const LlamaWeights& weights, const ModelConfig& config, const std::string& path,
                 const std::string& storage) {
  const TensorDType dtype = StorageDType(storage);
  const torch::ScalarType type = dtype == TensorDType::kF32    ? torch::kFloat
                                 : dtype == TensorDType::kBF16 ? torch::kBFloat16
                                                               : torch::kHalf;
  LlamaWeights copy = weights;
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> out;
  for (auto& [name, t] : copy.Named(config)) {
    torch::Tensor c = t->detach().to(torch::kCPU).to(type).contiguous();
    keep.push_back(c);
    TensorToWrite w;
    w.name = name;
    w.dtype = dtype;
    w.shape = c.sizes().vec();
    w.data = {static_cast<const uint8_t*>(c.data_ptr()), static_cast<size_t>(c.nbytes())};
    out.push_back(w);
  }
  WriteSafetensors(path, out, {{"format", "pt"}, {"producer", "kvgate train"}});
}

RopeTables MakeRope(const ModelConfig& c, torch::Device device) {
  // Angles in double, as exact as fp32 tables can hold at 8K positions (HF computes them in fp32,
  // which differs by < 1e-3 rad at the last position).
  const int64_t n = c.max_position_embeddings, hd = c.head_dim, half = hd / 2;
  torch::Tensor cos = torch::empty({n, hd}, torch::kFloat);
  torch::Tensor sin = torch::empty({n, hd}, torch::kFloat);
  float* pc = cos.data_ptr<float>();
  float* ps = sin.data_ptr<float>();
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / hd);
    for (int64_t pos = 0; pos < n; ++pos) {
      const double a = static_cast<double>(pos) * inv_freq;
      pc[pos * hd + i] = pc[pos * hd + i + half] = static_cast<float>(std::cos(a));
      ps[pos * hd + i] = ps[pos * hd + i + half] = static_cast<float>(std::sin(a));
    }
  }
  return {cos.to(device), sin.to(device)};
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  torch::Tensor xf = x.to(torch::kFloat);
  torch::Tensor r = torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (xf * r * weight.to(torch::kFloat)).to(x.scalar_type());
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  torch::Tensor xf = x.to(torch::kFloat);
  const int64_t half = x.size(-1) / 2;
  torch::Tensor rotated = torch::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * cos + rotated * sin).to(x.scalar_type());
}

torch::Tensor Mlp(const LayerWeights& w, const torch::Tensor& x) {
  torch::Tensor g = torch::matmul(x, w.w_gate.t());
  torch::Tensor u = torch::matmul(x, w.w_up.t());
  return torch::matmul(torch::silu(g) * u, w.w_down.t());
}

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t past) {
  const int64_t n = q.size(0), hq = q.size(1), hd = q.size(2);
  const int64_t hkv = k.size(1), g = hq / hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // [Hq, total, hd]: query head h reads KV head h / g.
  torch::Tensor kh = k.permute({1, 0, 2}).repeat_interleave(g, 0);
  torch::Tensor vh = v.permute({1, 0, 2}).repeat_interleave(g, 0);
#if TORCH_VERSION_MAJOR >= 2
  // On CUDA, torch's fused attention (flash or memory-efficient, by dtype and mask): the chunked
  // loop below is ~8 launches per 128 queries and a [Hq, 128, total] fp32 score block each, tuned
  // for the CPU's allocator. Without a past the mask is SDPA's causal one; with a past (a chunked
  // prompt, or a prompt over decoded codec K/V) query i, at position past + i, sees keys
  // 0..past + i: the lower triangle of [n, past + n] shifted right by past. SDPA's default scale
  // is 1 / sqrt(hd), as here; softmax is in fp32 inside the kernel for every dtype.
  if (q.is_cuda()) {
    const torch::Tensor qh = q.permute({1, 0, 2}).unsqueeze(0);
    torch::Tensor out;
    if (past == 0) {
      out = at::scaled_dot_product_attention(qh, kh.unsqueeze(0), vh.unsqueeze(0), {}, 0.0,
                                             /*is_causal=*/true);
    } else {
      const torch::Tensor visible =
          torch::ones({n, past + n}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
              .tril(past);
      out = at::scaled_dot_product_attention(qh, kh.unsqueeze(0), vh.unsqueeze(0), visible, 0.0,
                                             /*is_causal=*/false);
    }
    return out.squeeze(0).permute({1, 0, 2}).contiguous();  // [n, Hq, hd]
  }
#endif
  torch::Tensor qh = (q * scale).permute({1, 0, 2});  // [Hq, n, hd], pre-scaled
  // Chunks of queries keep the score block small: [Hq, chunk, total] fp32 is 16 MiB for 4 heads
  // at 8K keys, under glibc's largest mmap threshold, so the allocator reuses it instead of
  // mapping and faulting in fresh pages for every chunk (TuneCpuAllocator).
  const int64_t chunk = 128;
  // Within a chunk only its own diagonal block needs the causal mask: query i of the chunk sees
  // the chunk's keys 0..i; every earlier key is visible to all of its queries.
  const torch::Tensor future =
      torch::ones({chunk, chunk}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
          .triu(1);
  std::vector<torch::Tensor> outs;
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t m = std::min(chunk, n - s);
    const int64_t visible = past + s + m;  // keys any query of this chunk may see
    torch::Tensor scores =
        torch::matmul(qh.narrow(1, s, m), kh.narrow(1, 0, visible).transpose(1, 2))
            .to(torch::kFloat);  // [Hq, m, visible]
    scores.narrow(2, past + s, m)
        .masked_fill_(future.narrow(0, 0, m).narrow(1, 0, m),
                      -std::numeric_limits<float>::infinity());
    torch::Tensor p = torch::softmax(scores, -1).to(v.scalar_type());
    outs.push_back(torch::matmul(p, vh.narrow(1, 0, visible)));  // [Hq, m, hd]
  }
  return torch::cat(outs, 1).permute({1, 0, 2}).contiguous();  // [n, Hq, hd]
}

torch::Tensor FullForward(const LlamaWeights& w, const ModelConfig& c, const RopeTables& rope,
                          const torch::Tensor& tokens, torch::ScalarType compute) {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  const int64_t hq = c.num_attention_heads, hkv = c.num_key_value_heads, hd = c.head_dim;
  torch::Tensor h = w.embed.index_select(0, tokens.reshape({-1})).reshape({b, t, -1});
  h = h.to(torch::kFloat);  // residual stream in fp32
  torch::Tensor cos = rope.cos.narrow(0, 0, t).view({1, t, 1, hd});
  torch::Tensor sin = rope.sin.narrow(0, 0, t).view({1, t, 1, hd});
  for (const LayerWeights& lw : w.layers) {
    torch::Tensor a = RmsNorm(h, lw.attn_norm, c.rms_norm_eps).to(compute);
    torch::Tensor q = torch::matmul(a, lw.wq.to(compute).t()).view({b, t, hq, hd});
    torch::Tensor k = torch::matmul(a, lw.wk.to(compute).t()).view({b, t, hkv, hd});
    torch::Tensor v = torch::matmul(a, lw.wv.to(compute).t()).view({b, t, hkv, hd});
    q = ApplyRope(q, cos, sin);
    k = ApplyRope(k, cos, sin);
    torch::Tensor attn;
#if TORCH_VERSION_MAJOR >= 2
    if (tokens.is_cuda()) {
      const int64_t g = hq / hkv;
      torch::Tensor qt = q.transpose(1, 2);
      torch::Tensor kt = k.transpose(1, 2).repeat_interleave(g, 1);
      torch::Tensor vt = v.transpose(1, 2).repeat_interleave(g, 1);
      attn = at::scaled_dot_product_attention(qt, kt, vt, {}, 0.0, /*is_causal=*/true)
                 .transpose(1, 2)
                 .reshape({b, t, hq * hd});
    }
#endif
    if (!attn.defined()) {
      std::vector<torch::Tensor> rows;
      for (int64_t i = 0; i < b; ++i) rows.push_back(CausalAttention(q[i], k[i], v[i], 0));
      attn = torch::stack(rows, 0).reshape({b, t, hq * hd});
    }
    h = h + torch::matmul(attn, lw.wo.to(compute).t()).to(torch::kFloat);
    torch::Tensor m = RmsNorm(h, lw.mlp_norm, c.rms_norm_eps).to(compute);
    LayerWeights cw{lw.attn_norm, lw.wq, lw.wk, lw.wv, lw.wo, lw.mlp_norm,
                    lw.w_gate.to(compute), lw.w_up.to(compute), lw.w_down.to(compute)};
    h = h + Mlp(cw, m).to(torch::kFloat);
  }
  torch::Tensor out = RmsNorm(h, w.final_norm, c.rms_norm_eps).to(compute);
  return torch::matmul(out, w.lm_head.to(compute).t()).to(torch::kFloat);
}

torch::ScalarType ParseDtype(const std::string& name, const char* field) {
  if (name == "float32") return torch::kFloat;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  throw std::invalid_argument(std::string(field) + ": must be float32, bfloat16 or float16, got \"" +
                              name + "\"");
}

torch::Device ParseDevice(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda" || name.rfind("cuda:", 0) == 0) {
    if (!torch::cuda::is_available()) {
      throw std::invalid_argument("device: \"" + name + "\" requested but CUDA is not available");
    }
    return torch::Device(name);
  }
  throw std::invalid_argument("device: must be cpu, cuda or cuda:N, got \"" + name + "\"");
}

}  // namespace readkv::model::internal
