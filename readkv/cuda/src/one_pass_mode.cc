// OnePassMode's names (one_pass_mode.h).
#include "readkv/cuda/one_pass_mode.h"

namespace readkv::cuda {

bool ParseOnePassMode(std::string_view text, OnePassMode* mode) {
  for (const OnePassMode m : {OnePassMode::kAuto, OnePassMode::kOn, OnePassMode::kOff}) {
    if (text == OnePassModeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

const char* OnePassModeName(OnePassMode mode) {
  switch (mode) {
    case OnePassMode::kOn:
      return "on";
    case OnePassMode::kOff:
      return "off";
    case OnePassMode::kAuto:
      break;
  }
  return "auto";
}

}  // namespace readkv::cuda
