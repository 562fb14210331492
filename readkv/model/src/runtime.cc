#include "readkv/model/runtime.h"

#include <malloc.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "cuda_graph.h"
#include "gpu_kv_cache.h"
#include "llama_internal.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/bitplanes.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/readers.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/tile_planes.h"
#include "readkv/codec/transform.h"
#include "readkv/model/errors.h"
#include "readkv/model/model_calibration.h"

namespace readkv::model {
namespace {

using internal::LayerWeights;

constexpr int64_t kDenseInitialCapacity = 256;

bool IsCodecBackend(const std::string& kind) { return kind == "fp8" || kind == "readkv"; }

// fp8 and readkv on a CUDA device run on readkv::cuda's kernels (gpu_kv_cache.h).
bool UsesGpuKv(const RuntimeOptions& options) {
  return options.device != "cpu" && IsCodecBackend(options.kv.kind);
}

// The per-request ReadKV policy: request fields override the server defaults. A request that
// changes R without giving a split gets the equal split (the server's default split was chosen
// for the default R and need not average to another one).
codec::ReadPolicy ResolvePolicy(const KvCacheOptions& kv, const engine::ReadPolicy& request) {
  codec::ReadPolicy p;
  p.reader = codec::ParseReaderKind(request.reader.value_or(kv.reader));
  p.read_bits = request.read_bits.value_or(kv.read_bits);
  std::optional<double> rk, rv;
  if (request.key_bits || request.value_bits) {
    rk = request.key_bits;
    rv = request.value_bits;
  } else if (!request.read_bits) {
    rk = kv.key_bits;
    rv = kv.value_bits;
  }
  if (rk && !rv) rv = 2.0 * p.read_bits - *rk;
  if (rv && !rk) rk = 2.0 * p.read_bits - *rv;
  if (rk && rv) {
    p.key_bits = *rk;
    p.value_bits = *rv;
  }
  return p;
}

}  // namespace

void ValidateRuntimeOptions(const RuntimeOptions& options) {
  const KvCacheOptions& kv = options.kv;
  if (kv.kind != "dense" && !IsCodecBackend(kv.kind)) {
    throw std::invalid_argument("kv: must be dense, fp8 or readkv, got \"" + kv.kind + "\"");
  }
  internal::ParseDtype(options.dtype, "dtype");
  if (options.device != "cpu" && options.device != "cuda" &&
      options.device.rfind("cuda:", 0) != 0) {
    throw std::invalid_argument("device: must be cpu, cuda or cuda:N, got \"" + options.device +
                                "\"");
  }
  if (options.kv_capacity_bytes <= 0) {
    throw std::invalid_argument("kv_capacity_bytes: must be positive");
  }
  if (kv.kind == "readkv") {
    // MakeReaderPlan checks store_bits, read_bits, reader and the split, naming the field.
    const codec::ReadPolicy policy = ResolvePolicy(kv, engine::ReadPolicy{});
    codec::MakeReaderPlan(policy, kv.store_bits);
    if (UsesGpuKv(options) && policy.reader != codec::ReaderKind::kConstrained) {
      throw std::invalid_argument(
          "reader: on a CUDA device ReadKV runs the constrained reader only (the flexible reader "
          "has no kernel); use --reader constrained or --device cpu");
    }
    // Checks the cap's range and the threshold against the tree, naming the field.
    const codec::LloydTree tree(kv.store_bits);
    codec::ResolveOutlierOptions({kv.outlier_cap, kv.outlier_threshold}, tree, 8);
    if (!kv.fp8_layers.empty() && (UsesGpuKv(options) || !options.prefix_cache.directory.empty())) {
      throw std::invalid_argument(
          "fp8_layers: FP8 layers inside a ReadKV cache run on the CPU without a prefix cache");
    }
    if (UsesGpuKv(options) && kv.outlier_cap > 0) {
      throw std::invalid_argument(
          "outlier_cap: the GPU ReadKV kernels have no outlier correction yet, so a cache with "
          "outlier lists would be read without them; use --outlier-cap 0 or --device cpu");
    }
  }
  if (!options.prefix_cache.directory.empty()) {
    if (kv.kind != "readkv") {
      throw std::invalid_argument(
          "cache_dir: the persistent prefix cache stores ReadKV objects and needs --kv readkv, "
          "got \"" + kv.kind + "\"");
    }
    if (kv.prefill != PrefillAttention::kDense) {
      throw std::invalid_argument("cache_dir: the persistent prefix cache needs --prefill dense");
    }
    if (UsesGpuKv(options)) {
      throw std::invalid_argument(
          "cache_dir: the persistent prefix cache runs with --device cpu only (its objects are "
          "restored into the CPU codec caches)");
    }
  }
  if (options.prefix_cache.max_bytes < 0) {
    throw std::invalid_argument("cache_max_bytes: must be >= 0");
  }
  if (options.cuda_graphs != "auto" && options.cuda_graphs != "on" &&
      options.cuda_graphs != "off") {
    throw std::invalid_argument("cuda_graphs: must be auto, on or off, got \"" +
                                options.cuda_graphs + "\"");
  }
  if (options.cuda_graphs == "on" && !UsesGpuKv(options)) {
    throw std::invalid_argument(
        "cuda_graphs: graphs replay the decode steps of fp8/readkv on a CUDA device; \"on\" "
        "needs --device cuda and --kv fp8 or readkv");
  }
}

struct LlamaDecodeModel::Impl {
  // The KV state of one sequence: dense tensors per layer, or one codec cache per layer.
  struct Sequence {
    uint64_t id = 0;
    int64_t length = 0;
    std::vector<torch::Tensor> keys, values;  // dense: [capacity, Hkv, hd] per layer
    std::vector<std::unique_ptr<codec::LayerKvCache>> caches;  // fp8 / readkv
    // A prompt fed in chunks (engine::SequenceStep::logits_wanted): true between its first chunk
    // and its last; fp8 / readkv keep the exact K/V of its positions so far ([length, Hkv, hd],
    // K and V per layer), which the next chunk attends to as a whole-prompt prefill would.
    bool prompt_open = false;
    std::vector<torch::Tensor> prompt_past;
  };

