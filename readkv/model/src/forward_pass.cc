// LlamaDecodeModel's forward pass: prompt tokens (prefill, exact within the prompt or over the
// K/V decoded before them) and batched decode steps through the layers, attention through each
// sequence's backend, on the CPU or on the CUDA KV backends (CUDA graphs included); and
// LlamaDecodeModel::Forward, which checks a batch of steps and routes each prompt.
#include <optional>
#include <set>
#include <stdexcept>

#include "runtime_impl.h"

namespace readkv::model {

using internal::LayerWeights;

torch::Tensor LlamaDecodeModel::Impl::Embed(std::span<const int32_t> tokens) {
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  torch::Tensor t = torch::from_blob(ids.data(), {static_cast<int64_t>(ids.size())}, torch::kLong)
                        .clone()
                        .to(device);
  return weights.embed.index_select(0, t);  // [n, D]
}

void LlamaDecodeModel::Impl::Projections(int layer, const torch::Tensor& h,
                                         const torch::Tensor& cos, const torch::Tensor& sin,
                                         torch::Tensor& q, torch::Tensor& k, torch::Tensor& v) {
  const LayerWeights& lw = weights.layers[static_cast<size_t>(layer)];
  torch::Tensor a = internal::RmsNorm(h, lw.attn_norm, config.rms_norm_eps);
  const int64_t n = h.size(0), qw = hq() * hd(), kw = hkv() * hd();
  const torch::Tensor qkv = torch::matmul(a, wqkv[static_cast<size_t>(layer)].t());
  q = internal::ApplyRope(qkv.narrow(1, 0, qw).view({n, hq(), hd()}), cos, sin);
  k = internal::ApplyRope(qkv.narrow(1, qw, kw).view({n, hkv(), hd()}), cos, sin);
  v = qkv.narrow(1, qw + kw, kw).view({n, hkv(), hd()});
}

torch::Tensor LlamaDecodeModel::Impl::Finish(const LayerWeights& lw, const torch::Tensor& h,
                                             const torch::Tensor& attn) {
  const int64_t n = h.size(0);
  torch::Tensor x = h + torch::matmul(attn.reshape({n, hq() * hd()}), lw.wo.t());
  return x + internal::Mlp(lw, internal::RmsNorm(x, lw.mlp_norm, config.rms_norm_eps));
}

void LlamaDecodeModel::Impl::Prefill(Sequence& s, std::span<const int32_t> tokens,
                                     std::vector<torch::Tensor>* decoded_past, bool keep_past) {
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
    if (options.kv.kind == codec::KvBackend::kDense) {
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

torch::Tensor LlamaDecodeModel::Impl::Decode(const std::vector<Sequence*>& seqs,
                                             std::span<const int32_t> tokens) {
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

torch::Tensor LlamaDecodeModel::Impl::DeviceLogits(const torch::Tensor& h) {
  torch::Tensor x = internal::RmsNorm(h, weights.final_norm, config.rms_norm_eps);
  return torch::matmul(x, weights.lm_head.t()).to(torch::kFloat);
}

torch::Tensor LlamaDecodeModel::Impl::Logits(const torch::Tensor& h) {
  return DeviceLogits(h).to(torch::kCPU).contiguous();
}

torch::Tensor LlamaDecodeModel::Impl::DecodeOnGpu(const std::vector<Sequence*>& seqs,
                                                  torch::Tensor h, const torch::Tensor& cos,
                                                  const torch::Tensor& sin) {
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

torch::Tensor LlamaDecodeModel::Impl::DecodeThroughGraphs(const internal::GpuKvCache::Step& step,
                                                          const torch::Tensor& h,
                                                          const torch::Tensor& cos,
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
  const bool dense = m.options.kv.kind == codec::KvBackend::kDense;
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

}  // namespace readkv::model
