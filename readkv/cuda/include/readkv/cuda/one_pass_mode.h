// How a caller asks for the CUDA tile reader's kernel shape with byte keys in Value windows
// (TilePlan::one_pass, tile_attention.h): one launch, a row's windows in one thread-block
// cluster, or the two launches. The same outputs either way. `kvgate serve --one-pass` and
// `kvgate bench attention --one-pass` both take it; ApplyOnePassMode (tile_attention.h) turns it
// into a plan. No CUDA types, so host-only code (the model's options) can hold one.
#pragma once

#include <string_view>

namespace readkv::cuda {

// kAuto: one pass where the device holds every row's cluster at once (ChooseTileOnePass; the
// server's default). kOn: one pass for every byte-key call, resident or not (the bench's, to
// time the shape where auto would not choose it). kOff: always the two launches.
enum class OnePassMode { kAuto, kOn, kOff };

// "auto", "on" or "off" into *mode; false (and *mode untouched) for anything else.
bool ParseOnePassMode(std::string_view text, OnePassMode* mode);
const char* OnePassModeName(OnePassMode mode);  // "auto", "on", "off"

}  // namespace readkv::cuda
