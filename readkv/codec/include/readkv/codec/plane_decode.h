// Fast progressive decoding of bit planes into code prefixes (the read side of bitplanes.h),
// eight codes per 64-bit operation. BitPlaneStore::KeyCode/ValueCode give the same answers one
// scalar at a time; these are what the attention readers use. Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "readkv/codec/bitplanes.h"

namespace readkv::codec {

// Depth-t prefixes (t in [0, W]) of channel `channel` for the 256 token slots of key block
// `block`, reading planes [0, t) only. codes: [256]; slots past the stored tokens of a partial
// block hold the prefix of zero bits.
void DecodeKeyBlockCodes(const BitPlaneStore& store, int64_t block, int channel, int depth,
                         uint8_t* codes);

// Depth-t prefixes of the d channels of token `token`'s value, reading planes [0, t) only.
// codes: [d].
void DecodeValueCodes(const BitPlaneStore& store, int64_t token, int depth, uint8_t* codes);

// Depth-t prefixes of the 256 codes of one 16x16 tile (tile_planes.h), reading planes [0, t) of
// `tile` only, in fragment order: codes[8 * lane + bit] is the code of TileElement(lane, bit).
// One shift-or of a 64-bit word per lane and plane, as a GPU lane would do it. codes: [256].
void DecodeTileCodes(const uint8_t* tile, int depth, uint8_t* codes);

}  // namespace readkv::codec