  ModelConfig config;
  RuntimeOptions options;
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat;
  internal::LlamaWeights weights;
  // Per layer, wq, wk and wv stacked [(Hq + 2 Hkv) hd, D]: one projection matmul instead of
  // three. On the H200 the three small fp32 matmuls of a 16-row decode step went to cuBLAS
  // kernels of one or two thread blocks (38-64 us each under ncu, 2026-11-30;
  // BENCHMARKS.md, "The served decode step").
  std::vector<torch::Tensor> wqkv;
  internal::RopeTables rope;
  std::string digest;
  std::shared_ptr<const codec::Calibration> calibration;
  std::string calibration_digest;
  std::shared_ptr<const codec::LloydTree> codebook;
  std::map<uint64_t, Sequence> sequences;
  std::map<uint64_t, codec::ReadPolicy> policies;
  engine::KvLedgers totals;        // logical/physical/workspace over all calls
  double retired_encode_seconds = 0.0;
  KvObserver observer;
  // Persistent prefix cache (runtime.h); null when off.
  codec::CacheIdentity identity;
  std::unique_ptr<PrefixCacheStore> prefix_store;
  // fp8 / readkv on a CUDA device (gpu_kv_cache.h); null otherwise. Sequences then hold no caches.
  std::unique_ptr<internal::GpuKvCache> gpu;
  // Decode steps through CUDA graphs (RuntimeOptions::cuda_graphs), by batch size.
  bool use_graphs = false;
  std::map<int64_t, std::unique_ptr<internal::DecodeStepGraphs>> step_graphs;
  // Sign-vector transforms of every (layer, head), index layer * Hkv + head (prefix cache only).
  std::vector<codec::HadamardTransform> key_transforms, value_transforms;

  int hq() const { return config.num_attention_heads; }
  int hkv() const { return config.num_key_value_heads; }
  int hd() const { return config.head_dim; }
  int64_t ElementBytes() const { return static_cast<int64_t>(c10::elementSize(dtype)); }

  Sequence& Get(uint64_t id) {
    auto it = sequences.find(id);
    if (it == sequences.end()) {
      throw std::invalid_argument("sequence_id: " + std::to_string(id) + " is not live");
    }
    return it->second;
  }

  Sequence MakeSequence(const codec::ReadPolicy& policy) const {
    Sequence s;
    const int layers = config.num_hidden_layers;
    if (options.kv.kind == "dense") {
      for (int l = 0; l < layers; ++l) {
        auto opts = torch::TensorOptions().dtype(dtype).device(device);
        s.keys.push_back(torch::empty({kDenseInitialCapacity, hkv(), hd()}, opts));
        s.values.push_back(torch::empty({kDenseInitialCapacity, hkv(), hd()}, opts));
      }
      return s;
    }
    if (gpu) return s;
    for (int l = 0; l < layers; ++l) {
      codec::LayerCacheConfig c;
      const bool fp8_layer = std::find(options.kv.fp8_layers.begin(), options.kv.fp8_layers.end(),
                                       l) != options.kv.fp8_layers.end();
      c.backend = options.kv.kind == "fp8" || fp8_layer ? codec::KvBackend::kFp8
                                                        : codec::KvBackend::kReadKv;
      c.geometry = {hq(), hkv(), hd()};
      c.calibration = calibration;
      c.layer = l;
      c.fp8_scale = options.kv.fp8_scale;
      c.store_bits = options.kv.store_bits;
      c.policy = policy;
      c.codebook = codebook;
      c.outliers = {options.kv.outlier_cap, options.kv.outlier_threshold};
      s.caches.push_back(codec::MakeLayerKvCache(c));
    }
    return s;
  }

  void Observe(int layer, const torch::Tensor& k, const torch::Tensor& v) {
    if (!observer) return;
    torch::Tensor kc = k.to(torch::kCPU, torch::kFloat).contiguous();  // [n, Hkv, hd]
    torch::Tensor vc = v.to(torch::kCPU, torch::kFloat).contiguous();
    const float* kp = kc.data_ptr<float>();
    const float* vp = vc.data_ptr<float>();
    const int64_t n = kc.size(0), d = hd();
    for (int64_t i = 0; i < n; ++i) {
      for (int h = 0; h < hkv(); ++h) {
        const int64_t off = (i * hkv() + h) * d;
        observer(layer, h, {kp + off, static_cast<size_t>(d)}, {vp + off, static_cast<size_t>(d)});
      }
    }
  }

  // Appends n tokens' K/V ([n, Hkv, hd]) of one layer at positions [s.length, s.length + n).
  void Append(Sequence& s, int layer, const torch::Tensor& k, const torch::Tensor& v) {
    Observe(layer, k, v);
    const int64_t n = k.size(0);
    if (options.kv.kind == "dense") {
      torch::Tensor& kb = s.keys[static_cast<size_t>(layer)];
      torch::Tensor& vb = s.values[static_cast<size_t>(layer)];
      const int64_t need = s.length + n;
      if (need > kb.size(0)) {
        const int64_t cap = std::max(need, 2 * kb.size(0));
        auto opts = torch::TensorOptions().dtype(dtype).device(device);
        torch::Tensor nk = torch::empty({cap, hkv(), hd()}, opts);
        torch::Tensor nv = torch::empty({cap, hkv(), hd()}, opts);
        nk.narrow(0, 0, s.length).copy_(kb.narrow(0, 0, s.length));
        nv.narrow(0, 0, s.length).copy_(vb.narrow(0, 0, s.length));
        kb = nk;
        vb = nv;
      }
      kb.narrow(0, s.length, n).copy_(k);
      vb.narrow(0, s.length, n).copy_(v);
      return;
    }
    torch::Tensor kc = k.to(torch::kCPU, torch::kFloat).contiguous();
    torch::Tensor vc = v.to(torch::kCPU, torch::kFloat).contiguous();
    const auto count = static_cast<size_t>(kc.numel());
    s.caches[static_cast<size_t>(layer)]->AppendTokens({kc.data_ptr<float>(), count},
                                                        {vc.data_ptr<float>(), count});
  }

