// Internal argument checks shared by the two plane stores (bitplanes.cc, tile_planes.cc) and the
// ReadKV cache that holds one of them (readkv_cache.cc, readkv_attend.cc). Not installed; not
// part of the codec's API.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>

#include "readkv/codec/errors.h"
#include "readkv/codec/readkv_cache.h"

namespace readkv::codec::internal {

// InvalidArgument("head_dim") unless d is a power of two >= min_head_dim, InvalidArgument(
// "store_bits") unless 1 <= W <= 8.
inline void CheckPlaneGeometry(int head_dim, int min_head_dim, int store_bits) {
  if (head_dim < min_head_dim || !std::has_single_bit(static_cast<unsigned>(head_dim))) {
    throw InvalidArgument("head_dim", "must be a power of two >= " + std::to_string(min_head_dim) +
                                          ", got " + std::to_string(head_dim));
  }
  if (store_bits < 1 || store_bits > 8) {
    throw InvalidArgument("store_bits", "must be in [1, 8], got " + std::to_string(store_bits));
  }
}

// InvalidArgument(field) unless there are head_dim codes, each below 2^W.
inline void CheckCodes(std::span<const uint8_t> codes, int head_dim, int store_bits,
                       const char* field) {
  if (codes.size() != static_cast<size_t>(head_dim)) {
    throw InvalidArgument(field, "expected " + std::to_string(head_dim) + " codes, got " +
                                     std::to_string(codes.size()));
  }
  uint8_t all = 0;
  for (uint8_t code : codes) all |= code;
  if ((all >> store_bits) != 0) {
    throw InvalidArgument(field, "a code does not fit in " + std::to_string(store_bits) + " bits");
  }
}

// InvalidArgument(field) unless `reader` reads the layout the cache stores.
inline void RequireLayoutReads(PlaneLayout layout, ReaderKind reader, const char* field) {
  if (IsTileLayout(LayoutForReader(reader)) != IsTileLayout(layout)) {
    throw InvalidArgument(field, "the " + std::string(ReaderName(reader)) + " reader reads the " +
                                     std::string(PlaneLayoutName(LayoutForReader(reader))) +
                                     " layout; this cache stores " +
                                     std::string(PlaneLayoutName(layout)));
  }
}

}  // namespace readkv::codec::internal
