#include "readkv/cuda/device.h"

namespace readkv::cuda {

DeviceReport QueryDevices() {
  DeviceReport report;
  report.reason = "built without CUDA (nvcc was not found at configure time)";
  return report;
}

}  // namespace readkv::cuda
