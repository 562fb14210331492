#include <cuda_runtime.h>

#include <string>

#include "readkv/cuda/device.h"

namespace readkv::cuda {

DeviceReport QueryDevices() {
  DeviceReport report;
  report.compiled_with_cuda = true;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    report.reason = cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return report;
  }
  report.device_count = count;
  if (count == 0) {
    report.reason = "no CUDA device";
    return report;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    report.first_device = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                          std::to_string(prop.minor) + ")";
  }
  return report;
}

std::string ErrorString(int status) {
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

int SetDevice(int index) { return static_cast<int>(cudaSetDevice(index)); }

}  // namespace readkv::cuda
