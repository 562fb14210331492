// Internal to readkv/model (includes torch): one CUDA graph of torch ops, captured once and
// replayed on the current stream, and a decode step's dense ops as a chain of them, which the
// runtime replays (runtime.cc, RuntimeOptions::cuda_graphs): a step of the small built-in
// models is ~40 torch ops per layer of a few microseconds of GPU work each, so launching them
// one by one from the host costs more than running them.
//
// Available with libtorch >= 2 built with CUDA (the GPU host); elsewhere Supported() is false and
// Capture throws std::logic_error.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

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

// The dense ops of a decode step of one batch size as L + 1 CUDA graphs: segment 0 projects layer
// 0, segment l (0 < l < L) finishes layer l - 1 and projects layer l, segment L finishes the last
// layer and takes the logits. The KV backend's append and attention run between the segments,
// eagerly: their launches depend on the step (lengths, pages, chunk counts). Inputs enter by
// copies into static tensors made before the captures.
class DecodeStepGraphs {
 public:
  struct LayerOps {
    // Layer l's q, k, v of the residual stream x ([B, D]) with RoPE's cos/sin ([B, 1, hd]).
    std::function<void(int l, const torch::Tensor& x, const torch::Tensor& cos,
                       const torch::Tensor& sin, torch::Tensor& q, torch::Tensor& k,
                       torch::Tensor& v)>
        project;
    // The residual stream after layer l, from the one before it and the layer's attention.
    std::function<torch::Tensor(int l, const torch::Tensor& x, const torch::Tensor& attn)> finish;
    // Logits [B, V] fp32, on the device, of the last residual stream.
    std::function<torch::Tensor(const torch::Tensor& x)> logits;
  };
  // The KV backend's part of layer l: appends k, v and returns the attention of q ([B, Hq, hd]).
  using Attend = std::function<torch::Tensor(int l, const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v)>;

  // Captures the segments for inputs shaped like h, cos and sin and attention outputs shaped
  // like attn (all on the CUDA device); `ops` is kept and replayed, not called again.
  DecodeStepGraphs(int layers, const torch::Tensor& h, const torch::Tensor& cos,
                   const torch::Tensor& sin, const torch::Tensor& attn, LayerOps ops);

  // One step: returns the logits on the device (valid until the next Run).
  torch::Tensor Run(const torch::Tensor& h, const torch::Tensor& cos, const torch::Tensor& sin,
                    const Attend& attend);

 private:
  LayerOps ops_;
  torch::Tensor h_, cos_, sin_;           // static inputs
  std::vector<torch::Tensor> attn_;       // per layer, static inputs
  std::vector<torch::Tensor> q_, k_, v_;  // per layer, made by the captures
  std::vector<torch::Tensor> hidden_;     // per layer: the residual stream after it
  torch::Tensor logits_;
  std::vector<CudaGraph> segments_;
};

}  // namespace readkv::model::internal
