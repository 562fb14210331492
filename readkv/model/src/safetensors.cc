#include "readkv/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "readkv/model/errors.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace readkv::model {
namespace {

using nlohmann::json;

// A header larger than this is not a model we would load (the format's own limit is 100 MB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

}  // namespace

TensorDType ParseTensorDType(const std::string& text, const std::string& field) {
  static const std::pair<const char*, TensorDType> kNames[] = {
      {"F32", TensorDType::kF32}, {"F16", TensorDType::kF16}, {"BF16", TensorDType::kBF16},
      {"F64", TensorDType::kF64}, {"I64", TensorDType::kI64}, {"I32", TensorDType::kI32},
      {"I16", TensorDType::kI16}, {"I8", TensorDType::kI8},   {"U8", TensorDType::kU8},
      {"BOOL", TensorDType::kBool}};
  for (const auto& [name, dtype] : kNames) {
    if (text == name) return dtype;
  }
  throw ModelFormatError(field, "unknown dtype \"" + text + "\"");
}

std::string TensorDTypeName(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::kF32: return "F32";
    case TensorDType::kF16: return "F16";
    case TensorDType::kBF16: return "BF16";
    case TensorDType::kF64: return "F64";
    case TensorDType::kI64: return "I64";
    case TensorDType::kI32: return "I32";
    case TensorDType::kI16: return "I16";
    case TensorDType::kI8: return "I8";
    case TensorDType::kU8: return "U8";
    case TensorDType::kBool: return "BOOL";
  }
  return "?";
}

int TensorDTypeBytes(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::kF64:
    case TensorDType::kI64: return 8;
    case TensorDType::kF32:
    case TensorDType::kI32: return 4;
    case TensorDType::kF16:
    case TensorDType::kBF16:
    case TensorDType::kI16: return 2;
    case TensorDType::kI8:
    case TensorDType::kU8:
    case TensorDType::kBool: return 1;
  }
  return 1;
}

int64_t TensorEntry::elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Either a read-only mapping of a file or an owned buffer.
struct SafetensorsFile::Storage {
  std::vector<uint8_t> owned;
  void* mapped = nullptr;
  size_t mapped_size = 0;
  std::span<const uint8_t> bytes() const {
    if (mapped != nullptr) return {static_cast<const uint8_t*>(mapped), mapped_size};
    return owned;
  }
  ~Storage() {
    if (mapped != nullptr) munmap(mapped, mapped_size);
  }
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Storage> storage) : storage_(std::move(storage)) {
  ParseHeader();
}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  auto storage = std::make_unique<Storage>();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelFormatError("file", "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw ModelFormatError("file", "cannot stat " + path);
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw ModelFormatError("file", "cannot map " + path + ": " + std::strerror(errno));
    }
    storage->mapped = p;
    storage->mapped_size = size;
  }
  ::close(fd);
  return SafetensorsFile(std::move(storage));
}

SafetensorsFile SafetensorsFile::FromBytes(std::vector<uint8_t> bytes) {
  auto storage = std::make_unique<Storage>();
  storage->owned = std::move(bytes);
  return SafetensorsFile(std::move(storage));
}

std::span<const uint8_t> SafetensorsFile::bytes() const { return storage_->bytes(); }

