// Kernels of the attention bench (attention_bench.cc): seeded data generation straight into the
// paged caches, the FP8 conversion, gathers for the tile reader's append (TileAppend) and the
// torch anchor, the streaming-read kernel and the pre-launch spin. Internal to readkv/cuda; every
// launcher enqueues on `stream`, never synchronises, and returns the launch status. Shapes as
// decode_attention.h: pages [P][H_kv][256][d], page_table [B][max_pages], seq_lens [B].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace readkv::cuda::bench {

// Per (KV head, channel) distribution of the seeded data, device arrays [H_kv][d]:
// x = mean + scale * N(0,1), the normal drawn from a counter-based hash of (seed, b, i, h, c),
// so a token's values do not depend on the page it landed in.
struct ChannelDistribution {
  const float* mean = nullptr;
  const float* scale = nullptr;
};

// Fills bfloat16 pages: token i of sequence b (page page_owner[p] = b * max_pages + i / 256).
// Slots past seq_lens[b] are zero. page_owner: [P].
cudaError_t FillPagesBf16(uint16_t* pages, int64_t num_pages, int heads_kv, int head_dim,
                          int max_pages, const int32_t* page_owner, const int32_t* seq_lens,
                          ChannelDistribution dist, uint64_t seed, cudaStream_t stream);

// queries [B][H_q][d] float, standard normal from the hash of (seed, b, h, c).
cudaError_t FillQueries(float* queries, int batch, int heads_q, int head_dim, uint64_t seed,
                        cudaStream_t stream);

// *amax_bits = max(*amax_bits, bits of max |x|) over n bfloat16 values (|x| as uint32 orders like
// the float). The caller zeroes *amax_bits first.
cudaError_t AbsMaxBf16(const uint16_t* x, int64_t n, uint32_t* amax_bits, cudaStream_t stream);

// out[i] = Fp8E4m3Encode(bf16(in[i]) / scale), exactly readkv::codec's encoder.
cudaError_t ConvertBf16ToFp8(const uint16_t* in, uint8_t* out, int64_t n, float scale,
                             cudaStream_t stream);

// Float rows [n][H_kv][d] of tokens (seq_ids[k], positions[k]) gathered from bfloat16 pages.
cudaError_t GatherTokensFloat(const uint16_t* pages, const int32_t* page_table, int max_pages,
                              int heads_kv, int head_dim, int tokens, const int32_t* seq_ids,
                              const int32_t* positions, float* out, cudaStream_t stream);

// Contiguous [B][H_kv][T][d] bfloat16 from the pages (every sequence must hold T tokens).
cudaError_t GatherContiguousBf16(const uint16_t* pages, const int32_t* page_table, int max_pages,
                                 int batch, int heads_kv, int head_dim, int64_t tokens,
                                 uint16_t* out, cudaStream_t stream);

// out[i] = bf16 round-to-nearest-even of in[i].
cudaError_t ConvertFloatToBf16(const float* in, uint16_t* out, int64_t n, cudaStream_t stream);

// Reads `bytes` (a multiple of 16) with 16-byte loads and folds them into *sink (so the loads
// cannot be elided); `blocks` thread blocks of 512 threads.
cudaError_t StreamRead(const void* buffer, int64_t bytes, int blocks, uint32_t* sink,
                       cudaStream_t stream);

// One thread that spins for `nanoseconds` on the global timer.
cudaError_t Spin(int64_t nanoseconds, cudaStream_t stream);

}  // namespace readkv::cuda::bench
