// The safetensors format (github.com/huggingface/safetensors): u64 little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw little-endian tensor bytes; offsets are relative to the end of the header.
//
// SafetensorsFile maps a file read-only (or owns a byte buffer) and checks, before any tensor is
// used: the header length against the file size, the JSON, every entry's dtype, shape and offsets
// (inside the data region, size = product(shape) * dtype size, no overlaps). Every error is a
// ModelFormatError naming the tensor or "header". Immutable after Open; safe to read from many
// threads. No torch here: the runtime turns spans into tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace readkv::model {

enum class TensorDType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "BF16", ... as the format spells them; throws ModelFormatError(field) if unknown.
TensorDType ParseTensorDType(const std::string& text, const std::string& field);
std::string TensorDTypeName(TensorDType dtype);
int TensorDTypeBytes(TensorDType dtype);

struct TensorEntry {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the data region (bytes)
  uint64_t end = 0;
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only. Throws ModelFormatError("file") if it cannot be opened.
  static SafetensorsFile Open(const std::string& path);
  // Parses an in-memory image (tests, or data that is not a file).
  static SafetensorsFile FromBytes(std::vector<uint8_t> bytes);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::vector<TensorEntry>& tensors() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorEntry* Find(const std::string& name) const;
  // The raw bytes of a tensor (little-endian); lives as long as this object.
  std::span<const uint8_t> Data(const TensorEntry& entry) const;
  // The whole file image.
  std::span<const uint8_t> bytes() const;

 private:
  struct Storage;
  explicit SafetensorsFile(std::unique_ptr<Storage> storage);
  void ParseHeader();

  std::unique_ptr<Storage> storage_;
  uint64_t data_begin_ = 0;
  std::vector<TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: raw little-endian bytes of product(shape) elements of `dtype`.
struct TensorToWrite {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
};

// The file image: header (keys sorted, padded with spaces to a multiple of 8 bytes) and data in
// the given order. Throws ModelFormatError naming a tensor whose byte size does not match.
std::vector<uint8_t> SerializeSafetensors(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata);
// Writes the image to `path` through a temporary file and a rename, so a reader never sees a
// half-written file. Throws std::runtime_error on I/O failure.
void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata);

// bfloat16 / float16 <-> float conversions used by the loader and writer (round to nearest even).
uint16_t FloatToBf16(float x);
float Bf16ToFloat(uint16_t x);
float F16ToFloat(uint16_t x);
uint16_t FloatToF16(float x);

}  // namespace readkv::model
