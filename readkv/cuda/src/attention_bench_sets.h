// `kvgate bench attention`'s input sets (internal to readkv/cuda, CUDA builds only): device
// buffers, the cold-L2 rotation's replicated input sets, one point's geometry (lengths, a random
// page permutation), and the dense, FP8, tile-reader and anchor sets built on the device from the
// same seeded bfloat16 pages, so that every backend reads the same data (the tile reader's set:
// attention_bench_tile.cc).
#pragma once

#if defined(KVGATE_HAVE_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "readkv/codec/calibration.h"
#include "readkv/cuda/attention_bench.h"
#include "readkv/cuda/decode_attention.h"
#include "readkv/cuda/tile_attention.h"
#include "readkv/cuda/tile_centroids.h"
#include "readkv/cuda/tile_outlier_lists.h"

namespace readkv::cuda::bench {

inline constexpr int64_t kMiB = 1024 * 1024;
inline constexpr int kMaxCopies = 256;  // copies of one input set in the cold-L2 rotation

// Throws std::runtime_error naming `what` and the CUDA error unless status is cudaSuccess.
void Check(cudaError_t status, const std::string& what);

// Owns one device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes == 0) return;
    Check(cudaMalloc(&ptr_, bytes), "cudaMalloc " + std::to_string(bytes) + " bytes for " + what);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host, const std::string& what) {
  DeviceBuffer buffer(host.size() * sizeof(T), what);
  if (!host.empty()) {
    Check(
        cudaMemcpy(buffer.as<void>(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "upload " + what);
  }
  return buffer;
}

std::vector<float> Download(const float* device, size_t n, const std::string& what);

template <typename T>
void UploadTo(T* device, const std::vector<T>& host, const std::string& what) {
  Check(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "upload " + what);
}

// An input set: named regions at 256-byte aligned offsets inside one copy, and `copies` copies
// of it back to back for the cold-L2 rotation. Copy 0 is filled, then Replicate() clones it.
class InputSet {
 public:
  size_t Add(size_t bytes) {
    const size_t offset = copy_bytes_;
    copy_bytes_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  void Allocate(int64_t l2_bytes, const std::string& what) {
    const auto copy = static_cast<int64_t>(copy_bytes_);
    // The N - 1 copies touched between two uses of a copy must hold >= 2 x L2.
    copies_ =
        copy > 2 * l2_bytes
            ? 1
            : static_cast<int>(std::min<int64_t>(kMaxCopies, (2 * l2_bytes + copy - 1) / copy + 1));
    storage_ = DeviceBuffer(copy_bytes_ * static_cast<size_t>(copies_), what);
  }
  void Replicate(const std::string& what) const {
    for (int k = 1; k < copies_; ++k) {
      Check(cudaMemcpy(Base(k), Base(0), copy_bytes_, cudaMemcpyDeviceToDevice),
            "replicate " + what);
    }
  }
  template <typename T>
  T* At(int copy, size_t offset) const {
    return reinterpret_cast<T*>(Base(copy) + offset);
  }
  int copies() const { return copies_; }
  size_t copy_bytes() const { return copy_bytes_; }

 private:
  char* Base(int copy) const {
    return storage_.as<char>() + copy_bytes_ * static_cast<size_t>(copy);
  }
  size_t copy_bytes_ = 0;
  int copies_ = 1;
  DeviceBuffer storage_;
};

// The host side of one (tokens, batch) point: lengths and a random page permutation.
struct PointGeometry {
  DecodeShape shape;
  int64_t num_pages = 0;
  int64_t context_tokens = 0;
  std::vector<int32_t> seq_lens;    // [B]
  std::vector<int32_t> page_table;  // [B][max_pages], unused entries 0
  std::vector<int32_t> page_owner;  // [P]: b * max_pages + page index within the sequence
};

PointGeometry MakeGeometry(const BenchConfig& config, int64_t tokens, int64_t batch);

// Offsets of what every kernel reads besides its cache.
struct CommonRegions {
  size_t queries = 0, page_table = 0, seq_lens = 0;
  void Reserve(InputSet& set, const PointGeometry& g);
  // Copies the point's common inputs (device queries, host tables) into copy 0.
  void Fill(const InputSet& set, const PointGeometry& g, const float* queries_device) const;
  DecodeInputs Inputs(const InputSet& set, int copy, float* out) const;
};

size_t PageElements(const PointGeometry& g);

struct DenseSet {
  InputSet set;
  CommonRegions common;
  size_t k = 0, v = 0;
  DenseCache Cache(int copy) const {
    return DenseCache{set.At<const uint16_t>(copy, k), set.At<const uint16_t>(copy, v)};
  }
};

struct Fp8Set {
  InputSet set;
  CommonRegions common;
  size_t k = 0, v = 0, k_scales = 0, v_scales = 0;
  Fp8Cache Cache(int copy) const {
    return Fp8Cache{set.At<const uint8_t>(copy, k), set.At<const uint8_t>(copy, v),
                    set.At<const float>(copy, k_scales), set.At<const float>(copy, v_scales)};
  }
};

// The codec's per-(KV head, channel) tables in an input set: the calibration and the transform
// signs, [H_kv][d] floats each, reserved back to back in this order.
struct CodecRegions {
  size_t key_mean = 0, key_std = 0, value_mean = 0, value_std = 0, key_signs = 0, value_signs = 0;
  void Reserve(InputSet& set, size_t floats_each) {
    key_mean = set.Add(floats_each * sizeof(float));
    key_std = set.Add(floats_each * sizeof(float));
    value_mean = set.Add(floats_each * sizeof(float));
    value_std = set.Add(floats_each * sizeof(float));
    key_signs = set.Add(floats_each * sizeof(float));
    value_signs = set.Add(floats_each * sizeof(float));
  }
  // The codec of W = store_bits over these tables (no centroids or boundaries).
  ReadKvCodec Codec(const InputSet& set, int copy, int store_bits) const {
    ReadKvCodec c;
    c.store_bits = store_bits;
    c.key_mean = set.At<const float>(copy, key_mean);
    c.key_std = set.At<const float>(copy, key_std);
    c.value_mean = set.At<const float>(copy, value_mean);
    c.value_std = set.At<const float>(copy, value_std);
    c.key_signs = set.At<const float>(copy, key_signs);
    c.value_signs = set.At<const float>(copy, value_signs);
    return c;
  }
};

// The tile reader's inputs (tile_attention.h) for one W and key format: every token of the point
// appended by TileAppend into the tile pools on the device under the point's page table (a copy
// of it), every token encoded (no residual window: the other rows have none either), the same
// queries, the codec tables of a calibration measured from the dense pages, the step-1 increment
// table for both allocators. The call's plan and centroid tables live here too (host values).
// With --outlier-cap, the outlier page blocks of the same tokens under the same page table (host
// copy for the ledgers, and in the set).
struct TileSet {
  int store_bits = 8;
  bool byte_keys = false;  // set before BuildTile: the key pool holds byte keys
  TileDecodeShape shape;
  TilePlan plan;
  tile::TileCentroids centroids;
  std::vector<int32_t> encoded_lens, residual_lens;  // host copies, [B]
  InputSet set;
  size_t queries = 0, encoded = 0, residual = 0, key_tiles = 0, value_tiles = 0, page_table = 0;
  CodecRegions tables;
  size_t increments = 0;
  int64_t capacity_bytes = 0;  // ledger 1 (TileCapacityBytes)
  bool has_lists = false;
  TileOutlierPages lists;
  size_t key_outlier_pages = 0, value_outlier_pages = 0;
  const TileOutlierPages* Lists() const { return has_lists ? &lists : nullptr; }
  TileDecodeInputs Inputs(int copy, float* out) const {
    TileDecodeInputs in;
    in.queries = set.At<const float>(copy, queries);
    in.key_tiles = set.At<const uint8_t>(copy, key_tiles);
    in.value_tiles = set.At<const uint8_t>(copy, value_tiles);
    in.page_table = set.At<const int32_t>(copy, page_table);
    in.encoded_lens = set.At<const int32_t>(copy, encoded);
    in.residual_lens = set.At<const int32_t>(copy, residual);
    in.out = out;
    if (has_lists) {
      in.key_outlier_pages = set.At<const uint32_t>(copy, key_outlier_pages);
      in.value_outlier_pages = set.At<const uint32_t>(copy, value_outlier_pages);
    }
    return in;
  }
  ReadKvCodec Codec(int copy) const { return tables.Codec(set, copy, store_bits); }
  ReadKvReadPolicy Policy(int copy, const KvSpec& spec) const {
    ReadKvReadPolicy p;
    p.key_bits = spec.key_bits;
    p.value_bits = spec.value_bits;
    p.key_increments = set.At<const double>(copy, increments);
    p.key_steps = store_bits - 1;
    p.value_increments = p.key_increments;  // the tile reader's Value step is 1 too
    p.value_steps = store_bits - 1;
    return p;
  }
};

struct AnchorSet {
  InputSet set;
  size_t queries = 0, keys = 0, values = 0;
};

// Dense bfloat16 pages generated on the GPU from the seeded per-channel distribution.
void BuildDense(DenseSet& dense, const PointGeometry& g, const BenchConfig& config,
                const float* queries, int64_t l2_bytes);

// FP8 pages from the dense ones, per-tensor scales amax / 448 with amax measured on the GPU.
void BuildFp8(Fp8Set& fp8, const PointGeometry& g, const DenseSet& dense, const float* queries,
              int64_t l2_bytes);

// A chunk of the point's tokens (sequence by sequence, positions in order) gathered from the
// dense pages as float rows: device pointers, valid during the call that receives them.
struct TokenChunk {
  int64_t begin = 0;  // index of the chunk's first token among all the point's tokens
  int n = 0;
  const int32_t* seq_ids = nullptr;    // [n]
  const int32_t* positions = nullptr;  // [n]
  const float* keys = nullptr;         // [n][H_kv][d]
  const float* values = nullptr;       // [n][H_kv][d]
};
// Calls body once per chunk of the point's tokens, in order (what TileAppend encodes).
void ForEachTokenChunk(const PointGeometry& g, const DenseSet& dense,
                       const std::function<void(const TokenChunk&)>& body);

// The ReadKV codec's calibration (codec::Calibrator, transformed domain, layer 0) measured on
// the host from the point's first tokens, downloaded from the dense pages.
codec::Calibration CalibrateFromPages(const PointGeometry& g, const DenseSet& dense);

// The tile set of tile.store_bits (set before the call, with tile.byte_keys) from the point's
// tokens: TileAppend encodes them (the codec's codes, bit for bit; byte keys when tile.byte_keys,
// W = 8) with `calibration` and the codec's transform seeds, under the point's page table.
// `queries` (device) as every row's; planned for `sm_count` SMs (config.value_window > 0: the
// plan's Value window and chunk; else config.chunk_tokens > 0 overrides the plan's chunk).
// config.outlier_cap > 0: with the outlier page blocks of that cap, built on the host from the
// same tokens (each K and V transformed and standardised as the codec's encoder does).
void BuildTile(TileSet& tile, const PointGeometry& g, const DenseSet& dense,
               const codec::Calibration& calibration, const float* queries,
               const BenchConfig& config, int sm_count, int64_t l2_bytes,
               std::ostream* progress);

// A tile spec's row: one untimed launch with TileDecodeDebug's depths into `out` (poisoned first)
// for `output` and the row's ledgers, then the timed launch over the rotation's copies. Errors
// name the spec and the step ("depths launch", "timed launch").
std::function<void(int)> TileRow(const TileSet& tile, const KvSpec& spec, float* out,
                                 size_t out_elems, void* workspace, BenchRow& row,
                                 std::vector<float>& output);

// A one-pass tile row's timeline (TileDecodeDebug::phases): kPhaseLaunches launches after the
// timed ones, each on the next copy of the rotation from `first_copy` (cold L2, as they were)
// after a spin of `spin_ns`, summarised by SummarisePhases. Errors name the spec.
inline constexpr int kPhaseLaunches = 3;
PhaseTimes TilePhases(const TileSet& tile, const KvSpec& spec, float* out, void* workspace,
                      int first_copy, int64_t spin_ns);

// The anchor's contiguous bfloat16 copies of queries, keys and values (equal lengths only: it
// takes no mask).
void BuildAnchor(AnchorSet& anchor, const PointGeometry& g, const DenseSet& dense,
                 const float* queries, int64_t tokens, int64_t l2_bytes);

}  // namespace readkv::cuda::bench

#endif  // KVGATE_HAVE_CUDA
