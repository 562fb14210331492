#include "readkv/codec/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "readkv/codec/dense_cache.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/fp8_cache.h"
#include "readkv/codec/readkv_cache.h"

namespace readkv::codec {

void LayerGeometry::Validate() const {
  if (head_dim < 8 || head_dim > 1024 || (head_dim & (head_dim - 1)) != 0) {
    throw InvalidArgument("head_dim",
                          "must be a power of two in [8, 1024], got " + std::to_string(head_dim));
  }
  if (heads_kv < 1) {
    throw InvalidArgument("heads_kv", "must be >= 1, got " + std::to_string(heads_kv));
  }
  if (heads_q < 1 || heads_q % heads_kv != 0) {
    throw InvalidArgument("heads_q",
                          "must be a positive multiple of heads_kv=" + std::to_string(heads_kv) +
                              ", got " + std::to_string(heads_q));
  }
}

LayerKvCache::LayerKvCache(const LayerGeometry& geometry) : geometry_(geometry) {
  geometry_.Validate();
}

void LayerKvCache::CheckAppendShapes(std::span<const float> keys,
                                     std::span<const float> values) const {
  const auto want = static_cast<size_t>(geometry_.heads_kv) * geometry_.head_dim;
  if (keys.size() != want) {
    throw InvalidArgument("keys", "expected H_kv*d=" + std::to_string(want) + " floats, got " +
                                      std::to_string(keys.size()));
  }
  if (values.size() != want) {
    throw InvalidArgument("values", "expected H_kv*d=" + std::to_string(want) + " floats, got " +
                                        std::to_string(values.size()));
  }
}

void LayerKvCache::CheckAttendShapes(std::span<const float> queries,
                                     std::span<const float> out) const {
  const auto want = static_cast<size_t>(geometry_.heads_q) * geometry_.head_dim;
  if (queries.size() != want) {
    throw InvalidArgument("queries", "expected H_q*d=" + std::to_string(want) + " floats, got " +
                                         std::to_string(queries.size()));
  }
  if (out.size() != want) {
    throw InvalidArgument("out", "expected H_q*d=" + std::to_string(want) + " floats, got " +
                                     std::to_string(out.size()));
  }
  if (tokens() < 1) throw InvalidArgument("tokens", "cannot attend over an empty cache");
}

void LayerKvCache::AppendTokens(std::span<const float> keys, std::span<const float> values) {
  const auto row = static_cast<size_t>(geometry_.heads_kv) * geometry_.head_dim;
  if (keys.size() % row != 0 || keys.size() != values.size()) {
    throw InvalidArgument("keys", "AppendTokens needs equal [T][H_kv][d] keys and values");
  }
  for (size_t offset = 0; offset < keys.size(); offset += row) {
    Append(keys.subspan(offset, row), values.subspan(offset, row));
  }
}

std::string_view KvBackendName(KvBackend backend) {
  switch (backend) {
    case KvBackend::kDense:
      return "dense";
    case KvBackend::kFp8:
      return "fp8";
    case KvBackend::kReadKv:
      return "readkv";
  }
  return "unknown";
}

KvBackend ParseKvBackend(std::string_view name) {
  for (const KvBackend backend : kKvBackends) {
    if (name == KvBackendName(backend)) return backend;
  }
  throw InvalidArgument("kv", "must be dense, fp8 or readkv, got '" + std::string(name) + "'");
}

std::unique_ptr<LayerKvCache> MakeLayerKvCache(const LayerCacheConfig& config) {
  config.geometry.Validate();
  switch (config.backend) {
    case KvBackend::kDense:
      return std::make_unique<DenseLayerCache>(config.geometry, config.dense_storage);
    case KvBackend::kFp8:
      if (!config.calibration) {
        throw InvalidArgument("calibration", "the fp8 backend needs a calibration");
      }
      return std::make_unique<Fp8LayerCache>(config.geometry, *config.calibration, config.layer,
                                             config.fp8_scale);
    case KvBackend::kReadKv: {
      if (!config.calibration) {
        throw InvalidArgument("calibration", "the readkv backend needs a calibration");
      }
      std::shared_ptr<const LloydTree> codebook = config.codebook;
      if (!codebook) codebook = std::make_shared<const LloydTree>(config.store_bits);
      ReadKvCacheOptions options;
      options.store_bits = config.store_bits;
      options.policy = config.policy;
      options.residual_window = config.residual_window;
      options.outliers = config.outliers;
      options.layout = config.byte_keys ? PlaneLayout::kTilesByteKeys
                                        : LayoutForReader(config.policy.reader);
      return std::make_unique<ReadKvLayerCache>(config.geometry, config.calibration, config.layer,
                                                std::move(codebook), options);
    }
  }
  throw InvalidArgument("kv", "unknown backend");
}

std::vector<double> ReferenceAttention(const LayerGeometry& geometry, std::span<const float> keys,
                                       std::span<const float> values,
                                       std::span<const float> queries) {
  geometry.Validate();
  const int d = geometry.head_dim;
  const int hkv = geometry.heads_kv;
  const int g = geometry.group();
  const size_t row = static_cast<size_t>(hkv) * d;
  if (keys.empty() || keys.size() % row != 0 || values.size() != keys.size()) {
    throw InvalidArgument("keys", "needs equal, non-empty [T][H_kv][d] keys and values");
  }
  if (queries.size() != static_cast<size_t>(geometry.heads_q) * d) {
    throw InvalidArgument("queries", "expected [H_q][d]");
  }
  const size_t tokens = keys.size() / row;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(queries.size(), 0.0);
  std::vector<double> logits(tokens);
  for (int h = 0; h < geometry.heads_q; ++h) {
    const int kv = h / g;
    const float* q = queries.data() + static_cast<size_t>(h) * d;
    double max_logit = -INFINITY;
    for (size_t i = 0; i < tokens; ++i) {
      const float* k = keys.data() + i * row + static_cast<size_t>(kv) * d;
      double dot = 0.0;
      for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
      logits[i] = dot * scale;
      max_logit = std::max(max_logit, logits[i]);
    }
    double sum = 0.0;
    for (double& l : logits) {
      l = std::exp(l - max_logit);
      sum += l;
    }
    double* o = out.data() + static_cast<size_t>(h) * d;
    for (size_t i = 0; i < tokens; ++i) {
      const float* v = values.data() + i * row + static_cast<size_t>(kv) * d;
      const double p = logits[i] / sum;
      for (int c = 0; c < d; ++c) o[c] += p * v[c];
    }
  }
  return out;
}

double RelativeL2Error(std::span<const float> out, std::span<const double> reference) {
  if (out.size() != reference.size()) {
    throw InvalidArgument("out", "size differs from the reference");
  }
  double err = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double diff = out[i] - reference[i];
    err += diff * diff;
    norm += reference[i] * reference[i];
  }
  return norm > 0.0 ? std::sqrt(err / norm) : std::sqrt(err);
}

}  // namespace readkv::codec
