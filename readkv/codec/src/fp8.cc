#include "readkv/codec/fp8.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "readkv/codec/errors.h"

namespace readkv::codec {
namespace {

constexpr uint8_t kNanCode = 0x7F;
constexpr uint8_t kMaxFiniteMagnitude = 0x7E;  // 448 = 1.75 * 2^8

constexpr std::array<float, 256> MakeDecodeTable() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0xF;
    const int mantissa = code & 0x7;
    float magnitude = 0.0f;
    if ((code & 0x7F) == kNanCode) {
      magnitude = std::numeric_limits<float>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = static_cast<float>(mantissa) / 512.0f;  // m * 2^-9
    } else {
      float scale = 1.0f;
      for (int e = exponent - 7; e > 0; --e) scale *= 2.0f;
      for (int e = exponent - 7; e < 0; ++e) scale /= 2.0f;
      magnitude = (1.0f + static_cast<float>(mantissa) / 8.0f) * scale;
    }
    table[static_cast<size_t>(code)] = (code & 0x80) != 0 ? -magnitude : magnitude;
  }
  return table;
}

constexpr std::array<float, 256> kDecodeTable = MakeDecodeTable();

}  // namespace

uint8_t Fp8E4m3Encode(float x) {
  if (std::isnan(x)) return kNanCode;  // the sign of a NaN is not kept
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude_bits = bits & 0x7FFFFFFFu;
  // Infinities saturate like any finite value beyond the range (e4m3fn has no infinity).
  if (magnitude_bits >= std::bit_cast<uint32_t>(kFp8E4m3Max)) {
    return static_cast<uint8_t>(sign | kMaxFiniteMagnitude);
  }
  const int float_exponent = static_cast<int>(magnitude_bits >> 23) - 127;
  uint32_t code = 0;
  if (float_exponent >= -6) {
    // Normal e4m3: keep the exponent and the top 3 of the 23 mantissa bits, then round the
    // remaining 20 bits to nearest, ties to even; a mantissa carry moves into the exponent.
    const uint32_t mantissa = magnitude_bits & 0x7FFFFFu;
    code = (static_cast<uint32_t>(float_exponent + 7) << 3) | (mantissa >> 20);
    const uint32_t rest = mantissa & 0xFFFFFu;
    constexpr uint32_t kHalf = 0x80000u;
    if (rest > kHalf || (rest == kHalf && (code & 1u) != 0)) ++code;
  } else {
    // Subnormal e4m3 (and zero): the value in units of 2^-9, rounded to the nearest integer,
    // ties to even. Scaling by 512 and subtracting the integer part are exact in float.
    const float units = std::bit_cast<float>(magnitude_bits) * 512.0f;
    code = static_cast<uint32_t>(units);
    const float fraction = units - static_cast<float>(code);
    if (fraction > 0.5f || (fraction == 0.5f && (code & 1u) != 0)) ++code;
  }
  if (code > kMaxFiniteMagnitude) code = kMaxFiniteMagnitude;  // RNE to 480 would be NaN
  return static_cast<uint8_t>(sign | code);
}

float Fp8E4m3Decode(uint8_t code) { return kDecodeTable[code]; }

float Fp8ScaleFromAmax(float amax) {
  if (!std::isfinite(amax)) {
    throw InvalidArgument("amax", "must be finite, got " + std::to_string(amax));
  }
  if (amax <= 0.0f) return 1.0f;
  return amax / kFp8E4m3Max;
}

}  // namespace readkv::codec
