#include "gpu_kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gpu_kv_pools.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/fp8_cache.h"
#include "readkv/cuda/codec_tables.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_attention.h"

namespace readkv::model::internal {
namespace {

// A call's geometry. min_tokens (the shortest sequence, 0 if unknown) lets the dense and FP8
// kernels take their cluster schedule when the batch's lengths are even.
rc::DecodeShape Shape(const GpuKvConfig& c, int batch, int max_pages, int max_tokens,
                      int min_tokens = 0) {
  rc::DecodeShape shape;
  shape.batch = batch;
  shape.heads_q = c.heads_q;
  shape.heads_kv = c.heads_kv;
  shape.head_dim = c.head_dim;
  shape.max_pages = max_pages;
  shape.max_tokens = max_tokens;
  shape.min_tokens = min_tokens;
  return shape;
}

}  // namespace

GpuKvCache::GpuKvCache(const GpuKvConfig& config)
    : config_(config),
      pools_(std::make_unique<Pools>()),
      encode_timer_(std::make_unique<rc::StreamTimer>()),
      attend_timer_(std::make_unique<rc::StreamTimer>()) {
  if (config.kind != codec::KvBackend::kFp8 && config.kind != codec::KvBackend::kReadKv) {
    throw std::invalid_argument("kv: the CUDA KV backends are fp8 and readkv, got \"" +
                                std::string(codec::KvBackendName(config.kind)) + "\"");
  }
  if (config.head_dim != 64 && config.head_dim != 128) {
    throw std::invalid_argument("head_dim: the CUDA KV backends need 64 or 128, got " +
                                std::to_string(config.head_dim));
  }
  const int g = config.heads_kv > 0 ? config.heads_q / config.heads_kv : 0;
  if (g < 1 || g > 8 || (g & (g - 1)) != 0 || g * config.heads_kv != config.heads_q) {
    throw std::invalid_argument("heads: the CUDA KV backends need H_q / H_kv in {1, 2, 4, 8}, got " +
                                std::to_string(config.heads_q) + " / " +
                                std::to_string(config.heads_kv));
  }
  if (config.outliers.enabled() && config.kind != codec::KvBackend::kReadKv) {
    throw std::invalid_argument(
        "outlier_cap: on a CUDA device only ReadKV's tile reader applies outlier lists");
  }
  if (config.outliers.enabled() && config.outliers.block_cap != rc::kPageOutlierEntries) {
    throw std::invalid_argument("outlier_block_cap: the GPU page blocks hold " +
                                std::to_string(rc::kPageOutlierEntries) + " entries, got " +
                                std::to_string(config.outliers.block_cap));
  }
  if (config.byte_keys && (config.kind != codec::KvBackend::kReadKv || config.store_bits != 8)) {
    throw std::invalid_argument("byte_keys: byte keys are the tile reader's, with W = 8");
  }
  if (!config.calibration) throw std::invalid_argument("calibration: required");
  Check(rc::SetDevice(config.device.has_index() ? config.device.index() : 0), "set device");
  const codec::Calibration& cal = *config.calibration;
  const int hkv = config.heads_kv, d = config.head_dim;
  Pools& p = *pools_;
  if (config.kind == codec::KvBackend::kFp8) {
    // The CPU cache's own scales (amax / 448 per tensor or per KV head), so both write the same
    // codes.
    std::vector<float> ks, vs;
    for (int l = 0; l < config.layers; ++l) {
      const codec::Fp8LayerCache layer({config.heads_q, hkv, d}, cal, l, config.fp8_scale);
      for (int h = 0; h < hkv; ++h) {
        ks.push_back(layer.key_scale(h));
        vs.push_back(layer.value_scale(h));
      }
    }
    p.k_scales = Upload(ks, config.device);
    p.v_scales = Upload(vs, config.device);
  } else {
    const rc::ReadKvHostTables t =
        rc::MakeReadKvHostTables(cal.seeds, config.layers, hkv, d, config.store_bits);
    p.key_steps = t.key_steps;
    p.key_mean = Upload(cal.key_mean, config.device);
    p.key_std = Upload(cal.key_std, config.device);
    p.value_mean = Upload(cal.value_mean, config.device);
    p.value_std = Upload(cal.value_std, config.device);
    p.key_signs = Upload(t.key_signs, config.device);
    p.value_signs = Upload(t.value_signs, config.device);
    p.boundaries = Upload(t.boundaries, config.device);
    p.key_increments = Upload(t.key_increments, config.device);
    device_totals_ = torch::zeros({2}, torch::TensorOptions().dtype(torch::kLong).device(config.device));
    p.tile_centroids = rc::tile::MakeTileCentroids(codec::LloydTree(config.store_bits));
    sm_count_ = rc::MultiprocessorCount(config.device.has_index() ? config.device.index() : 0);
    if (sm_count_ < 1) throw std::runtime_error("cuda: could not read the device's SM count");
    if (Lists()) {
      outlier_counters_ =
          torch::zeros({4}, torch::TensorOptions().dtype(torch::kLong).device(config.device));
      p.k_lists.resize(static_cast<size_t>(config.layers));
      p.v_lists.resize(static_cast<size_t>(config.layers));
    }
  }
  p.k.resize(static_cast<size_t>(config.layers));
  p.v.resize(static_cast<size_t>(config.layers));
}

GpuKvCache::~GpuKvCache() = default;

int64_t GpuKvCache::PageBytes() const {
  const int64_t hkv = config_.heads_kv, d = config_.head_dim;
  if (config_.kind == codec::KvBackend::kFp8) return 2 * hkv * rc::kPageTokens * d;
  const int64_t lists = Lists() ? 2 * hkv * rc::kPageOutlierBlockBytes : 0;  // K and V blocks
  // The key and value tile pools: 16 token tiles of d / 16 groups x W planes x 32 bytes each.
  return 2 * hkv * (rc::kPageTokens / 16) * (d / 16) * config_.store_bits * 32 + lists;
}

void GpuKvCache::Grow(int64_t pages) {
  const int64_t count = std::max({pages, 2 * pool_pages_, int64_t{16}});
  const int64_t hkv = config_.heads_kv, d = config_.head_dim, w = config_.store_bits;
  std::vector<int64_t> k_shape, v_shape;
  if (config_.kind == codec::KvBackend::kFp8) {
    k_shape = v_shape = {count, hkv, rc::kPageTokens, d};
  } else {  // the tile pools
    k_shape = v_shape = {count, hkv, rc::kPageTokens / 16, d / 16, w, 32};
  }
  const auto opts = torch::TensorOptions().dtype(torch::kByte).device(config_.device);
  Pools& p = *pools_;
  for (size_t l = 0; l < p.k.size(); ++l) {
    torch::Tensor k = torch::zeros(k_shape, opts);
    torch::Tensor v = torch::zeros(v_shape, opts);
    if (pool_pages_ > 0) {
      k.narrow(0, 0, pool_pages_).copy_(p.k[l]);
      v.narrow(0, 0, pool_pages_).copy_(p.v[l]);
    }
    p.k[l] = k;
    p.v[l] = v;
  }
  // The outlier pools grow alike (zeroed: an empty block per new page).
  const auto words = torch::TensorOptions().dtype(torch::kInt).device(config_.device);
  for (size_t l = 0; l < p.k_lists.size(); ++l) {
    for (torch::Tensor* lists : {&p.k_lists[l], &p.v_lists[l]}) {
      torch::Tensor grown = torch::zeros({count, hkv, rc::kPageOutlierBlockWords}, words);
      if (pool_pages_ > 0) grown.narrow(0, 0, pool_pages_).copy_(*lists);
      *lists = grown;
    }
  }
  // Fresh pages are handed out lowest first.
  for (int64_t i = count - 1; i >= pool_pages_; --i) free_pages_.push_back(static_cast<int32_t>(i));
  pool_pages_ = count;
}

void GpuKvCache::Reserve(Sequence& s, int64_t tokens) {
  const auto need = static_cast<size_t>((tokens + rc::kPageTokens - 1) / rc::kPageTokens);
  if (s.pages.size() >= need) return;
  const auto more = static_cast<int64_t>(need - s.pages.size());
  if (static_cast<int64_t>(free_pages_.size()) < more) {
    Grow(pool_pages_ + more - static_cast<int64_t>(free_pages_.size()));
  }
  std::vector<int64_t> handed;
  while (s.pages.size() < need) {
    s.pages.push_back(free_pages_.back());
    handed.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  if (config_.kind == codec::KvBackend::kReadKv) {
    // The append kernels OR bits into place: a reused page must start zero.
    const torch::Tensor index = Upload(handed, config_.device);
    for (size_t l = 0; l < pools_->k.size(); ++l) {
      pools_->k[l].index_fill_(0, index, 0);
      pools_->v[l].index_fill_(0, index, 0);
    }
    for (size_t l = 0; l < pools_->k_lists.size(); ++l) {  // and so must its outlier blocks
      pools_->k_lists[l].index_fill_(0, index, 0);
      pools_->v_lists[l].index_fill_(0, index, 0);
    }
  }
}

void GpuKvCache::AddSequence(uint64_t id, GpuReadBits bits) {
  if (!sequences_.emplace(id, Sequence{bits, {}}).second) {
    throw std::invalid_argument("sequence_id: " + std::to_string(id) + " is already live");
  }
}

void GpuKvCache::RemoveSequence(uint64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  free_pages_.insert(free_pages_.end(), it->second.pages.rbegin(), it->second.pages.rend());
  sequences_.erase(it);
}

int64_t GpuKvCache::SequenceBytes(uint64_t id) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return 0;
  return static_cast<int64_t>(it->second.pages.size()) * config_.layers * PageBytes();
}

GpuKvCache::Step GpuKvCache::Begin(std::span<const uint64_t> ids, std::span<const int64_t> starts,
                                   std::span<const int64_t> counts) {
  if (ids.empty() || ids.size() != starts.size() || ids.size() != counts.size()) {
    throw std::invalid_argument("step: ids, starts and counts must be non-empty and equal");
  }
  Check(rc::SetDevice(config_.device.has_index() ? config_.device.index() : 0), "set device");
  Step step;
  step.batch = static_cast<int>(ids.size());
  std::vector<Sequence*> seqs;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = sequences_.find(ids[i]);
    if (it == sequences_.end()) {
      throw std::invalid_argument("sequence_id: " + std::to_string(ids[i]) + " is not live");
    }
    const int64_t length = starts[i] + counts[i];
    if (starts[i] < 0 || counts[i] < 0 || length < 1) {
      throw std::invalid_argument("step: sequence " + std::to_string(ids[i]) +
                                  " would hold no tokens");
    }
    Reserve(it->second, length);
    seqs.push_back(&it->second);
    step.lengths.push_back(static_cast<int32_t>(length));
    step.read_bits.push_back(it->second.read_bits);
    step.tokens += static_cast<int>(counts[i]);
    step.max_tokens = std::max(step.max_tokens, static_cast<int>(length));
    step.max_pages = std::max(step.max_pages, static_cast<int>(it->second.pages.size()));
  }
  // One upload: page table, lengths, token rows, token positions.
  const auto b = static_cast<size_t>(step.batch), mp = static_cast<size_t>(step.max_pages);
  std::vector<int32_t> host(b * mp + b + 2 * static_cast<size_t>(step.tokens), 0);
  for (size_t i = 0; i < b; ++i) {
    std::copy(seqs[i]->pages.begin(), seqs[i]->pages.end(), host.begin() + static_cast<std::ptrdiff_t>(i * mp));
    host[b * mp + i] = step.lengths[i];
  }
  size_t t = 0;
  const size_t rows = b * mp + b, positions = rows + static_cast<size_t>(step.tokens);
  for (size_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < counts[i]; ++j, ++t) {
      host[rows + t] = static_cast<int32_t>(i);
      host[positions + t] = static_cast<int32_t>(starts[i] + j);
    }
  }
  const torch::Tensor all = Upload(host, config_.device);
  step.page_table = all.narrow(0, 0, static_cast<int64_t>(b * mp)).view({step.batch, step.max_pages});
  step.seq_lens = all.narrow(0, static_cast<int64_t>(b * mp), step.batch);
  step.token_rows = all.narrow(0, static_cast<int64_t>(rows), step.tokens);
  step.token_positions = all.narrow(0, static_cast<int64_t>(positions), step.tokens);
  return step;
}

