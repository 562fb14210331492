#include <cuda_runtime.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

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

int MultiprocessorCount(int index) {
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, index) != cudaSuccess) {
    cudaGetLastError();  // clear it, as QueryDevices does
    return 0;
  }
  return count;
}

struct StreamTimer::State {
  std::deque<std::pair<cudaEvent_t, cudaEvent_t>> pending;  // recorded, oldest first
  std::vector<cudaEvent_t> spare;
  cudaEvent_t open = nullptr;  // Begin's event, until End
  double seconds = 0.0;

  cudaEvent_t Take() {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    return cudaEventCreate(&e) == cudaSuccess ? e : nullptr;
  }
  // Folds in the completed pairs at the front; with `wait`, waits for all of them first.
  void Harvest(bool wait) {
    while (!pending.empty()) {
      auto [start, stop] = pending.front();
      if (wait) cudaEventSynchronize(stop);
      if (cudaEventQuery(stop) != cudaSuccess) break;
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, start, stop) == cudaSuccess) seconds += ms / 1000.0;
      spare.push_back(start);
      spare.push_back(stop);
      pending.pop_front();
    }
    cudaGetLastError();  // a query of a running event is not an error to keep
  }
};

StreamTimer::StreamTimer() : state_(std::make_unique<State>()) {}

StreamTimer::~StreamTimer() {
  State& s = *state_;
  for (auto& [start, stop] : s.pending) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  for (cudaEvent_t e : s.spare) cudaEventDestroy(e);
  if (s.open != nullptr) cudaEventDestroy(s.open);
}

void StreamTimer::Begin() {
  State& s = *state_;
  s.Harvest(false);
  if (s.open == nullptr) s.open = s.Take();
  if (s.open != nullptr) cudaEventRecord(s.open, nullptr);
}

void StreamTimer::End() {
  State& s = *state_;
  if (s.open == nullptr) return;
  cudaEvent_t stop = s.Take();
  if (stop == nullptr) return;
  cudaEventRecord(stop, nullptr);
  s.pending.emplace_back(s.open, stop);
  s.open = nullptr;
}

double StreamTimer::Seconds() {
  state_->Harvest(true);
  return state_->seconds;
}

}  // namespace readkv::cuda
