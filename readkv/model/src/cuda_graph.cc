#include "cuda_graph.h"

#include <torch/torch.h>

#include <stdexcept>
#include <utility>

// KVGATE_TORCH_CUDA: set by CMake when the libtorch found has its CUDA libraries (torch_cuda).
#if defined(KVGATE_TORCH_CUDA) && TORCH_VERSION_MAJOR >= 2
#define KVGATE_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#define KVGATE_CUDA_GRAPHS 0
#endif

namespace readkv::model::internal {

#if KVGATE_CUDA_GRAPHS

struct CudaGraph::State {
  at::cuda::CUDAGraph graph;
  bool captured = false;
};

bool CudaGraph::Supported() { return true; }

void CudaGraph::Capture(const std::function<void()>& ops) {
  if (state_->captured) throw std::logic_error("CudaGraph::Capture: already captured");
  torch::cuda::synchronize();  // the inputs' fills, made on the current stream, are done
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  {
    c10::cuda::CUDAStreamGuard guard(side);
    ops();
    side.synchronize();
    state_->graph.capture_begin();
    ops();
    state_->graph.capture_end();
  }
  torch::cuda::synchronize();
  state_->captured = true;
}

void CudaGraph::Replay() {
  if (!state_->captured) throw std::logic_error("CudaGraph::Replay: nothing captured");
  state_->graph.replay();
}

#else

struct CudaGraph::State {};

bool CudaGraph::Supported() { return false; }

void CudaGraph::Capture(const std::function<void()>&) {
  throw std::logic_error("CudaGraph: this build's libtorch has no CUDA graphs");
}

void CudaGraph::Replay() {
  throw std::logic_error("CudaGraph: this build's libtorch has no CUDA graphs");
}

#endif

CudaGraph::CudaGraph() : state_(std::make_unique<State>()) {}
CudaGraph::~CudaGraph() = default;
CudaGraph::CudaGraph(CudaGraph&&) noexcept = default;
CudaGraph& CudaGraph::operator=(CudaGraph&&) noexcept = default;

DecodeStepGraphs::DecodeStepGraphs(int layers, const torch::Tensor& h, const torch::Tensor& cos,
                                   const torch::Tensor& sin, const torch::Tensor& attn,
                                   LayerOps ops)
    : ops_(std::move(ops)),
      h_(torch::zeros_like(h)),
      cos_(torch::zeros_like(cos)),
      sin_(torch::zeros_like(sin)) {
  const auto n = static_cast<size_t>(layers);
  for (size_t l = 0; l < n; ++l) attn_.push_back(torch::zeros_like(attn));
  q_.resize(n);
  k_.resize(n);
  v_.resize(n);
  hidden_.resize(n);
  for (size_t seg = 0; seg <= n; ++seg) {
    CudaGraph graph;
    graph.Capture([this, seg, n] {
      if (seg > 0) hidden_[seg - 1] = ops_.finish(static_cast<int>(seg - 1),
                                                  seg == 1 ? h_ : hidden_[seg - 2], attn_[seg - 1]);
      if (seg < n) {
        ops_.project(static_cast<int>(seg), seg == 0 ? h_ : hidden_[seg - 1], cos_, sin_, q_[seg],
                     k_[seg], v_[seg]);
      } else {
        logits_ = ops_.logits(hidden_.back());
      }
    });
    segments_.push_back(std::move(graph));
  }
}

torch::Tensor DecodeStepGraphs::Run(const torch::Tensor& h, const torch::Tensor& cos,
                                    const torch::Tensor& sin, const Attend& attend) {
  h_.copy_(h);
  cos_.copy_(cos);
  sin_.copy_(sin);
  segments_[0].Replay();
  for (size_t l = 0; l < attn_.size(); ++l) {
    attn_[l].copy_(attend(static_cast<int>(l), q_[l], k_[l], v_[l]));
    segments_[l + 1].Replay();
  }
  return logits_;
}

}  // namespace readkv::model::internal
