// LlamaDecodeModel: loading (config, weights, calibration, the KV backend, the prefix cache) and
// the public accessors. Its steps are in the files runtime_impl.h names.
#include "readkv/model/runtime.h"

#include <malloc.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>

#include "readkv/codec/errors.h"
#include "readkv/codec/outliers.h"
#include "readkv/model/errors.h"
#include "readkv/model/model_calibration.h"
#include "runtime_impl.h"
#include "runtime_options.h"

namespace readkv::model {

using internal::IsCodecBackend;
using internal::LayerWeights;
using internal::UsesGpuKv;


namespace {

// CPU inference frees and re-allocates tensors of a few MiB every layer (prefill score blocks,
// activations). glibc's defaults hand such blocks back to the kernel with munmap or trim the heap
// top at once, so every layer faults fresh pages in again: measured on an 8K-token prefill
// (fp8, one thread), 8.9 s of system time against 10 s of user time; 1.4 s with these settings.
// The threshold is glibc's largest (32 MiB on 64-bit); larger blocks are mapped as before.
void TuneCpuAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    mallopt(M_TOP_PAD, 64 << 20);
  });
}

}  // namespace

LlamaDecodeModel::LlamaDecodeModel(const std::string& model_dir, const RuntimeOptions& options)
    : impl_(std::make_unique<Impl>()) {
  ValidateRuntimeOptions(options);
  if (options.device == "cpu") TuneCpuAllocator();
  Impl& m = *impl_;
  m.options = options;
  m.config = ModelConfig::Load(model_dir);
  if (options.kv.kind != codec::KvBackend::kDense &&
      (m.config.head_dim & (m.config.head_dim - 1)) != 0) {
    throw ModelFormatError("head_dim", "fp8/readkv caches need a power-of-two head_dim");
  }
  if (options.threads > 0) torch::set_num_threads(options.threads);
  m.device = internal::ParseDevice(options.device);
  m.dtype = internal::ParseDtype(options.dtype, "dtype");
  const std::string weights_path = model_dir + "/model.safetensors";
  m.digest = FileDigest(weights_path);
  m.weights = internal::LoadWeights(weights_path, m.config).To(m.device, m.dtype);
  for (LayerWeights& lw : m.weights.layers) {
    // The three projections become views into the stacked weight: one copy of each in memory.
    const torch::Tensor stacked = torch::cat({lw.wq, lw.wk, lw.wv}, 0).contiguous();
    const int64_t q_rows = lw.wq.size(0), kv_rows = lw.wk.size(0);
    lw.wq = stacked.narrow(0, 0, q_rows);
    lw.wk = stacked.narrow(0, q_rows, kv_rows);
    lw.wv = stacked.narrow(0, q_rows + kv_rows, kv_rows);
    m.wqkv.push_back(stacked);
  }
  m.rope = internal::MakeRope(m.config, m.device);
  if (IsCodecBackend(options.kv.kind)) {
    const std::string path = options.calibration_path.empty() ? model_dir + "/calibration.json"
                                                              : options.calibration_path;
    ModelCalibration cal = ModelCalibration::Load(path);
    if (cal.weights_digest != m.digest) {
      throw codec::IdentityMismatch("weights_digest", m.digest, cal.weights_digest);
    }
    auto require = [](const char* field, long long want, long long found) {
      if (want != found) {
        throw codec::IdentityMismatch(field, std::to_string(want), std::to_string(found));
      }
    };
    require("layers", m.config.num_hidden_layers, cal.calibration.layers);
    require("heads_kv", m.config.num_key_value_heads, cal.calibration.kv_heads);
    require("head_dim", m.config.head_dim, cal.calibration.head_dim);
    m.calibration = std::make_shared<const codec::Calibration>(cal.calibration);
    m.calibration_digest = cal.calibration.Digest();
    if (options.kv.kind == codec::KvBackend::kReadKv) {
      m.codebook = std::make_shared<const codec::LloydTree>(options.kv.store_bits);
    }
  }
  if (UsesGpuKv(options)) {
    internal::GpuKvConfig g;
    g.kind = options.kv.kind;
    g.layers = m.config.num_hidden_layers;
    g.heads_q = m.hq();
    g.heads_kv = m.hkv();
    g.head_dim = m.hd();
    g.device = m.device;
    g.calibration = m.calibration;
    g.fp8_scale = options.kv.fp8_scale;
    g.store_bits = options.kv.store_bits;
    g.value_window_tokens = options.kv.value_window_tokens;
    g.byte_keys = options.kv.byte_keys;
    g.one_pass = internal::ServedOnePassMode(options.kv.one_pass);
    if (options.kv.kind == codec::KvBackend::kReadKv) {
      g.outliers = codec::ResolveOutlierOptions(
          {options.kv.outlier_cap, options.kv.outlier_threshold}, *m.codebook, m.hd());
    }
    m.gpu = std::make_unique<internal::GpuKvCache>(g);
    if (options.cuda_graphs == "on" && !internal::CudaGraph::Supported()) {
      throw std::invalid_argument(
          "cuda_graphs: \"on\", but this build's libtorch has no CUDA graphs (use auto or off)");
    }
    m.use_graphs = options.cuda_graphs != "off" && internal::CudaGraph::Supported();
  }
  m.identity = cache_identity();
  if (!options.prefix_cache.directory.empty()) {
    for (int l = 0; l < m.config.num_hidden_layers; ++l) {
      for (int h = 0; h < m.hkv(); ++h) {
        m.key_transforms.emplace_back(m.hd(), m.calibration->seeds.KeySeed(l, h));
        m.value_transforms.emplace_back(m.hd(), m.calibration->seeds.ValueSeed(l, h));
      }
    }
    m.prefix_store = std::make_unique<PrefixCacheStore>(
        PrefixCacheStoreOptions{options.prefix_cache.directory, options.prefix_cache.max_bytes,
                                options.prefix_cache.warn},
        m.identity);
  }
}