  // Decode attention of the newest token (already appended): q [Hq, hd] -> [Hq, hd].
  torch::Tensor Attend(Sequence& s, int layer, const torch::Tensor& q, int64_t tokens) {
    if (options.kv.kind == "dense") {
      const int64_t g = hq() / hkv();
      torch::Tensor k = s.keys[static_cast<size_t>(layer)].narrow(0, 0, tokens);
      torch::Tensor v = s.values[static_cast<size_t>(layer)].narrow(0, 0, tokens);
      torch::Tensor scores =
          torch::matmul(q.view({hkv(), g, hd()}), k.permute({1, 2, 0})).to(torch::kFloat) /
          std::sqrt(static_cast<double>(hd()));  // [Hkv, g, T]
      torch::Tensor p = torch::softmax(scores, -1).to(dtype);
      torch::Tensor out = torch::matmul(p, v.permute({1, 0, 2}));  // [Hkv, g, hd]
      // Ledgers of this exact-attention call, in the codec's accounting terms.
      const int64_t es = ElementBytes();
      const int64_t payload = 2 * tokens * hkv() * hd() * es;
      const int64_t scores_bytes = int64_t{hq()} * tokens * 4;
      totals.logical_read_bytes += payload;
      totals.physical_traffic_bytes +=
          payload + 2 * int64_t{hq()} * hd() * es + 4 * scores_bytes;  // q, out; logits+probs w/r
      totals.workspace_peak_bytes = std::max(totals.workspace_peak_bytes, 2 * scores_bytes);
      return out.reshape({hq(), hd()});
    }
    torch::Tensor qc = q.to(torch::kCPU, torch::kFloat).contiguous();
    std::vector<float> out(static_cast<size_t>(hq()) * hd());
    const codec::AttentionLedgers led = s.caches[static_cast<size_t>(layer)]->Attend(
        {qc.data_ptr<float>(), static_cast<size_t>(qc.numel())}, out);
    totals.logical_read_bytes += led.logical.Bytes();
    totals.outlier_read_bytes += led.logical.outlier_bits / 8;
    totals.physical_traffic_bytes += led.physical.Total();
    totals.workspace_peak_bytes = std::max(totals.workspace_peak_bytes, led.workspace_peak_bytes);
    return torch::from_blob(out.data(), {hq(), hd()}, torch::kFloat).clone().to(device, dtype);
  }

  torch::Tensor Embed(std::span<const int32_t> tokens) {
    std::vector<int64_t> ids(tokens.begin(), tokens.end());
    torch::Tensor t = torch::from_blob(ids.data(), {static_cast<int64_t>(ids.size())}, torch::kLong)
                          .clone()
                          .to(device);
    return weights.embed.index_select(0, t);  // [n, D]
  }

  // q, k (RoPE applied with cos/sin) and v of the rows of h.
  // v is a view into the layer's one projection output (its consumers copy what they keep).
  void Projections(int layer, const torch::Tensor& h, const torch::Tensor& cos,
                   const torch::Tensor& sin, torch::Tensor& q, torch::Tensor& k, torch::Tensor& v) {
    const LayerWeights& lw = weights.layers[static_cast<size_t>(layer)];
    torch::Tensor a = internal::RmsNorm(h, lw.attn_norm, config.rms_norm_eps);
    const int64_t n = h.size(0), qw = hq() * hd(), kw = hkv() * hd();
    const torch::Tensor qkv = torch::matmul(a, wqkv[static_cast<size_t>(layer)].t());
    q = internal::ApplyRope(qkv.narrow(1, 0, qw).view({n, hq(), hd()}), cos, sin);
    k = internal::ApplyRope(qkv.narrow(1, qw, kw).view({n, hkv(), hd()}), cos, sin);
    v = qkv.narrow(1, qw + kw, kw).view({n, hkv(), hd()});
  }

  torch::Tensor Finish(const LayerWeights& lw, const torch::Tensor& h, const torch::Tensor& attn) {
    const int64_t n = h.size(0);
    torch::Tensor x = h + torch::matmul(attn.reshape({n, hq() * hd()}), lw.wo.t());
    return x + internal::Mlp(lw, internal::RmsNorm(x, lw.mlp_norm, config.rms_norm_eps));
  }

