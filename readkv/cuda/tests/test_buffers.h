// What the GPU tests share: a device buffer that frees itself, the per-head relative error of a
// GPU output against the CPU reference, and the Hadamard signs the kernels take. Test code; CUDA
// builds only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "readkv/codec/calibration.h"
#include "readkv/codec/transform.h"

namespace readkv::cuda {

// A device buffer of T, freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(std::max<size_t>(count, 1)) {
    if (cudaMalloc(&ptr_, count_ * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  void Upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    cudaMemcpy(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  size_t count_;
  T* ptr_ = nullptr;
};

// Largest relative L2 error of the GPU output against a CPU output, per query head.
inline double MaxHeadError(const std::vector<float>& gpu, const std::vector<float>& cpu,
                           size_t offset, int heads, int d) {
  double worst = 0.0;
  for (int h = 0; h < heads; ++h) {
    double num = 0.0, den = 0.0;
    for (int c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(h) * d + c;
      const double diff = static_cast<double>(gpu[offset + i]) - cpu[i];
      num += diff * diff;
      den += static_cast<double>(cpu[i]) * cpu[i];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

// Layer 0's Hadamard signs of every KV head, [H_kv][d], of the keys or of the values.
inline std::vector<float> TransformSigns(const codec::Calibration& calibration, int hkv, int d,
                                         bool keys) {
  std::vector<float> signs;
  for (int h = 0; h < hkv; ++h) {
    const codec::HadamardTransform t(
        d, keys ? calibration.seeds.KeySeed(0, h) : calibration.seeds.ValueSeed(0, h));
    for (const int8_t x : t.signs()) signs.push_back(x);
  }
  return signs;
}

}  // namespace readkv::cuda
