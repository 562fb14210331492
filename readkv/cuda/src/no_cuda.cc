// The readkv::cuda API in a build without nvcc: no devices, and every launcher answers
// cudaErrorNoDevice (100), so callers link and report instead of needing #ifdefs.
#include <string>

#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/device.h"
#include "readkv/cuda/tile_attention.h"

namespace readkv::cuda {
namespace {
constexpr cudaError_t kNoDevice = 100;  // cudaErrorNoDevice
}  // namespace

DeviceReport QueryDevices() {
  DeviceReport report;
  report.reason = "built without CUDA (nvcc was not found at configure time)";
  return report;
}

std::string ErrorString(int status) {
  return status == kNoDevice ? "built without CUDA" : "CUDA error " + std::to_string(status);
}

int SetDevice(int) { return kNoDevice; }

int MultiprocessorCount(int) { return 0; }

struct StreamTimer::State {};
StreamTimer::StreamTimer() : state_(std::make_unique<State>()) {}
StreamTimer::~StreamTimer() = default;
void StreamTimer::Begin() {}
void StreamTimer::End() {}
double StreamTimer::Seconds() { return 0.0; }

size_t SplitDecodeWorkspaceBytes(const DecodeShape&) { return 0; }
cudaError_t DenseDecodeAttention(const DecodeShape&, const DecodeInputs&, const DenseCache&, void*,
                                 cudaStream_t, const SplitPlan&) {
  return kNoDevice;
}
cudaError_t Fp8DecodeAttention(const DecodeShape&, const DecodeInputs&, const Fp8Cache&, void*,
                               cudaStream_t, const SplitPlan&) {
  return kNoDevice;
}

cudaError_t TileDecodeAttention(const TileDecodeShape&, const TileDecodeInputs&, const ReadKvCodec&,
                                const tile::TileCentroids&, const ReadKvReadPolicy&,
                                const TilePlan&, void*, cudaStream_t, const TileDecodeDebug&) {
  return kNoDevice;
}

cudaError_t TileOnePassResidentClusters(const TileDecodeShape&, const TilePlan&, int*) {
  return kNoDevice;
}

cudaError_t ChooseTileOnePass(const TileDecodeShape&, const TilePlan&, bool* one_pass) {
  if (one_pass != nullptr) *one_pass = false;
  return kNoDevice;
}

size_t TileAppendOutlierWorkspaceBytes(int, int, int) { return 0; }
cudaError_t TileAppend(const DecodeShape&, int, const float*, const float*, const int32_t*,
                       const int32_t*, const int32_t*, const ReadKvCodec&, const TileCache&,
                       cudaStream_t) {
  return kNoDevice;
}

cudaError_t Fp8Append(const DecodeShape&, int, const float*, const float*, const int32_t*,
                      const int32_t*, const int32_t*, const Fp8CacheWrite&, cudaStream_t) {
  return kNoDevice;
}

}  // namespace readkv::cuda