void SafetensorsFile::ParseHeader() {
  const std::span<const uint8_t> all = storage_->bytes();
  if (all.size() < 8) {
    throw ModelFormatError("header", "file of " + std::to_string(all.size()) +
                                         " bytes is shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, all.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > all.size() - 8) {
    throw ModelFormatError("header", "header length " + std::to_string(header_len) +
                                         " exceeds the file (" + std::to_string(all.size()) +
                                         " bytes)");
  }
  data_begin_ = 8 + header_len;
  const uint64_t data_size = all.size() - data_begin_;
  json header;
  try {
    header = json::parse(all.begin() + 8, all.begin() + static_cast<std::ptrdiff_t>(data_begin_));
  } catch (const json::exception& e) {
    throw ModelFormatError("header", std::string("not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw ModelFormatError("header", "must be a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw ModelFormatError("__metadata__", "must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          throw ModelFormatError("__metadata__", "value of \"" + m.key() + "\" is not a string");
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    // Every later error names the tensor; a nameless one could not be named.
    if (name.empty()) throw ModelFormatError("header", "a tensor has an empty name");
    if (!v.is_object()) throw ModelFormatError(name, "entry must be an object");
    TensorEntry e;
    e.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) throw ModelFormatError(name, "missing dtype");
    e.dtype = ParseTensorDType(dt->get<std::string>(), name);
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) throw ModelFormatError(name, "missing shape");
    for (const json& s : *sh) {
      if (!s.is_number_unsigned()) throw ModelFormatError(name, "shape entries must be >= 0");
      const uint64_t dim = s.get<uint64_t>();
      if (dim > (uint64_t{1} << 40)) throw ModelFormatError(name, "shape entry too large");
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      throw ModelFormatError(name, "data_offsets must be two non-negative integers");
    }
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size) {
      throw ModelFormatError(name, "data_offsets [" + std::to_string(e.begin) + ", " +
                                       std::to_string(e.end) + ") outside the data region of " +
                                       std::to_string(data_size) + " bytes");
    }
    // Overflow-safe: every dim <= 2^40 and the byte count must equal end - begin anyway.
    long double expect = TensorDTypeBytes(e.dtype);
    for (int64_t s : e.shape) expect *= static_cast<long double>(s);
    if (expect != static_cast<long double>(e.end - e.begin)) {
      throw ModelFormatError(name, "holds " + std::to_string(e.end - e.begin) +
                                       " bytes, its dtype and shape need " +
                                       std::to_string(static_cast<double>(expect)));
    }
    entries_.push_back(std::move(e));
  }
  // Tensors must not overlap (the format forbids it; a crafted file could alias two weights).
  std::vector<const TensorEntry*> sorted;
  for (const auto& e : entries_) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      throw ModelFormatError(sorted[i]->name, "overlaps tensor " + sorted[i - 1]->name);
    }
  }
}

const TensorEntry* SafetensorsFile::Find(const std::string& name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::span<const uint8_t> SafetensorsFile::Data(const TensorEntry& entry) const {
  return storage_->bytes().subspan(data_begin_ + entry.begin, entry.end - entry.begin);
}

std::vector<uint8_t> SerializeSafetensors(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t s : t.shape) {
      if (s < 0) throw ModelFormatError(t.name, "negative shape entry");
      n *= s;
    }
    const auto bytes = static_cast<uint64_t>(n) * TensorDTypeBytes(t.dtype);
    if (bytes != t.data.size()) {
      throw ModelFormatError(t.name, "has " + std::to_string(t.data.size()) +
                                         " bytes, its dtype and shape need " +
                                         std::to_string(bytes));
    }
    if (header.contains(t.name)) throw ModelFormatError(t.name, "written twice");
    header[t.name] = {{"dtype", TensorDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // The format lets the header be padded with spaces; 8-byte alignment keeps the data aligned.
  while ((text.size() % 8) != 0) text.push_back(' ');
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* data = out.data() + 8 + text.size();
  for (const auto& t : tensors) {
    if (!t.data.empty()) std::memcpy(data, t.data.data(), t.data.size());
    data += t.data.size();
  }
  return out;
}

void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> image = SerializeSafetensors(tensors, metadata);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + tmp);
    out.write(reinterpret_cast<const char*>(image.data()),
              static_cast<std::streamsize>(image.size()));
    if (!out) throw std::runtime_error("write failed: " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

uint16_t FloatToBf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);  // nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }

float F16ToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t FloatToF16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7E00);
  const float a = std::fabs(x);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00);
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: round a * 2^24 to nearest even integer.
    const float scaled = a * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  uint32_t m = bits & 0x7FFFFFFF;
  // Round the 23-bit mantissa to 10 bits, nearest even; carries propagate into the exponent.
  m += 0xFFF + ((m >> 13) & 1);
  return static_cast<uint16_t>(sign | (((m >> 13) - (112u << 10)) & 0x7FFF));
}

}  // namespace readkv::model