  // Prompt tokens attending exactly within themselves (and over a dense past, or over
  // `decoded_past`: the K/V of the positions before them, decoded from a codec cache or kept
  // exact by a chunked prompt, [past, Hkv, hd] per layer), K/V written into the cache. Used for
  // all but the last token of a prompt. keep_past: this call's K/V are appended to decoded_past.
  void Prefill(Sequence& s, std::span<const int32_t> tokens,
               std::vector<torch::Tensor>* decoded_past = nullptr, bool keep_past = false) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t past = s.length;
    std::optional<internal::GpuKvCache::Step> step;
    if (gpu) step = gpu->Begin({&s.id, 1}, {&past, 1}, {&n, 1});
    torch::Tensor h = Embed(tokens);
    torch::Tensor cos = rope.cos.narrow(0, past, n).unsqueeze(1);  // [n, 1, hd]
    torch::Tensor sin = rope.sin.narrow(0, past, n).unsqueeze(1);
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      const LayerWeights& lw = weights.layers[static_cast<size_t>(l)];
      torch::Tensor q, k, v;
      Projections(l, h, cos, sin, q, k, v);
      if (gpu) {
        Observe(l, k, v);
        gpu->Append(*step, l, k, v);
      } else {
        Append(s, l, k, v);
      }
      torch::Tensor attn;
      if (options.kv.kind == "dense") {
        attn = internal::CausalAttention(q, s.keys[static_cast<size_t>(l)].narrow(0, 0, past + n),
                                         s.values[static_cast<size_t>(l)].narrow(0, 0, past + n),
                                         past);
      } else if (decoded_past != nullptr && past > 0) {
        torch::Tensor& pk = (*decoded_past)[2 * static_cast<size_t>(l)];
        torch::Tensor& pv = (*decoded_past)[2 * static_cast<size_t>(l) + 1];
        torch::Tensor all_k = torch::cat({pk, k}, 0), all_v = torch::cat({pv, v}, 0);
        attn = internal::CausalAttention(q, all_k, all_v, past);
        if (keep_past) {
          pk = all_k;
          pv = all_v;
        }
      } else {
        attn = internal::CausalAttention(q, k, v, 0);  // past == 0 here (see Forward)
        if (keep_past && decoded_past != nullptr) {
          (*decoded_past)[2 * static_cast<size_t>(l)] = k;
          (*decoded_past)[2 * static_cast<size_t>(l) + 1] = v;
        }
      }
      h = Finish(lw, h, attn);
    }
    s.length += n;
  }

  // One token for each sequence, batched through the weights; attention per sequence through
  // its backend. Returns logits [B, V] fp32 on the CPU.
  torch::Tensor Decode(const std::vector<Sequence*>& seqs, std::span<const int32_t> tokens) {
    const auto b = static_cast<int64_t>(seqs.size());
    std::vector<int64_t> pos;
    for (Sequence* s : seqs) pos.push_back(s->length);
    torch::Tensor pos_t =
        torch::from_blob(pos.data(), {b}, torch::kLong).clone().to(device);
    torch::Tensor cos = rope.cos.index_select(0, pos_t).unsqueeze(1);  // [B, 1, hd]
    torch::Tensor sin = rope.sin.index_select(0, pos_t).unsqueeze(1);
    torch::Tensor h = Embed(tokens);
    if (gpu) return DecodeOnGpu(seqs, h, cos, sin);
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      const LayerWeights& lw = weights.layers[static_cast<size_t>(l)];
      torch::Tensor q, k, v;
      Projections(l, h, cos, sin, q, k, v);
      std::vector<torch::Tensor> outs;
      for (int64_t i = 0; i < b; ++i) {
        Sequence& s = *seqs[static_cast<size_t>(i)];
        Append(s, l, k.narrow(0, i, 1), v.narrow(0, i, 1));
        outs.push_back(Attend(s, l, q[i], s.length + 1));
      }
      h = Finish(lw, h, torch::stack(outs, 0));
    }
    for (Sequence* s : seqs) s->length += 1;
    return Logits(h);
  }

  // Logits [B, V] fp32 of the last residual stream: on the device, and copied to the CPU.
  torch::Tensor DeviceLogits(const torch::Tensor& h) {
    torch::Tensor x = internal::RmsNorm(h, weights.final_norm, config.rms_norm_eps);
    return torch::matmul(x, weights.lm_head.t()).to(torch::kFloat);
  }
  torch::Tensor Logits(const torch::Tensor& h) {
    return DeviceLogits(h).to(torch::kCPU).contiguous();
  }

  // Decode on the CUDA KV backends: every layer appends the step's tokens and attends for all
  // sequences in one batched call each.
  torch::Tensor DecodeOnGpu(const std::vector<Sequence*>& seqs, torch::Tensor h,
                            const torch::Tensor& cos, const torch::Tensor& sin) {
    std::vector<uint64_t> ids;
    std::vector<int64_t> starts, counts(seqs.size(), 1);
    for (const Sequence* s : seqs) {
      ids.push_back(s->id);
      starts.push_back(s->length);
    }
    const internal::GpuKvCache::Step step = gpu->Begin(ids, starts, counts);
    if (use_graphs && !observer) {
      torch::Tensor logits = DecodeThroughGraphs(step, h, cos, sin);
      for (Sequence* s : seqs) s->length += 1;
      return logits;
    }
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      const LayerWeights& lw = weights.layers[static_cast<size_t>(l)];
      torch::Tensor q, k, v;
      Projections(l, h, cos, sin, q, k, v);
      Observe(l, k, v);
      gpu->Append(step, l, k, v);
      h = Finish(lw, h, gpu->Attend(step, l, q).to(dtype));
    }
    for (Sequence* s : seqs) s->length += 1;
    return Logits(h);
  }

  // A decode step through CUDA graphs of its dense ops (cuda_graph.h), captured at the first
  // step of each batch size.
  torch::Tensor DecodeThroughGraphs(const internal::GpuKvCache::Step& step,
                                    const torch::Tensor& h, const torch::Tensor& cos,
                                    const torch::Tensor& sin) {
    std::unique_ptr<internal::DecodeStepGraphs>& graphs = step_graphs[h.size(0)];
    if (!graphs) {
      internal::DecodeStepGraphs::LayerOps ops;
      ops.project = [this](int l, const torch::Tensor& x, const torch::Tensor& c,
                           const torch::Tensor& s, torch::Tensor& q, torch::Tensor& k,
                           torch::Tensor& v) {
        Projections(l, x, c, s, q, k, v);
      };
      ops.finish = [this](int l, const torch::Tensor& x, const torch::Tensor& attn) {
        return Finish(weights.layers[static_cast<size_t>(l)], x, attn);
      };
      ops.logits = [this](const torch::Tensor& x) { return DeviceLogits(x); };
      graphs = std::make_unique<internal::DecodeStepGraphs>(
          config.num_hidden_layers, h, cos, sin,
          torch::empty({h.size(0), hq(), hd()}, h.options()), std::move(ops));
    }
    return graphs
        ->Run(h, cos, sin,
              [&](int l, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
                gpu->Append(step, l, k, v);
                return gpu->Attend(step, l, q);
              })
        .to(torch::kCPU)
        .contiguous();
  }

  // ---- Persistent prefix cache (runtime.h) ----------------------------------------------------

  const codec::ReadKvLayerCache& ReadKvCache(const Sequence& s, int layer) const {
    return dynamic_cast<const codec::ReadKvLayerCache&>(*s.caches[static_cast<size_t>(layer)]);
  }
  codec::ReadKvLayerCache& ReadKvCache(Sequence& s, int layer) const {
    return dynamic_cast<codec::ReadKvLayerCache&>(*s.caches[static_cast<size_t>(layer)]);
  }

  // One object's blocks decoded at full depth W to post-RoPE K/V in the model's domain, appended
  // to decoded_past ([2l] keys, [2l + 1] values, [tokens, Hkv, hd] in the compute dtype).
  void AppendDecoded(const codec::CacheObject& object, std::vector<torch::Tensor>& decoded_past) {
    const int w = options.kv.store_bits, d = hd();
    const int64_t n = object.tokens;
    std::vector<float> z(static_cast<size_t>(d)), x(static_cast<size_t>(d));
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      torch::Tensor k = torch::empty({n, hkv(), d}, torch::kFloat);
      torch::Tensor v = torch::empty({n, hkv(), d}, torch::kFloat);
      for (int h = 0; h < hkv(); ++h) {
        const size_t index = static_cast<size_t>(l) * hkv() + h;
        // The object's layout is the server's (its identity says so); codes read the same.
        const bool tiles =
            identity.layout == codec::PlaneLayoutName(codec::PlaneLayout::kTiles);
        std::optional<codec::BitPlaneStore> planes;
        std::optional<codec::TilePlaneStore> tile_planes;
        if (tiles) {
          tile_planes.emplace(d, w).AppendBlockBytes(object.blocks[index], object.tokens);
        } else {
          planes.emplace(d, w).AppendBlockBytes(object.blocks[index], object.tokens);
        }
        const auto code = [&](int kind, int64_t i, int c) {
          if (tiles) {
            return kind == 0 ? tile_planes->KeyCode(i, c, w) : tile_planes->ValueCode(i, c, w);
          }
          return kind == 0 ? planes->KeyCode(i, c, w) : planes->ValueCode(i, c, w);
        };
        const bool has_outliers = !object.outliers.empty();
        codec::OutlierStore outliers(
            d, {identity.outlier_cap, static_cast<float>(identity.outlier_threshold)});
        if (has_outliers) outliers.AppendBlockBytes(object.outliers[index], object.tokens);
        for (int kind = 0; kind < 2; ++kind) {
          const auto mean = kind == 0 ? calibration->KeyMean(l, h) : calibration->ValueMean(l, h);
          const auto sd = kind == 0 ? calibration->KeyStd(l, h) : calibration->ValueStd(l, h);
          const codec::HadamardTransform& t =
              kind == 0 ? key_transforms[index] : value_transforms[index];
          float* out = (kind == 0 ? k : v).data_ptr<float>();
          for (int64_t i = 0; i < n; ++i) {
            for (int c = 0; c < d; ++c) {
              const auto ch = static_cast<size_t>(c);
              z[ch] = mean[ch] + sd[ch] * codebook->Decode(code(kind, i, c), w);
            }
            // Outliers at full depth: their fp16 z replaces the clipped centroid.
            if (has_outliers) {
              for (const auto& e : kind == 0 ? outliers.KeyEntries(0) : outliers.ValueEntries(0)) {
                if (e.token != i) continue;
                z[e.channel] += sd[e.channel] * codec::OutlierCorrection(*codebook, e.z_half, w);
              }
            }
            t.Inverse(z, x);
            std::copy(x.begin(), x.end(), out + (i * hkv() + h) * d);
          }
        }
      }
      for (int kind = 0; kind < 2; ++kind) {
        torch::Tensor part = (kind == 0 ? k : v).to(device, dtype);
        torch::Tensor& slot = decoded_past[2 * static_cast<size_t>(l) + kind];
        slot = slot.defined() ? torch::cat({slot, part}, 0) : part;
      }
    }
  }

  // Restores one accepted object into a sequence that ends at this block: its bytes go straight
  // into every layer's stores (ReadKvLayerCache::AppendEncodedBlock), nothing is decoded.
  void RestoreBlock(Sequence& s, const codec::CacheObject& object) {
    const auto heads = static_cast<size_t>(hkv());
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      const auto first = object.blocks.begin() + static_cast<std::ptrdiff_t>(l * heads);
      std::span<const std::vector<uint8_t>> outliers;
      if (!object.outliers.empty()) outliers = {&object.outliers[l * heads], heads};
      ReadKvCache(s, l).AppendEncodedBlock(std::span<const std::vector<uint8_t>>(&*first, heads),
                                           outliers);
    }
    s.length += object.tokens;
  }

  // The prompt head of an empty ReadKV sequence with the prefix cache on (runtime.h).
  void PrefillThroughPrefixCache(uint64_t sequence_id, Sequence& s,
                                 std::span<const int32_t> tokens) {
    const int64_t blocks = static_cast<int64_t>(tokens.size()) / codec::kBlockTokens;
    std::vector<torch::Tensor> decoded_past(2 * static_cast<size_t>(config.num_hidden_layers));
    int64_t hits = 0, stored = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * codec::kBlockTokens;
      const std::string digest =
          PrefixDigest(tokens.first(static_cast<size_t>(first + codec::kBlockTokens)));
      std::optional<codec::CacheObject> object =
          prefix_store->Load(digest, first, codec::kBlockTokens);
      if (object) {
        RestoreBlock(s, *object);
        ++hits;
      } else {
        Prefill(s, tokens.subspan(static_cast<size_t>(first), codec::kBlockTokens),
                &decoded_past);
        object = codec::CacheObject{identity, digest, first, codec::kBlockTokens, {}, {}};
        for (int l = 0; l < config.num_hidden_layers; ++l) {
          for (int h = 0; h < hkv(); ++h) {
            object->blocks.push_back(ReadKvCache(s, l).HeadBlockBytes(h, b));
            if (identity.outlier_cap > 0) {
              object->outliers.push_back(ReadKvCache(s, l).outliers(h).BlockBytes(b));
            }
          }
        }
        if (prefix_store->Store(*object)) ++stored;
      }
      AppendDecoded(*object, decoded_past);
    }
    const auto rest = tokens.subspan(static_cast<size_t>(blocks * codec::kBlockTokens));
    if (!rest.empty()) Prefill(s, rest, &decoded_past);
    if (options.prefix_cache.info) {
      options.prefix_cache.info("prefix cache: sequence " + std::to_string(sequence_id) + ": " +
                                std::to_string(blocks) + " prefix blocks, " +
                                std::to_string(hits) + " loaded, " +
                                std::to_string(blocks - hits) + " computed, " +
                                std::to_string(stored) + " stored");
    }
  }

  int64_t SequenceBytes(const Sequence& s) const {
    if (gpu) return gpu->SequenceBytes(s.id);
    if (options.kv.kind == "dense") {
      return 2 * int64_t{config.num_hidden_layers} * s.length * hkv() * hd() * ElementBytes();
    }
    int64_t total = 0;
    for (const auto& c : s.caches) total += c->CapacityBytes();
    return total;
  }
};

