// A safetensors image (as a model directory would hold it) through SafetensorsFile::FromBytes,
// the same header checks Open() runs on a mapped file. The contract: a file whose every entry's
// bytes lie inside the image, or a ModelFormatError naming the tensor or "header".
#include <cstddef>
#include <cstdint>
#include <vector>

#include "readkv/model/errors.h"
#include "readkv/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto file =
        readkv::model::SafetensorsFile::FromBytes(std::vector<uint8_t>(data, data + size));
    const auto image = file.bytes();
    uint64_t sum = 0;
    for (const auto& entry : file.tensors()) {
      if (file.Find(entry.name) != &entry) __builtin_trap();
      const auto span = file.Data(entry);
      if (span.size() != static_cast<size_t>(entry.elements()) *
                             static_cast<size_t>(readkv::model::TensorDTypeBytes(entry.dtype))) {
        __builtin_trap();
      }
      if (!span.empty()) {
        // Touch both ends: ASan reports a span that points outside the image.
        sum += span.front() + span.back();
        if (span.data() < image.data() || span.data() + span.size() > image.data() + image.size()) {
          __builtin_trap();
        }
      }
    }
    (void)sum;
  } catch (const readkv::model::ModelFormatError& e) {
    if (e.what_failed().empty()) __builtin_trap();
  }
  return 0;
}
