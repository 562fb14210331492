// Never include spdlog here: torch 2.x bundles an fmt that breaks it in the same translation unit.
#include "readkv/model/sdpa_bench.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace readkv::model {
namespace {

torch::TensorOptions DeviceOptions(torch::ScalarType dtype) {
  return torch::TensorOptions().dtype(dtype).device(torch::kCUDA, 0);
}

// A non-owning view of memory the bench owns.
torch::Tensor Wrap(const void* data, at::IntArrayRef sizes, torch::ScalarType dtype) {
  return torch::from_blob(const_cast<void*>(data), sizes, DeviceOptions(dtype));
}

}  // namespace

const char* SdpaAnchorName() {
#if TORCH_VERSION_MAJOR >= 2
  return "torch_sdpa";
#else
  return "torch_matmul_softmax";
#endif
}

bool SdpaAnchorAvailable(std::string* reason) {
  if (!torch::cuda::is_available()) {
    if (reason != nullptr) {
      *reason = std::string("torch ") + TORCH_VERSION + " sees no CUDA device (CPU-only build?)";
    }
    return false;
  }
  return true;
}

void SdpaDecode(const SdpaDecodeProblem& p, const void* queries_bf16, const void* keys_bf16,
                const void* values_bf16, float* out_float) {
  if (p.batch < 1 || p.heads_kv < 1 || p.heads_q % p.heads_kv != 0 || p.head_dim < 1 ||
      p.tokens < 1) {
    throw std::runtime_error("SdpaDecode: bad problem shape");
  }
  const int64_t g = p.heads_q / p.heads_kv;
  torch::NoGradGuard no_grad;
  const torch::Tensor q =
      Wrap(queries_bf16, {p.batch, p.heads_kv, g, p.head_dim}, torch::kBFloat16);
  const torch::Tensor k =
      Wrap(keys_bf16, {p.batch, p.heads_kv, p.tokens, p.head_dim}, torch::kBFloat16);
  const torch::Tensor v =
      Wrap(values_bf16, {p.batch, p.heads_kv, p.tokens, p.head_dim}, torch::kBFloat16);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
#if TORCH_VERSION_MAJOR >= 2
  const torch::Tensor o =
      at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                       /*is_causal=*/false, /*scale=*/scale);
#else
  const torch::Tensor probs =
      torch::softmax(torch::matmul(q, k.transpose(-1, -2)).to(torch::kFloat) * scale, -1);
  const torch::Tensor o = torch::matmul(probs.to(torch::kBFloat16), v);
#endif
  if (out_float != nullptr) {
    Wrap(out_float, {p.batch, p.heads_kv, g, p.head_dim}, torch::kFloat).copy_(o);
  }
}

}  // namespace readkv::model
