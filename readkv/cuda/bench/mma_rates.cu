// readkv_mma_rates: the sustained rate of the tensor-core MMA shapes a tile reader could decode
// into, on the GPU it runs on: f16 (what the tile reader uses now), s8, s4 and b1 (AND + popcount,
// where a code's bit planes would be operands as stored, with no decode). A question for the
// design (docs/performance-notes.md, "The tile reader's bound"), not a test: it prints one line
// per shape and, with --json PATH, the same as JSON.
//
// Each warp issues ITERS rounds of 8 independent MMAs (8 accumulator chains hide the pipe's
// latency) on register operands; the grid is 8 blocks of 4 warps per SM. Rate = MMAs x 2 M N K
// over the kernel's time (CUDA events, the second of two launches). Operands are fixed nonzero
// words: the rate does not depend on values.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace {

constexpr int kChains = 8;
constexpr int kWarpsPerBlock = 4;
constexpr int kBlocksPerSm = 8;

// One MMA shape: its PTX and its M N K.
enum class Shape { kF16, kS8, kS4, kB1 };

struct ShapeInfo {
  Shape shape;
  const char* name;
  int m, n, k;
};

constexpr ShapeInfo kShapes[] = {
    {Shape::kF16, "f16 m16n8k16 (f32 accumulate)", 16, 8, 16},
    {Shape::kS8, "s8 m16n8k32 (s32 accumulate)", 16, 8, 32},
    {Shape::kS4, "s4 m16n8k64 (s32 accumulate)", 16, 8, 64},
    {Shape::kB1, "b1 m16n8k256 and.popc (s32 accumulate)", 16, 8, 256},
};

// The accumulators: f32 for f16, s32 for the integer shapes.
template <Shape S>
using Acc = std::conditional_t<S == Shape::kF16, float, uint32_t>;

template <Shape S>
__device__ __forceinline__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  static_assert(S == Shape::kF16);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <Shape S>
__device__ __forceinline__ void Mma(uint32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (S == Shape::kS8) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else if constexpr (S == Shape::kS4) {
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

template <Shape S>
__global__ void MmaLoop(int iters, uint32_t seed, uint32_t* out) {
  // f16 operands: 0x3c00 is 1.0; for the integer shapes any word will do.
  const uint32_t a = seed ^ threadIdx.x, b = seed + threadIdx.x;
  Acc<S> acc[kChains][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) Mma<S>(acc[c], a, a + c, a ^ c, a, b, b + c);
  }
  Acc<S> sum = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<uint32_t>(sum);
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "readkv_mma_rates: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

template <Shape S>
bool Time(int blocks, int iters, uint32_t* out, float& ms) {
  cudaEvent_t start, stop;
  if (!Check(cudaEventCreate(&start), "event") || !Check(cudaEventCreate(&stop), "event")) {
    return false;
  }
  bool ok = true;
  for (int launch = 0; launch < 2 && ok; ++launch) {  // the first warms clocks and caches
    ok = Check(cudaEventRecord(start), "record");
    MmaLoop<S><<<blocks, kWarpsPerBlock * 32>>>(iters, 0x3c003c00u, out);
    ok = ok && Check(cudaGetLastError(), "launch") && Check(cudaEventRecord(stop), "record") &&
         Check(cudaEventSynchronize(stop), "sync") &&
         Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int iters = 4096;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: readkv_mma_rates [--iters N] [--json PATH]\n");
      return 2;
    }
  }
  if (iters < 1) {
    std::fprintf(stderr, "readkv_mma_rates: --iters must be at least 1\n");
    return 2;
  }
  cudaDeviceProp prop{};
  int clock_khz = 0;  // the SM's maximum clock
  if (!Check(cudaGetDeviceProperties(&prop, 0), "device") ||
      !Check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "clock")) {
    return 1;
  }
  const int blocks = prop.multiProcessorCount * kBlocksPerSm;
  uint32_t* out = nullptr;
  if (!Check(cudaMalloc(&out, sizeof(uint32_t) * blocks * kWarpsPerBlock * 32), "malloc")) {
    return 1;
  }
  const double mmas = double(blocks) * kWarpsPerBlock * iters * kChains;
  std::vector<std::string> rows;
  double f16_rate = 0.0;
  std::printf("%s, %d SMs: MMA rates (%d rounds of %d chains per warp)\n", prop.name,
              prop.multiProcessorCount, iters, kChains);
  for (const ShapeInfo& s : kShapes) {
    float ms = 0.0f;
    bool ok = false;
    switch (s.shape) {
      case Shape::kF16: ok = Time<Shape::kF16>(blocks, iters, out, ms); break;
      case Shape::kS8: ok = Time<Shape::kS8>(blocks, iters, out, ms); break;
      case Shape::kS4: ok = Time<Shape::kS4>(blocks, iters, out, ms); break;
      case Shape::kB1: ok = Time<Shape::kB1>(blocks, iters, out, ms); break;
    }
    if (!ok) return 1;
    const double ops = mmas * 2.0 * s.m * s.n * s.k / (ms * 1e-3);  // per second
    const double per_sm_clock = mmas / prop.multiProcessorCount / (ms * 1e-3) /
                                (clock_khz * 1e3);  // MMAs per SM per clock at the max clock
    if (s.shape == Shape::kF16) f16_rate = ops;
    std::printf("  %-40s %9.1f TOPS  %6.3f MMA/SM/clock  %5.2fx f16's ops  (%.3f ms)\n", s.name,
                ops / 1e12, per_sm_clock, ops / f16_rate, ms);
    char row[256];
    std::snprintf(row, sizeof row,
                  "{\"shape\":\"%s\",\"tops\":%.3f,\"mma_per_sm_clock\":%.4f,\"ms\":%.4f}", s.name,
                  ops / 1e12, per_sm_clock, ms);
    rows.push_back(row);
  }
  cudaFree(out);
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "readkv_mma_rates: cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\"device\":\"%s\",\"sms\":%d,\"max_clock_khz\":%d,\"iters\":%d,\"rows\":[",
                 prop.name, prop.multiProcessorCount, clock_khz, iters);
    for (size_t i = 0; i < rows.size(); ++i) std::fprintf(f, "%s%s", i ? "," : "", rows[i].c_str());
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