void GpuKvCache::Append(const Step& step, int layer, const torch::Tensor& k,
                        const torch::Tensor& v) {
  if (step.tokens == 0) return;
  const torch::Tensor kf = k.to(torch::kFloat).contiguous();
  const torch::Tensor vf = v.to(torch::kFloat).contiguous();
  if (kf.numel() != int64_t{step.tokens} * config_.heads_kv * config_.head_dim ||
      vf.numel() != kf.numel()) {
    throw std::invalid_argument("tokens: K/V rows do not match the step's appended tokens");
  }
  const rc::DecodeShape shape = Shape(config_, step.batch, step.max_pages, step.max_tokens);
  const auto l = static_cast<size_t>(layer);
  const auto* rows = Ptr<const int32_t>(step.token_rows);
  const auto* positions = Ptr<const int32_t>(step.token_positions);
  const auto* table = Ptr<const int32_t>(step.page_table);
  encode_timer_->Begin();
  if (config_.kind == codec::KvBackend::kFp8) {
    const int64_t off = int64_t{layer} * config_.heads_kv;
    const rc::Fp8CacheWrite cache{Ptr<uint8_t>(pools_->k[l]), Ptr<uint8_t>(pools_->v[l]),
                                  Ptr<const float>(pools_->k_scales, off),
                                  Ptr<const float>(pools_->v_scales, off)};
    Check(rc::Fp8Append(shape, step.tokens, Ptr<const float>(kf), Ptr<const float>(vf), rows,
                        positions, table, cache, nullptr),
          "Fp8Append");
  } else {
    rc::TileCache cache{Ptr<uint8_t>(pools_->k[l]), Ptr<uint8_t>(pools_->v[l])};
    cache.byte_keys = config_.byte_keys;
    if (Lists()) {  // Begin's tokens: by sequence, positions ascending (TileAppend's contract)
      const size_t bytes = rc::TileAppendOutlierWorkspaceBytes(step.tokens, config_.heads_kv,
                                                               config_.outliers.cap);
      if (!append_workspace_.defined() || static_cast<size_t>(append_workspace_.numel()) < bytes) {
        append_workspace_ = torch::empty(
            {static_cast<int64_t>(bytes)},
            torch::TensorOptions().dtype(torch::kByte).device(config_.device));
      }
      cache.key_outlier_pages = Ptr<uint32_t>(pools_->k_lists[l]);
      cache.value_outlier_pages = Ptr<uint32_t>(pools_->v_lists[l]);
      cache.outlier_cap = config_.outliers.cap;
      cache.outlier_threshold = config_.outliers.threshold;
      cache.outlier_workspace = append_workspace_.data_ptr();
      cache.outlier_dropped = Ptr<unsigned long long>(outlier_counters_);
    }
    Check(rc::TileAppend(shape, step.tokens, Ptr<const float>(kf), Ptr<const float>(vf), rows,
                         positions, table,
                         pools_->Codec(layer, config_.heads_kv, config_.head_dim,
                                       config_.store_bits),
                         cache, nullptr),
          "TileAppend");
  }
  encode_timer_->End();
}

