#include "readkv/codec/attention_experiment.h"

#include <chrono>
#include <memory>
#include <vector>

namespace readkv::codec {

AttentionExperimentResult RunAttentionExperiment(const AttentionExperimentConfig& config) {
  config.data.Validate();
  LayerCacheConfig cache_config = config.cache;
  if (cache_config.backend == KvBackend::kReadKv) {
    MakeReaderPlan(cache_config.policy, cache_config.store_bits);  // fail before the data work
  }
  cache_config.geometry = config.data.geometry;
  cache_config.layer = 0;
  if (cache_config.backend != KvBackend::kDense) {
    cache_config.calibration = std::make_shared<const Calibration>(
        MakeSyntheticCalibration(config.data, config.calibration_samples));
  }
  std::unique_ptr<LayerKvCache> cache = MakeLayerKvCache(cache_config);
  if (config.policy_override && cache_config.backend == KvBackend::kReadKv) {
    MakeReaderPlan(*config.policy_override, cache_config.store_bits);
  }
  const SyntheticLayer layer = MakeSyntheticLayer(config.data);
  cache->AppendTokens(layer.keys, layer.values);

  AttendOptions options;
  options.policy = config.policy_override;
  std::vector<float> out(layer.queries.size());
  const auto start = std::chrono::steady_clock::now();
  AttentionExperimentResult result;
  result.ledgers = cache->Attend(layer.queries, out, options);
  result.attend_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<double> exact =
      ReferenceAttention(layer.geometry, layer.keys, layer.values, layer.queries);
  result.rel_l2_error = RelativeL2Error(out, exact);
  result.dense_payload_bytes = 2 * layer.tokens * layer.geometry.heads_kv *
                               static_cast<int64_t>(layer.geometry.head_dim) * 2;
  result.planted_token = layer.planted_token;
  return result;
}

}  // namespace readkv::codec