namespace {

// CPU inference frees and re-allocates tensors of a few MiB every layer (prefill score blocks,
// activations). glibc's defaults hand such blocks back to the kernel with munmap or trim the heap
// top at once, so every layer faults fresh pages in again: measured on an 8K-token prefill
// (fp8, one thread), 8.9 s of system time against 10 s of user time; 1.4 s with these settings.
// The threshold is glibc's largest (32 MiB on 64-bit); larger blocks are mapped as before.
void TuneCpuAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    mallopt(M_TOP_PAD, 64 << 20);
  });
}

}  // namespace

LlamaDecodeModel::LlamaDecodeModel(const std::string& model_dir, const RuntimeOptions& options)
    : impl_(std::make_unique<Impl>()) {
  ValidateRuntimeOptions(options);
  if (options.device == "cpu") TuneCpuAllocator();
  Impl& m = *impl_;
  m.options = options;
  m.config = ModelConfig::Load(model_dir);
  if (options.kv.kind != "dense" && (m.config.head_dim & (m.config.head_dim - 1)) != 0) {
    throw ModelFormatError("head_dim", "fp8/readkv caches need a power-of-two head_dim");
  }
  if (options.threads > 0) torch::set_num_threads(options.threads);
  m.device = internal::ParseDevice(options.device);
  m.dtype = internal::ParseDtype(options.dtype, "dtype");
  const std::string weights_path = model_dir + "/model.safetensors";
  m.digest = FileDigest(weights_path);
  m.weights = internal::LoadWeights(weights_path, m.config).To(m.device, m.dtype);
  for (LayerWeights& lw : m.weights.layers) {
    // The three projections become views into the stacked weight: one copy of each in memory.
    const torch::Tensor stacked = torch::cat({lw.wq, lw.wk, lw.wv}, 0).contiguous();
    const int64_t q_rows = lw.wq.size(0), kv_rows = lw.wk.size(0);
    lw.wq = stacked.narrow(0, 0, q_rows);
    lw.wk = stacked.narrow(0, q_rows, kv_rows);
    lw.wv = stacked.narrow(0, q_rows + kv_rows, kv_rows);
    m.wqkv.push_back(stacked);
  }
  m.rope = internal::MakeRope(m.config, m.device);
  if (IsCodecBackend(options.kv.kind)) {
    const std::string path = options.calibration_path.empty() ? model_dir + "/calibration.json"
                                                              : options.calibration_path;
    ModelCalibration cal = ModelCalibration::Load(path);
    if (cal.weights_digest != m.digest) {
      throw codec::IdentityMismatch("weights_digest", m.digest, cal.weights_digest);
    }
    auto require = [](const char* field, long long want, long long found) {
      if (want != found) {
        throw codec::IdentityMismatch(field, std::to_string(want), std::to_string(found));
      }
    };
    require("layers", m.config.num_hidden_layers, cal.calibration.layers);
    require("heads_kv", m.config.num_key_value_heads, cal.calibration.kv_heads);
    require("head_dim", m.config.head_dim, cal.calibration.head_dim);
    m.calibration = std::make_shared<const codec::Calibration>(cal.calibration);
    m.calibration_digest = cal.calibration.Digest();
    if (options.kv.kind == "readkv") {
      m.codebook = std::make_shared<const codec::LloydTree>(options.kv.store_bits);
    }
  }
  if (UsesGpuKv(options)) {
    internal::GpuKvConfig g;
    g.kind = options.kv.kind;
    g.layers = m.config.num_hidden_layers;
    g.heads_q = m.hq();
    g.heads_kv = m.hkv();
    g.head_dim = m.hd();
    g.device = m.device;
    g.calibration = m.calibration;
    g.fp8_scale = options.kv.fp8_scale;
    g.store_bits = options.kv.store_bits;
    m.gpu = std::make_unique<internal::GpuKvCache>(g);
    if (options.cuda_graphs == "on" && !internal::CudaGraph::Supported()) {
      throw std::invalid_argument(
          "cuda_graphs: \"on\", but this build's libtorch has no CUDA graphs (use auto or off)");
    }
    m.use_graphs = options.cuda_graphs != "off" && internal::CudaGraph::Supported();
  }
  m.identity = cache_identity();
  if (!options.prefix_cache.directory.empty()) {
    for (int l = 0; l < m.config.num_hidden_layers; ++l) {
      for (int h = 0; h < m.hkv(); ++h) {
        m.key_transforms.emplace_back(m.hd(), m.calibration->seeds.KeySeed(l, h));
        m.value_transforms.emplace_back(m.hd(), m.calibration->seeds.ValueSeed(l, h));
      }
    }
    m.prefix_store = std::make_unique<PrefixCacheStore>(
        PrefixCacheStoreOptions{options.prefix_cache.directory, options.prefix_cache.max_bytes,
                                options.prefix_cache.warn},
        m.identity);
  }
}

