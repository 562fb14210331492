// LlamaDecodeModel's KV backends on the CPU: a sequence's state (dense torch tensors, or one
// codec cache per layer for fp8 / readkv), appending a step's K/V, decode attention through the
// backend with its ledgers, and the sequences' lifecycle and byte counts. On a CUDA device fp8
// and readkv live in gpu_kv_cache.h instead; the sequences then only name them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/tile_reader.h"
#include "runtime_impl.h"
#include "runtime_options.h"

namespace readkv::model {

using internal::ResolvePolicy;

namespace {

constexpr int64_t kDenseInitialCapacity = 256;

}  // namespace

LlamaDecodeModel::Impl::Sequence& LlamaDecodeModel::Impl::Get(uint64_t id) {
  auto it = sequences.find(id);
  if (it == sequences.end()) {
    throw std::invalid_argument("sequence_id: " + std::to_string(id) + " is not live");
  }
  return it->second;
}

LlamaDecodeModel::Impl::Sequence LlamaDecodeModel::Impl::MakeSequence(
    const codec::ReadPolicy& policy) const {
  Sequence s;
  const int layers = config.num_hidden_layers;
  if (options.kv.kind == codec::KvBackend::kDense) {
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
    c.backend = fp8_layer ? codec::KvBackend::kFp8 : options.kv.kind;
    c.geometry = {hq(), hkv(), hd()};
    c.calibration = calibration;
    c.layer = l;
    c.fp8_scale = options.kv.fp8_scale;
    c.store_bits = options.kv.store_bits;
    c.policy = policy;
    c.codebook = codebook;
    c.outliers = {options.kv.outlier_cap, options.kv.outlier_threshold};
    c.byte_keys = options.kv.byte_keys && c.backend == codec::KvBackend::kReadKv;
    s.caches.push_back(codec::MakeLayerKvCache(c));
  }
  return s;
}

void LlamaDecodeModel::Impl::Observe(int layer, const torch::Tensor& k, const torch::Tensor& v) {
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

void LlamaDecodeModel::Impl::Append(Sequence& s, int layer, const torch::Tensor& k,
                                    const torch::Tensor& v) {
  Observe(layer, k, v);
  const int64_t n = k.size(0);
  if (options.kv.kind == codec::KvBackend::kDense) {
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

torch::Tensor LlamaDecodeModel::Impl::Attend(Sequence& s, int layer, const torch::Tensor& q,
                                             int64_t tokens) {
  if (q.is_cuda()) {
    if (!dense_attend_timer) dense_attend_timer = std::make_unique<readkv::cuda::StreamTimer>();
    dense_attend_timer->Begin();
    torch::Tensor out = AttendTimed(s, layer, q, tokens);
    dense_attend_timer->End();
    return out;
  }
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor out = AttendTimed(s, layer, q, tokens);
  totals.attention_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

torch::Tensor LlamaDecodeModel::Impl::AttendTimed(Sequence& s, int layer, const torch::Tensor& q,
                                                  int64_t tokens) {
  if (options.kv.kind == codec::KvBackend::kDense) {
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

int64_t LlamaDecodeModel::Impl::SequenceBytes(const Sequence& s) const {
  if (gpu) return gpu->SequenceBytes(s.id);
  if (options.kv.kind == codec::KvBackend::kDense) {
    return 2 * int64_t{config.num_hidden_layers} * s.length * hkv() * hd() * ElementBytes();
  }
  int64_t total = 0;
  for (const auto& c : s.caches) total += c->CapacityBytes();
  return total;
}

void LlamaDecodeModel::StartSequence(uint64_t sequence_id, const engine::ReadPolicy& policy) {
  Impl& m = *impl_;
  if (m.sequences.count(sequence_id) != 0) {
    throw std::invalid_argument("sequence_id: " + std::to_string(sequence_id) +
                                " is already live");
  }
  codec::ReadPolicy resolved;
  internal::GpuReadBits gpu_bits;
  if (m.options.kv.kind == codec::KvBackend::kReadKv) {
    resolved = ResolvePolicy(m.options.kv, policy);
    // Throws naming the field.
    const codec::ReaderPlan plan = codec::MakeReaderPlan(resolved, m.options.kv.store_bits);
    gpu_bits = {plan.key_bits, plan.value_bits};
    if (m.options.kv.byte_keys) codec::RequireWholeKeys(plan);  // a request's fewer key bits
    if (m.gpu) internal::CheckCudaRequestReader(m.options.kv, resolved);
    // The tile reader reads both tile layouts (tiles16, tiles16-kbytes), the others planes.
    const codec::PlaneLayout reads = codec::LayoutForReader(resolved.reader);
    const std::string_view layout = codec::PlaneLayoutName(reads);
    if (m.prefix_store && codec::IsTileLayout(reads) !=
                              codec::IsTileLayout(codec::ParsePlaneLayout(m.identity.layout))) {
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
    out.outlier_read_bytes += g.outlier_read_bytes;
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
  out.attention_seconds += g.attention_seconds;  // totals' holds the CPU's wall time
  if (impl_->dense_attend_timer) out.attention_seconds += impl_->dense_attend_timer->Seconds();
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

}  // namespace readkv::model