LlamaDecodeModel::~LlamaDecodeModel() = default;

std::string LlamaDecodeModel::model_id() const { return impl_->config.model_id; }
int LlamaDecodeModel::vocab_size() const { return impl_->config.vocab_size; }
int LlamaDecodeModel::max_context() const { return impl_->config.max_position_embeddings; }
int32_t LlamaDecodeModel::bos_token() const { return impl_->config.bos_token_id; }
int32_t LlamaDecodeModel::eos_token() const { return impl_->config.eos_token_id; }
std::string LlamaDecodeModel::kv_backend() const {
  return std::string(codec::KvBackendName(impl_->options.kv.kind));
}
int64_t LlamaDecodeModel::kv_bytes_limit() const { return impl_->options.kv_capacity_bytes; }
const ModelConfig& LlamaDecodeModel::config() const { return impl_->config; }
const std::string& LlamaDecodeModel::weights_digest() const { return impl_->digest; }
void LlamaDecodeModel::set_kv_observer(KvObserver observer) {
  impl_->observer = std::move(observer);
}

int64_t LlamaDecodeModel::sequence_length(uint64_t sequence_id) const {
  auto it = impl_->sequences.find(sequence_id);
  if (it == impl_->sequences.end()) {
    throw std::invalid_argument("sequence_id: " + std::to_string(sequence_id) + " is not live");
  }
  return it->second.length;
}

codec::CacheIdentity LlamaDecodeModel::cache_identity() const {
  const Impl& m = *impl_;
  codec::CacheIdentity id;
  id.model_id = m.config.model_id;
  id.weights_digest = m.digest;
  id.layers = m.config.num_hidden_layers;
  id.heads_q = m.config.num_attention_heads;
  id.heads_kv = m.config.num_key_value_heads;
  id.head_dim = m.config.head_dim;
  id.rope_theta = m.config.rope_theta;
  if (m.calibration) {
    id.key_transform_seed = m.calibration->seeds.key;
    id.value_transform_seed = m.calibration->seeds.value;
    id.calibration_digest = m.calibration_digest;
  }
  if (m.options.kv.kind == codec::KvBackend::kReadKv) {
    id.codebook_id = codec::LloydTree::kCodebookId;
    id.codebook_version = codec::LloydTree::kCodebookVersion;
    id.store_bits = m.options.kv.store_bits;
    const codec::OutlierOptions resolved = codec::ResolveOutlierOptions(
        {m.options.kv.outlier_cap, m.options.kv.outlier_threshold}, *m.codebook, m.hd());
    id.outlier_cap = resolved.cap;
    id.outlier_threshold = resolved.threshold;
    id.outlier_block_cap = resolved.block_cap;
    id.layout = codec::PlaneLayoutName(m.options.kv.byte_keys
                                           ? codec::PlaneLayout::kTilesByteKeys
                                           : codec::LayoutForReader(m.options.kv.reader));
  }
  return id;
}

PrefixCacheCounters LlamaDecodeModel::prefix_cache_counters() const {
  return impl_->prefix_store ? impl_->prefix_store->counters() : PrefixCacheCounters{};
}


std::unique_ptr<engine::DecodeModel> LoadDecodeModel(const std::string& model_dir,
                                                     const RuntimeOptions& options) {
  return std::make_unique<LlamaDecodeModel>(model_dir, options);
}

std::string DefaultModelDirectory() {
  if (const char* env = std::getenv("KVGATE_MODEL_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return KVGATE_DEFAULT_MODEL_DIR;
}

std::string FileDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFormatError("file", "cannot open " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return codec::ContentDigest(std::span<const uint8_t>(bytes));
}

}  // namespace readkv::model
