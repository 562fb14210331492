// Fp8E4m3Encode for device and host: the same steps as readkv::codec::Fp8E4m3Encode (e4m3fn,
// round to nearest even, subnormals included, saturating to +-448, NaN -> 0x7F), written once so
// the GPU conversion of the bench can be checked bit for bit on a host without a GPU
// (tests/attention_bench_test.cc). Internal to readkv/cuda.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVGATE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVGATE_HOST_DEVICE inline
#endif

namespace readkv::cuda::bench {

KVGATE_HOST_DEVICE uint32_t FloatToBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}

KVGATE_HOST_DEVICE float BitsToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x = 0.0f;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

KVGATE_HOST_DEVICE uint8_t EncodeFp8E4m3(float x) {
  constexpr uint32_t kNanCode = 0x7F;
  constexpr uint32_t kMaxFiniteMagnitude = 0x7E;
  constexpr uint32_t kMaxBits = 0x43E00000u;  // bits of 448.0f
  const uint32_t bits = FloatToBits(x);
  const uint32_t magnitude_bits = bits & 0x7FFFFFFFu;
  if (magnitude_bits > 0x7F800000u) return static_cast<uint8_t>(kNanCode);  // NaN, any sign
  const uint32_t sign = (bits >> 24) & 0x80u;
  if (magnitude_bits >= kMaxBits) return static_cast<uint8_t>(sign | kMaxFiniteMagnitude);
  const int float_exponent = static_cast<int>(magnitude_bits >> 23) - 127;
  uint32_t code = 0;
  if (float_exponent >= -6) {
    const uint32_t mantissa = magnitude_bits & 0x7FFFFFu;
    code = (static_cast<uint32_t>(float_exponent + 7) << 3) | (mantissa >> 20);
    const uint32_t rest = mantissa & 0xFFFFFu;
    constexpr uint32_t kHalf = 0x80000u;
    if (rest > kHalf || (rest == kHalf && (code & 1u) != 0)) ++code;
  } else {
    // In units of 2^-9; the product and the fraction are exact in float.
    const float units = BitsToFloat(magnitude_bits) * 512.0f;
    code = static_cast<uint32_t>(units);
    const float fraction = units - static_cast<float>(code);
    if (fraction > 0.5f || (fraction == 0.5f && (code & 1u) != 0)) ++code;
  }
  if (code > kMaxFiniteMagnitude) code = kMaxFiniteMagnitude;
  return static_cast<uint8_t>(sign | code);
}

}  // namespace readkv::cuda::bench
