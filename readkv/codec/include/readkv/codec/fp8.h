// FP8 e4m3 ("e4m3fn": no infinities, one NaN pattern per sign, max finite 448), the format of
// the production baseline (vLLM kv_cache_dtype=fp8_e4m3). Encoding rounds to nearest, ties to
// even (subnormals included, smallest 2^-9), and saturates values beyond +-448, infinities
// included, to +-448; NaN of either sign encodes as 0x7F and 0x7F/0xFF decode as NaN. -0 keeps
// its sign (0x80).
#pragma once

#include <cstdint>

namespace readkv::codec {

inline constexpr float kFp8E4m3Max = 448.0f;

uint8_t Fp8E4m3Encode(float x);
float Fp8E4m3Decode(uint8_t code);

// Scale granularity of the FP8 baseline: one scale per layer (per tensor, as vLLM) or one per
// (layer, KV head).
enum class Fp8ScaleGranularity { kTensor, kHead };

// Calibrated scale: amax / 448, so the largest calibration magnitude maps to the largest code.
// amax <= 0 (an all-zero calibration) gives 1; a non-finite amax throws InvalidArgument("amax").
float Fp8ScaleFromAmax(float amax);

}  // namespace readkv::codec
