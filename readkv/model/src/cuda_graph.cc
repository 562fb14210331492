#include "cuda_graph.h"

#include <torch/torch.h>

#include <stdexcept>

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

}  // namespace readkv::model::internal
