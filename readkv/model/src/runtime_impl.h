// Internal to readkv/model (includes torch): LlamaDecodeModel's state and its steps. Defined
// along the runtime's seams: kv_backends.cc (a sequence's KV state per backend: make, append,
// attend, bytes), forward_pass.cc (prefill and batched decode through the layers, on the CPU
// backends or the CUDA ones, CUDA graphs included, and LlamaDecodeModel::Forward),
// prefix_blocks.cc (the persistent prefix cache's blocks: computed, stored, restored, decoded),
// runtime.cc (loading the model, the public accessors).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda_graph.h"
#include "gpu_kv_cache.h"
#include "readkv/cuda/device.h"
#include "llama_internal.h"
#include "readkv/codec/cache_object.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/readers.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/transform.h"
#include "readkv/model/runtime.h"

namespace readkv::model {

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
  // The dense backend's attention calls on a CUDA device, by CUDA events (its launches return
  // before the GPU is done, so the host's clock would not see them); made at the first such call.
  std::unique_ptr<readkv::cuda::StreamTimer> dense_attend_timer;
  // Decode steps through CUDA graphs (RuntimeOptions::cuda_graphs), by batch size.
  bool use_graphs = false;
  std::map<int64_t, std::unique_ptr<internal::DecodeStepGraphs>> step_graphs;
  // Sign-vector transforms of every (layer, head), index layer * Hkv + head (prefix cache only).
  std::vector<codec::HadamardTransform> key_transforms, value_transforms;

  int hq() const { return config.num_attention_heads; }
  int hkv() const { return config.num_key_value_heads; }
  int hd() const { return config.head_dim; }
  int64_t ElementBytes() const { return static_cast<int64_t>(c10::elementSize(dtype)); }

  // ---- KV backends (kv_backends.cc) ----------------------------------------------------------
  Sequence& Get(uint64_t id);  // throws std::invalid_argument for a sequence not live
  Sequence MakeSequence(const codec::ReadPolicy& policy) const;
  // Hands each token's K/V of one layer to the observer, if any.
  void Observe(int layer, const torch::Tensor& k, const torch::Tensor& v);
  // Appends n tokens' K/V ([n, Hkv, hd]) of one layer at positions [s.length, s.length + n).
  void Append(Sequence& s, int layer, const torch::Tensor& k, const torch::Tensor& v);
  // Decode attention of the newest token (already appended): q [Hq, hd] -> [Hq, hd].
  torch::Tensor Attend(Sequence& s, int layer, const torch::Tensor& q, int64_t tokens);
  // Attend's work. Attend adds its time to totals.attention_seconds: wall time on the CPU, or
  // on a CUDA device (the dense backend) dense_attend_timer's.
  torch::Tensor AttendTimed(Sequence& s, int layer, const torch::Tensor& q, int64_t tokens);
  int64_t SequenceBytes(const Sequence& s) const;

  // ---- the forward pass (forward_pass.cc) ----------------------------------------------------
  torch::Tensor Embed(std::span<const int32_t> tokens);
  // q, k (RoPE applied with cos/sin) and v of the rows of h.
  // v is a view into the layer's one projection output (its consumers copy what they keep).
  void Projections(int layer, const torch::Tensor& h, const torch::Tensor& cos,
                   const torch::Tensor& sin, torch::Tensor& q, torch::Tensor& k, torch::Tensor& v);
  // The attention output projection, residual and MLP of one layer.
  torch::Tensor Finish(const internal::LayerWeights& lw, const torch::Tensor& h,
                       const torch::Tensor& attn);
  // Prompt tokens attending exactly within themselves (and over a dense past, or over
  // `decoded_past`: the K/V of the positions before them, decoded from a codec cache or kept
  // exact by a chunked prompt, [past, Hkv, hd] per layer), K/V written into the cache. Used for
  // all but the last token of a prompt. keep_past: this call's K/V are appended to decoded_past.
  void Prefill(Sequence& s, std::span<const int32_t> tokens,
               std::vector<torch::Tensor>* decoded_past = nullptr, bool keep_past = false);
  // One token for each sequence, batched through the weights; attention per sequence through
  // its backend. Returns logits [B, V] fp32 on the CPU.
  torch::Tensor Decode(const std::vector<Sequence*>& seqs, std::span<const int32_t> tokens);
  // Logits [B, V] fp32 of the last residual stream: on the device, and copied to the CPU.
  torch::Tensor DeviceLogits(const torch::Tensor& h);
  torch::Tensor Logits(const torch::Tensor& h);
  // Decode on the CUDA KV backends: every layer appends the step's tokens and attends for all
  // sequences in one batched call each.
  torch::Tensor DecodeOnGpu(const std::vector<Sequence*>& seqs, torch::Tensor h,
                            const torch::Tensor& cos, const torch::Tensor& sin);
  // A decode step through CUDA graphs of its dense ops (cuda_graph.h), captured at the first
  // step of each batch size.
  torch::Tensor DecodeThroughGraphs(const internal::GpuKvCache::Step& step,
                                    const torch::Tensor& h, const torch::Tensor& cos,
                                    const torch::Tensor& sin);

  // ---- the persistent prefix cache (prefix_blocks.cc, runtime.h) -----------------------------
  const codec::ReadKvLayerCache& ReadKvCache(const Sequence& s, int layer) const;
  codec::ReadKvLayerCache& ReadKvCache(Sequence& s, int layer) const;
  // One object's blocks decoded at full depth W to post-RoPE K/V in the model's domain, appended
  // to decoded_past ([2l] keys, [2l + 1] values, [tokens, Hkv, hd] in the compute dtype).
  void AppendDecoded(const codec::CacheObject& object, std::vector<torch::Tensor>& decoded_past);
  // Restores one accepted object into a sequence that ends at this block: its bytes go straight
  // into every layer's stores (ReadKvLayerCache::AppendEncodedBlock), nothing is decoded.
  void RestoreBlock(Sequence& s, const codec::CacheObject& object);
  // The prompt head of an empty ReadKV sequence with the prefix cache on (runtime.h).
  void PrefillThroughPrefixCache(uint64_t sequence_id, Sequence& s,
                                 std::span<const int32_t> tokens);
};

}  // namespace readkv::model