torch::Tensor GpuKvCache::Workspace(size_t bytes) {
  if (!workspace_.defined() || static_cast<size_t>(workspace_.numel()) < bytes) {
    workspace_ = torch::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))},
                              torch::TensorOptions().dtype(torch::kByte).device(config_.device));
  }
  host_ledgers_.workspace_peak_bytes =
      std::max(host_ledgers_.workspace_peak_bytes, static_cast<int64_t>(bytes));
  return workspace_;
}

torch::Tensor GpuKvCache::Attend(const Step& step, int layer, const torch::Tensor& q) {
  attend_timer_->Begin();
  torch::Tensor out = AttendTimed(step, layer, q);
  attend_timer_->End();
  return out;
}

torch::Tensor GpuKvCache::AttendTimed(const Step& step, int layer, const torch::Tensor& q) {
  const torch::Tensor qf = q.to(torch::kFloat).contiguous();
  if (qf.numel() != int64_t{step.batch} * config_.heads_q * config_.head_dim) {
    throw std::invalid_argument("queries: need [B, H_q, d] for the step's sequences");
  }
  // Sequences that share budgets R_K, R_V go through one launch sequence.
  std::map<GpuReadBits, std::vector<int>> groups;
  for (int i = 0; i < step.batch; ++i) {
    groups[config_.kind == codec::KvBackend::kFp8 ? GpuReadBits{}
                                                  : step.read_bits[static_cast<size_t>(i)]]
        .push_back(i);
  }
  if (groups.size() == 1) {
    return AttendGroup(step, layer, qf, groups.begin()->second, groups.begin()->first);
  }
  torch::Tensor out = torch::empty({step.batch, config_.heads_q, config_.head_dim},
                                   qf.options());
  for (const auto& [bits, rows] : groups) {
    const torch::Tensor index =
        Upload(std::vector<int64_t>(rows.begin(), rows.end()), config_.device);
    out.index_copy_(0, index, AttendGroup(step, layer, qf, rows, bits));
  }
  return out;
}

