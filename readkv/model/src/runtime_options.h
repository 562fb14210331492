// Internal to readkv/model: the runtime options' shared reading (which backend runs where, and
// a request's ReadKV policy over the server's defaults). ValidateRuntimeOptions (runtime.h)
// checks them; runtime_options.cc defines both.
#pragma once

#include "readkv/codec/attention.h"
#include "readkv/codec/readers.h"
#include "readkv/cuda/one_pass_mode.h"
#include "readkv/model/runtime.h"

namespace readkv::model::internal {

// fp8 and readkv: the backends built on the codec's calibration.
bool IsCodecBackend(codec::KvBackend kind);

// fp8 and readkv on a CUDA device run on readkv::cuda's kernels (gpu_kv_cache.h).
bool UsesGpuKv(const RuntimeOptions& options);

// kv.one_pass read as the attention bench reads its --one-pass (readkv::cuda::ParseOnePassMode):
// "auto" or "off"; anything else, "on" included (forcing one pass is the bench's, a server
// chooses per call), is std::invalid_argument("one_pass: ...").
readkv::cuda::OnePassMode ServedOnePassMode(const std::string& text);

// The per-request ReadKV policy: request fields override the server defaults. A request that
// changes R without giving a split gets the equal split (the server's default split was chosen
// for the default R and need not average to another one).
codec::ReadPolicy ResolvePolicy(const KvCacheOptions& kv, const engine::ReadPolicy& request);

// On a CUDA device the ReadKV pools hold the layout of the server's reader (kv.reader, the tile
// reader: ValidateRuntimeOptions refuses any other there) for every sequence: a request resolved
// to another reader is refused with std::invalid_argument("reader: ...") naming both.
void CheckCudaRequestReader(const KvCacheOptions& kv, const codec::ReadPolicy& resolved);

}  // namespace readkv::model::internal
