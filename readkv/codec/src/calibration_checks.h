// Internal: the one check that a calibration fits a cache's geometry and layer.
#pragma once

#include <string>

#include "readkv/codec/attention.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/errors.h"

namespace readkv::codec::internal {

inline void RequireCalibrationFor(const Calibration& calibration, const LayerGeometry& geometry,
                                  int layer) {
  if (calibration.kv_heads != geometry.heads_kv || calibration.head_dim != geometry.head_dim) {
    throw InvalidArgument("calibration",
                          "was measured for H_kv=" + std::to_string(calibration.kv_heads) +
                              ", d=" + std::to_string(calibration.head_dim) +
                              ", cache has H_kv=" + std::to_string(geometry.heads_kv) +
                              ", d=" + std::to_string(geometry.head_dim));
  }
  if (layer < 0 || layer >= calibration.layers) {
    throw InvalidArgument("layer", "must be in [0, " + std::to_string(calibration.layers) +
                                       "), got " + std::to_string(layer));
  }
  const size_t channels = static_cast<size_t>(calibration.layers) * calibration.kv_heads *
                          static_cast<size_t>(calibration.head_dim);
  const size_t heads = static_cast<size_t>(calibration.layers) * calibration.kv_heads;
  if (calibration.key_mean.size() != channels || calibration.key_std.size() != channels ||
      calibration.value_mean.size() != channels || calibration.value_std.size() != channels ||
      calibration.key_amax.size() != heads || calibration.value_amax.size() != heads) {
    throw InvalidArgument("calibration", "table sizes do not match its geometry");
  }
}

}  // namespace readkv::codec::internal
