// Internal to readkv/model (includes torch): the weights of a Llama decoder, their load/save in
// the Hugging Face safetensors layout, and the math shared by the trainer and the runtime
// (RMSNorm, RoPE in the Hugging Face "rotate half" convention, SwiGLU, causal GQA attention).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/model/config.h"

namespace readkv::model::internal {

struct LayerWeights {
  torch::Tensor attn_norm;  // [D]
  torch::Tensor wq;         // [Hq*hd, D]
  torch::Tensor wk;         // [Hkv*hd, D]
  torch::Tensor wv;         // [Hkv*hd, D]
  torch::Tensor wo;         // [D, Hq*hd]
  torch::Tensor mlp_norm;   // [D]
  torch::Tensor w_gate;     // [F, D]
  torch::Tensor w_up;       // [F, D]
  torch::Tensor w_down;     // [D, F]
};

struct LlamaWeights {
  torch::Tensor embed;       // [V, D]
  std::vector<LayerWeights> layers;
  torch::Tensor final_norm;  // [D]
  torch::Tensor lm_head;     // [V, D] (the embedding when tied)

  // (Hugging Face name, tensor) of every stored tensor, in file order.
  std::vector<std::pair<std::string, torch::Tensor*>> Named(const ModelConfig& config);
  std::vector<torch::Tensor> Parameters(const ModelConfig& config);
  LlamaWeights To(torch::Device device, torch::ScalarType dtype) const;
};

// The shape each named tensor must have under `config`.
std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedTensors(
    const ModelConfig& config);

// Loads `path` (model.safetensors): every expected tensor present with the config's shape and
// dtype (ModelFormatError naming the tensor otherwise), no unexpected tensors (rotary inv_freq
// buffers of older exports are ignored). Returns fp32 CPU tensors.
LlamaWeights LoadWeights(const std::string& path, const ModelConfig& config);
// Seeded initialisation (N(0, 0.02), output projections scaled by 1/sqrt(2L), norms 1), fp32 CPU.
LlamaWeights InitWeights(const ModelConfig& config, uint64_t seed);
// Writes model.safetensors in `storage` ("float32" | "bfloat16" | "float16").
void SaveWeights(const LlamaWeights& weights, const ModelConfig& config, const std::string& path,
                 const std::string& storage);

struct RopeTables {
  torch::Tensor cos;  // [max_positions, hd] fp32, the halves duplicated (HF layout)
  torch::Tensor sin;
};
RopeTables MakeRope(const ModelConfig& config, torch::Device device);

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// x * cos + rotate_half(x) * sin, computed in fp32 and returned in x's dtype; cos/sin must
// broadcast against x (last dimension hd).
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// SwiGLU MLP: down(silu(gate(x)) * up(x)).
torch::Tensor Mlp(const LayerWeights& w, const torch::Tensor& x);

// Causal attention of n queries at positions [past, past + n) over keys/values of positions
// [0, past + n). q: [n, Hq, hd]; k, v: [past + n, Hkv, hd]; returns [n, Hq, hd]. Softmax in fp32.
// On CUDA with libtorch >= 2 torch's fused SDPA; elsewhere queries in chunks, which bound the
// score buffer.
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t past);

// The training forward: tokens [B, T] int64 -> logits [B, T, V] (fp32). `compute` is the matmul
// dtype (fp32, or bf16 with fp32 master weights, norms and residual stream). Uses flash SDPA on
// CUDA with libtorch >= 2, else CausalAttention per batch row.
torch::Tensor FullForward(const LlamaWeights& w, const ModelConfig& config, const RopeTables& rope,
                          const torch::Tensor& tokens, torch::ScalarType compute);

// The length of a training row at `progress` (training.cc): the curriculum's 512 -> 4K stages
// over the first 40% unless `curriculum` is false, then rows of 1K / 2K / 4K / max_length
// (10 / 10 / 20 / 60%), of which a share `mid_share` (taken from max_length's 60%) is
// max_length / 2. Never longer than max_length.
int RowLength(double progress, int max_length, bool curriculum, double mid_share,
              kvgate::stats::SplitMixRng& rng);

torch::ScalarType ParseDtype(const std::string& name, const char* field);
torch::Device ParseDevice(const std::string& name);

}  // namespace readkv::model::internal