LlamaDecodeModel::~LlamaDecodeModel() = default;

std::string LlamaDecodeModel::model_id() const { return impl_->config.model_id; }
int LlamaDecodeModel::vocab_size() const { return impl_->config.vocab_size; }
int LlamaDecodeModel::max_context() const { return impl_->config.max_position_embeddings; }
int32_t LlamaDecodeModel::bos_token() const { return impl_->config.bos_token_id; }
int32_t LlamaDecodeModel::eos_token() const { return impl_->config.eos_token_id; }
std::string LlamaDecodeModel::kv_backend() const { return impl_->options.kv.kind; }
int64_t LlamaDecodeModel::kv_bytes_limit() const { return impl_->options.kv_capacity_bytes; }
const ModelConfig& LlamaDecodeModel::config() const { return impl_->config; }
const std::string& LlamaDecodeModel::weights_digest() const { return impl_->digest; }
void LlamaDecodeModel::set_kv_observer(KvObserver observer) {
  impl_->observer = std::move(observer);
}

int64_t LlamaDecodeModel::sequence_length(uint64_t sequence_id) const {
  auto it = impl_->sequences.find(sequence_id);
  if (it == impl_->sequences.end()) {
    throw std::invalid_argument("sequence_id: " + std::to_string(sequence_id) + " is not live");
  }
  return it->second.length;
}

