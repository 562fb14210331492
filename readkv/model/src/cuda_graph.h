// Internal to readkv/model (includes torch): one CUDA graph of torch ops, captured once and
// replayed on the current stream. The runtime replays a decode step's dense ops this way
// (runtime.cc, RuntimeOptions::cuda_graphs): a step of the small built-in models is ~40 torch ops
// per layer of a few microseconds of GPU work each, so launching them one by one from the host
// costs more than running them.
//
// Available with libtorch >= 2 built with CUDA (the GPU host); elsewhere Supported() is false and
// Capture throws std::logic_error.
#pragma once

#include <functional>
#include <memory>

namespace readkv::model::internal {

class CudaGraph {
 public:
  static bool Supported();

  CudaGraph();
  ~CudaGraph();
  CudaGraph(CudaGraph&&) noexcept;
  CudaGraph& operator=(CudaGraph&&) noexcept;

  // Runs `ops` once eagerly on a side stream (the warm-up torch asks for: cuBLAS handles and
  // workspaces are made outside the capture), then captures a second run of it. Tensors `ops`
  // creates during the capture live in the graph's own memory pool: every Replay rewrites them in
  // place, so `ops` should leave its outputs in variables the caller keeps, and the caller feeds
  // inputs by copying into tensors that existed before the capture. The device is synchronised
  // before and after.
  void Capture(const std::function<void()>& ops);
  // Launches the captured work on the current stream (ordered with everything else on it).
  void Replay();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace readkv::model::internal
