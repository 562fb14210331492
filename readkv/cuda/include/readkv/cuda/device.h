// What CUDA can see from this process. Safe to call on a machine without a GPU or without a
// CUDA build: it then reports zero devices and why, so GPU tests and benches can skip cleanly.
#pragma once

#include <memory>
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

// The number of streaming multiprocessors of device `index` (what PlanTileDecode takes); 0 when
// it cannot be read (no CUDA in this build, no such device).
int MultiprocessorCount(int index);

// GPU time of runs of launches on the legacy default stream, by CUDA events, summed without
// blocking the caller: Begin() before the launches, End() after them; Seconds() waits for what is
// still running and returns the total. Completed pairs are folded in (and their events reused) at
// each Begin, so the pending list stays short. One thread at a time. Without CUDA (or without a
// device) every call is a no-op and Seconds() is 0.
class StreamTimer {
 public:
  StreamTimer();
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  void Begin();
  void End();
  double Seconds();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace readkv::cuda