codec::CacheIdentity LlamaDecodeModel::cache_identity() const {
  const Impl& m = *impl_;
  codec::CacheIdentity id;
  id.model_id = m.config.model_id;
  id.weights_digest = m.digest;
  id.layers = m.config.num_hidden_layers;
  id.heads_q = m.config.num_attention_heads;
  id.heads_kv = m.config.num_key_value_heads;
  id.head_dim = m.config.head_dim;
  id.rope_theta = m.config.rope_theta;
  if (m.calibration) {
    id.key_transform_seed = m.calibration->seeds.key;
    id.value_transform_seed = m.calibration->seeds.value;
    id.calibration_digest = m.calibration_digest;
  }
  if (m.options.kv.kind == "readkv") {
    id.codebook_id = codec::LloydTree::kCodebookId;
    id.codebook_version = codec::LloydTree::kCodebookVersion;
    id.store_bits = m.options.kv.store_bits;
    const codec::OutlierOptions resolved = codec::ResolveOutlierOptions(
        {m.options.kv.outlier_cap, m.options.kv.outlier_threshold}, *m.codebook, m.hd());
    id.outlier_cap = resolved.cap;
    id.outlier_threshold = resolved.threshold;
    id.layout = codec::PlaneLayoutName(
        codec::LayoutForReader(codec::ParseReaderKind(m.options.kv.reader)));
  }
  return id;
}

PrefixCacheCounters LlamaDecodeModel::prefix_cache_counters() const {
  return impl_->prefix_store ? impl_->prefix_store->counters() : PrefixCacheCounters{};
}

void LlamaDecodeModel::StartSequence(uint64_t sequence_id, const engine::ReadPolicy& policy) {
  Impl& m = *impl_;
  if (m.sequences.count(sequence_id) != 0) {
    throw std::invalid_argument("sequence_id: " + std::to_string(sequence_id) +
                                " is already live");
  }
  codec::ReadPolicy resolved;
  internal::GpuReadBits gpu_bits;
  if (m.options.kv.kind == "readkv") {
    resolved = ResolvePolicy(m.options.kv, policy);
    // Throws naming the field.
    const codec::ReaderPlan plan = codec::MakeReaderPlan(resolved, m.options.kv.store_bits);
    gpu_bits = {plan.key_bits, plan.value_bits};
    if (m.gpu && resolved.reader != codec::ReaderKind::kConstrained) {
      throw std::invalid_argument(
          "reader: on a CUDA device ReadKV runs the constrained reader only");
    }
    const std::string_view layout =
        codec::PlaneLayoutName(codec::LayoutForReader(resolved.reader));
    if (m.prefix_store && layout != m.identity.layout) {
      throw std::invalid_argument(
          "reader: the persistent prefix cache holds " + m.identity.layout +
          " objects, which the " + std::string(codec::ReaderName(resolved.reader)) +
          " reader cannot read (it reads " + std::string(layout) + ")");
    }
  }
  Impl::Sequence s = m.MakeSequence(resolved);
  s.id = sequence_id;
  if (m.gpu) m.gpu->AddSequence(sequence_id, gpu_bits);
  m.sequences.emplace(sequence_id, std::move(s));
}

