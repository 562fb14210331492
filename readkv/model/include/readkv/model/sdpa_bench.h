// The outside anchor of `kvgate bench attention`: torch's scaled_dot_product_attention for one
// GQA decode step on contiguous BF16 inputs that the bench owns, passed as raw CUDA pointers (so
// readkv/cuda stays torch-free and this file is the only one that includes torch).
//
// GQA without expanding K/V: queries viewed as [B][H_kv][g][d] (the g query heads of a KV head
// are g query rows), keys and values [B][H_kv][T][d], no mask, scale 1/sqrt(d). With torch < 2
// (no SDPA) it runs matmul + softmax (FP32) + matmul instead and says so in its name.
//
// Calls enqueue on torch's current CUDA stream, which is the legacy default stream unless the
// caller changed it; nothing synchronises. Not thread-safe; throws std::runtime_error when torch
// cannot run on CUDA or a call fails.
#pragma once

#include <cstdint>
#include <string>

namespace readkv::model {

struct SdpaDecodeProblem {
  int batch = 1;
  int heads_q = 32;
  int heads_kv = 8;
  int head_dim = 128;
  int64_t tokens = 0;  // T, the same for every sequence
};

// "torch_sdpa" (torch >= 2) or "torch_matmul_softmax" (the fallback of torch 1.x).
const char* SdpaAnchorName();

// True when torch in this build can run on a CUDA device; otherwise *reason says why.
bool SdpaAnchorAvailable(std::string* reason);

// One decode step. queries_bf16 [B][H_q][d], keys_bf16 / values_bf16 [B][H_kv][T][d] bfloat16 on
// device 0; out_float [B][H_q][d] float on the device, or null to skip the output copy (timed
// launches measure the attention alone).
void SdpaDecode(const SdpaDecodeProblem& problem, const void* queries_bf16, const void* keys_bf16,
                const void* values_bf16, float* out_float);

}  // namespace readkv::model