torch::Tensor GpuKvCache::AttendGroup(const Step& step, int layer, const torch::Tensor& q,
                                      std::span<const int> rows, GpuReadBits bits) {
  std::vector<int32_t> lengths;
  for (int r : rows) lengths.push_back(step.lengths[static_cast<size_t>(r)]);
  const rc::DecodeShape shape =
      Shape(config_, static_cast<int>(rows.size()), step.max_pages,
            *std::max_element(lengths.begin(), lengths.end()),
            *std::min_element(lengths.begin(), lengths.end()));
  torch::Tensor qg = q, table = step.page_table, lens = step.seq_lens;
  if (shape.batch != step.batch) {
    const torch::Tensor index =
        Upload(std::vector<int64_t>(rows.begin(), rows.end()), config_.device);
    qg = q.index_select(0, index).contiguous();
    table = step.page_table.index_select(0, index).contiguous();
    lens = step.seq_lens.index_select(0, index).contiguous();
  }
  if (Tile()) return AttendTile(layer, qg, table, lens, lengths, step.max_pages, bits);
  torch::Tensor out = torch::empty({shape.batch, config_.heads_q, config_.head_dim}, q.options());
  rc::DecodeInputs in;
  in.queries = Ptr<const float>(qg);
  in.page_table = Ptr<const int32_t>(table);
  in.seq_lens = Ptr<const int32_t>(lens);
  in.out = Ptr<float>(out);
  const auto l = static_cast<size_t>(layer);
  const int64_t off = int64_t{layer} * config_.heads_kv;  // fp8: the layer's scales
  const rc::Fp8Cache cache{Ptr<const uint8_t>(pools_->k[l]), Ptr<const uint8_t>(pools_->v[l]),
                           Ptr<const float>(pools_->k_scales, off),
                           Ptr<const float>(pools_->v_scales, off)};
  torch::Tensor ws = Workspace(rc::SplitDecodeWorkspaceBytes(shape));
  Check(rc::Fp8DecodeAttention(shape, in, cache, ws.data_ptr(), nullptr), "Fp8DecodeAttention");
  host_ledgers_.logical_read_bytes += rc::Fp8LogicalBytes(shape, lengths.data());
  host_ledgers_.physical_traffic_bytes += rc::Fp8DecodeTraffic(shape, lengths.data()).Total();
  return out;
}

GpuKvLedgers GpuKvCache::ledgers() const {
  GpuKvLedgers out = host_ledgers_;
  if (device_totals_.defined()) {
    const torch::Tensor totals = device_totals_.to(torch::kCPU);
    const int64_t* t = totals.data_ptr<int64_t>();
    out.logical_read_bytes += t[0] / 8;
    out.physical_traffic_bytes += t[1];
  }
  if (outlier_counters_.defined()) {
    const torch::Tensor counters = outlier_counters_.to(torch::kCPU);
    const int64_t* c = counters.data_ptr<int64_t>();
    out.outlier_past_cap = c[0];
    out.outlier_over_budget = c[1];
    out.outlier_out_of_order = c[2];
    out.logical_read_bytes += 4 * c[3];  // the entries the kernels read, 4 bytes each
    out.physical_traffic_bytes += 4 * c[3];
    out.outlier_read_bytes += 4 * c[3];
  }
  out.encode_seconds = encode_timer_->Seconds();
  out.attention_seconds = attend_timer_->Seconds();
  return out;
}

}  // namespace readkv::model::internal