void LlamaDecodeModel::Forward(std::span<engine::SequenceStep> steps) {
  Impl& m = *impl_;
  std::set<uint64_t> seen;
  for (const engine::SequenceStep& step : steps) {
    Impl::Sequence& s = m.Get(step.sequence_id);
    if (!seen.insert(step.sequence_id).second) {
      throw std::invalid_argument("sequence_id: " + std::to_string(step.sequence_id) +
                                  " appears twice in one Forward call");
    }
    if (step.tokens.empty()) throw std::invalid_argument("tokens: a step needs at least one");
    if ((s.prompt_open || !step.logits_wanted) && m.prefix_store) {
      throw std::invalid_argument(
          "tokens: a prompt in chunks cannot go through the persistent prefix cache (cache_dir)");
    }
    if (!step.logits_wanted && s.length > 0 && !s.prompt_open) {
      throw std::invalid_argument("tokens: sequence " + std::to_string(step.sequence_id) +
                                  " got a prompt chunk (logits_wanted = false) after its prompt");
    }
    for (int32_t t : step.tokens) {
      if (t < 0 || t >= m.config.vocab_size) {
        throw std::invalid_argument("tokens: id " + std::to_string(t) + " outside [0, " +
                                    std::to_string(m.config.vocab_size) + ")");
      }
    }
    if (s.length + static_cast<int64_t>(step.tokens.size()) > m.config.max_position_embeddings) {
      throw std::invalid_argument(
          "tokens: sequence would hold " +
          std::to_string(s.length + static_cast<int64_t>(step.tokens.size())) +
          " tokens, more than max_context " + std::to_string(m.config.max_position_embeddings));
    }
  }
  if (steps.empty()) return;
  torch::NoGradGuard no_grad;
  const bool dense = m.options.kv.kind == "dense";
  const bool through_cache = m.options.kv.prefill == PrefillAttention::kThroughCache;
  std::vector<Impl::Sequence*> seqs;
  std::vector<int32_t> last;
  std::vector<engine::SequenceStep*> wanted;
  for (engine::SequenceStep& step : steps) {
    Impl::Sequence& s = m.Get(step.sequence_id);
    // Prompt positions: a chunk before the prompt's last is all of them; otherwise the last
    // token is decoded below with the batch.
    const auto head =
        step.logits_wanted ? step.tokens.first(step.tokens.size() - 1) : step.tokens;
    const bool chunked = s.prompt_open || !step.logits_wanted;
    if (!head.empty()) {
      const bool has_prefix_block = head.size() >= static_cast<size_t>(codec::kBlockTokens);
      if (m.prefix_store && s.length == 0 && has_prefix_block) {
        m.PrefillThroughPrefixCache(step.sequence_id, s, head);
      } else if (dense) {
        m.Prefill(s, head);
      } else if (!through_cache && (s.length == 0 || s.prompt_open)) {
        // The prompt's positions; a chunk attends exactly to the chunks before it (prompt_past).
        if (chunked && s.prompt_past.empty()) {
          s.prompt_past.resize(2 * static_cast<size_t>(m.config.num_hidden_layers));
        }
        m.Prefill(s, head, chunked ? &s.prompt_past : nullptr,
                  /*keep_past=*/!step.logits_wanted);
      } else {
        // The tokens attend through the compressed cache one at a time: exact for what a
        // compressed cache can give, and the only way a non-empty compressed cache is read.
        for (int32_t t : head) m.Decode({&s}, std::span<const int32_t>(&t, 1));
      }
    }
    s.prompt_open = !step.logits_wanted;
    if (!step.logits_wanted) continue;
    s.prompt_past.clear();
    seqs.push_back(&s);
    last.push_back(step.tokens.back());
    wanted.push_back(&step);
  }
  if (seqs.empty()) return;
  torch::Tensor logits = m.Decode(seqs, last);
  const float* p = logits.data_ptr<float>();
  const int64_t vocab = m.config.vocab_size;
  for (size_t i = 0; i < wanted.size(); ++i) {
    wanted[i]->logits.assign(p + static_cast<int64_t>(i) * vocab,
                             p + static_cast<int64_t>(i + 1) * vocab);
  }
}

void LlamaDecodeModel::EndSequence(uint64_t sequence_id) {
  Impl& m = *impl_;
  auto it = m.sequences.find(sequence_id);
  if (it == m.sequences.end()) return;
  for (const auto& c : it->second.caches) m.retired_encode_seconds += c->encode_cost().seconds;
  if (m.gpu) m.gpu->RemoveSequence(sequence_id);
  m.sequences.erase(it);
}

int64_t LlamaDecodeModel::kv_bytes_in_use() const {
  int64_t total = 0;
  for (const auto& [id, s] : impl_->sequences) total += impl_->SequenceBytes(s);
  return total;
}

engine::KvLedgers LlamaDecodeModel::ledgers() const {
  engine::KvLedgers out = impl_->totals;
  internal::GpuKvLedgers g;
  if (impl_->gpu) {
    g = impl_->gpu->ledgers();
    out.logical_read_bytes += g.logical_read_bytes;
    out.physical_traffic_bytes += g.physical_traffic_bytes;
    out.workspace_peak_bytes = std::max(out.workspace_peak_bytes, g.workspace_peak_bytes);
  }
  out.capacity_bytes = kv_bytes_in_use();
  out.encode_seconds = impl_->retired_encode_seconds;
  for (const auto& [id, s] : impl_->sequences) {
    for (const auto& c : s.caches) out.encode_seconds += c->encode_cost().seconds;
  }
  // On a CUDA device the caches above are empty: the encode time is the append launches' GPU
  // time (CUDA events around them; 0 without a GPU).
  out.encode_seconds += g.encode_seconds;
  if (impl_->prefix_store) {
    for (const auto& [reason, count] : impl_->prefix_store->counters().rejections) {
      out.cache_rejections[reason] += count;
    }
    const PrefixCacheCounters c = impl_->prefix_store->counters();
    out.prefix_cache_objects = {{"hit", c.hits},
                                {"miss", c.misses},
                                {"stored", c.stored},
                                {"evicted", c.evicted},
                                {"write_failed", c.write_failures}};
  }
  return out;
}

std::unique_ptr<engine::DecodeModel> LoadDecodeModel(const std::string& model_dir,
                                                     const RuntimeOptions& options) {
  return std::make_unique<LlamaDecodeModel>(model_dir, options);
}

std::string DefaultModelDirectory() {
  if (const char* env = std::getenv("KVGATE_MODEL_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return KVGATE_DEFAULT_MODEL_DIR;
}

std::string FileDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFormatError("file", "cannot open " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return codec::ContentDigest(std::span<const uint8_t>(bytes));
}

}  // namespace readkv::model
