// What CUDA can see from this process. Safe to call on a machine without a GPU or without a
// CUDA build: it then reports zero devices and why, so GPU tests and benches can skip cleanly.
#pragma once

#include <string>

namespace readkv::cuda {

struct DeviceReport {
  bool compiled_with_cuda = false;  // this binary contains CUDA kernels
  int device_count = 0;             // usable devices (0 when the driver or a GPU is missing)
  std::string first_device;         // name and compute capability of device 0, if any
  std::string reason;               // why device_count is 0, empty otherwise
};

DeviceReport QueryDevices();

// cudaGetErrorString of a status a launcher returned ("no CUDA in this build" without nvcc).
std::string ErrorString(int status);

// cudaSetDevice for the calling thread (launchers run on the thread's current device); returns
// the status.
int SetDevice(int index);

}  // namespace readkv::cuda
