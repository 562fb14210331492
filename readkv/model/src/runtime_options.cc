// The runtime options' checks (ValidateRuntimeOptions, runtime.h) and their shared reading
// (runtime_options.h): which backend runs where, and a request's ReadKV policy.
#include "runtime_options.h"

#include <stdexcept>
#include <string>

#include "llama_internal.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/key_bytes.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/tile_reader.h"

namespace readkv::model {
namespace internal {

bool IsCodecBackend(codec::KvBackend kind) {
  switch (kind) {
    case codec::KvBackend::kDense:
      return false;
    case codec::KvBackend::kFp8:
    case codec::KvBackend::kReadKv:
      return true;
  }
  return false;
}

bool UsesGpuKv(const RuntimeOptions& options) {
  return options.device != "cpu" && IsCodecBackend(options.kv.kind);
}

readkv::cuda::OnePassMode ServedOnePassMode(const std::string& text) {
  readkv::cuda::OnePassMode mode = readkv::cuda::OnePassMode::kAuto;
  if (!readkv::cuda::ParseOnePassMode(text, &mode) || mode == readkv::cuda::OnePassMode::kOn) {
    throw std::invalid_argument("one_pass: must be auto or off, got \"" + text + "\"");
  }
  return mode;
}

codec::ReadPolicy ResolvePolicy(const KvCacheOptions& kv, const engine::ReadPolicy& request) {
  codec::ReadPolicy p;
  // A request's reader is text from the wire (engine::ReadPolicy); the server's is typed.
  p.reader = request.reader ? codec::ParseReaderKind(*request.reader) : kv.reader;
  p.read_bits = request.read_bits.value_or(kv.read_bits);
  std::optional<double> rk, rv;
  if (request.key_bits || request.value_bits) {
    rk = request.key_bits;
    rv = request.value_bits;
  } else if (!request.read_bits) {
    rk = kv.key_bits;
    rv = kv.value_bits;
  }
  if (rk && !rv) rv = 2.0 * p.read_bits - *rk;
  if (rv && !rk) rk = 2.0 * p.read_bits - *rv;
  if (rk && rv) {
    p.key_bits = *rk;
    p.value_bits = *rv;
  }
  p.value_window_tokens = kv.value_window_tokens;  // the server's; requests do not set it
  p.value_window_local = kv.value_window_local;
  return p;
}

void CheckCudaRequestReader(const KvCacheOptions& kv, const codec::ReadPolicy& resolved) {
  if (resolved.reader == kv.reader) return;
  const std::string server(codec::ReaderName(kv.reader));
  throw std::invalid_argument("reader: this server's CUDA KV cache is written for the " + server +
                              " reader (--reader " + server + "), so it cannot serve the " +
                              std::string(codec::ReaderName(resolved.reader)) +
                              " reader the request asked for");
}

}  // namespace internal

using internal::IsCodecBackend;
using internal::ResolvePolicy;
using internal::UsesGpuKv;

void ValidateRuntimeOptions(const RuntimeOptions& options) {
  const KvCacheOptions& kv = options.kv;
  internal::ParseDtype(options.dtype, "dtype");
  if (options.device != "cpu" && options.device != "cuda" &&
      options.device.rfind("cuda:", 0) != 0) {
    throw std::invalid_argument("device: must be cpu, cuda or cuda:N, got \"" + options.device +
                                "\"");
  }
  if (options.kv_capacity_bytes <= 0) {
    throw std::invalid_argument("kv_capacity_bytes: must be positive");
  }
  if (kv.value_window_tokens != 0 && kv.kind != codec::KvBackend::kReadKv) {
    throw std::invalid_argument("value_window: only a ReadKV cache's tile reader has Value "
                                "windows, got --kv " + std::string(codec::KvBackendName(kv.kind)));
  }
  if (internal::ServedOnePassMode(kv.one_pass) == readkv::cuda::OnePassMode::kOff &&
      (kv.kind != codec::KvBackend::kReadKv || !UsesGpuKv(options))) {
    throw std::invalid_argument("one_pass: only the CUDA tile reader (--kv readkv on a CUDA "
                                "device) has a one-pass kernel to turn off");
  }
  if (kv.byte_keys && kv.kind != codec::KvBackend::kReadKv) {
    throw std::invalid_argument("byte_keys: only a ReadKV cache's tile reader stores byte keys, "
                                "got --kv " + std::string(codec::KvBackendName(kv.kind)));
  }
  if (kv.kind == codec::KvBackend::kReadKv) {
    const int window = kv.value_window_tokens;
    if (kv.value_window_local && UsesGpuKv(options)) {
      throw std::invalid_argument(
          "value_window: Value weights normalised per window (--value-window-local) run on the "
          "CPU tile reader only");
    }
    if (window != 0 && UsesGpuKv(options) &&
        (window < 512 || window > 2048 || window % 512 != 0)) {
      throw std::invalid_argument(
          "value_window: the CUDA tile reader's Value windows are its chunks: 512, 1024, 1536 "
          "or 2048 tokens, got " + std::to_string(window));
    }
    // MakeReaderPlan checks store_bits, read_bits, reader, the split and the Value window,
    // naming the field.
    const codec::ReadPolicy policy = ResolvePolicy(kv, engine::ReadPolicy{});
    const codec::ReaderPlan plan = codec::MakeReaderPlan(policy, kv.store_bits);
    if (UsesGpuKv(options) && policy.reader != codec::ReaderKind::kTile) {
      // The constrained reader's GPU kernels were deleted once the tile reader was faster (issue
      // 37); it stays on the CPU, as the flexible and full readers do.
      throw std::invalid_argument(
          "reader: on a CUDA device ReadKV runs the tile reader only: use --reader tile (and "
          "--byte-keys for byte keys), or --device cpu for the " +
          std::string(codec::ReaderName(policy.reader)) + " reader, " +
          (policy.reader == codec::ReaderKind::kConstrained
               ? "whose GPU kernels were removed once the tile reader was faster"
               : "which has no GPU kernel"));
    }
    // Checks the cap's range and the threshold against the tree, naming the field.
    const codec::LloydTree tree(kv.store_bits);
    codec::ResolveOutlierOptions({kv.outlier_cap, kv.outlier_threshold}, tree, 8);
    if (!kv.fp8_layers.empty() && (UsesGpuKv(options) || !options.prefix_cache.directory.empty())) {
      throw std::invalid_argument(
          "fp8_layers: FP8 layers inside a ReadKV cache run on the CPU without a prefix cache");
    }
    if (kv.byte_keys) {
      if (policy.reader != codec::ReaderKind::kTile || kv.store_bits != codec::kKeyByteStoreBits) {
        throw std::invalid_argument("byte_keys: byte keys are the tile reader's, with W = 8 "
                                    "(--reader tile --store-bits 8)");
      }
      codec::RequireWholeKeys(plan);  // "kv_split"
    }
  }
  if (!options.prefix_cache.directory.empty()) {
    if (kv.kind != codec::KvBackend::kReadKv) {
      throw std::invalid_argument(
          "cache_dir: the persistent prefix cache stores ReadKV objects and needs --kv readkv, "
          "got \"" + std::string(codec::KvBackendName(kv.kind)) + "\"");
    }
    if (kv.prefill != PrefillAttention::kDense) {
      throw std::invalid_argument("cache_dir: the persistent prefix cache needs --prefill dense");
    }
    if (UsesGpuKv(options)) {
      throw std::invalid_argument(
          "cache_dir: the persistent prefix cache runs with --device cpu only (its objects are "
          "restored into the CPU codec caches)");
    }
  }
  if (options.prefix_cache.max_bytes < 0) {
    throw std::invalid_argument("cache_max_bytes: must be >= 0");
  }
  if (options.cuda_graphs != "auto" && options.cuda_graphs != "on" &&
      options.cuda_graphs != "off") {
    throw std::invalid_argument("cuda_graphs: must be auto, on or off, got \"" +
                                options.cuda_graphs + "\"");
  }
  if (options.cuda_graphs == "on" && !UsesGpuKv(options)) {
    throw std::invalid_argument(
        "cuda_graphs: graphs replay the decode steps of fp8/readkv on a CUDA device; \"on\" "
        "needs --device cuda and --kv fp8 or readkv");
  }
}

}  // namespace readkv::model
