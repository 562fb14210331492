#include "readkv/codec/plane_decode.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/bitplanes.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

// The fast decoders agree with the store's one-scalar accessors for every depth, including the
// partly filled last block.
TEST(PlaneDecodeTest, MatchesPerScalarPrefixesAtEveryDepth) {
  for (int w : {3, 8}) {
    const int d = 32;
    BitPlaneStore store(d, w);
    SplitMixRng rng(static_cast<uint64_t>(w));
    const int64_t tokens = 300;
    std::vector<uint8_t> k(d), v(d);
    for (int64_t i = 0; i < tokens; ++i) {
      for (int c = 0; c < d; ++c) {
        k[c] = static_cast<uint8_t>(rng.Next() & ((1u << w) - 1));
        v[c] = static_cast<uint8_t>(rng.Next() & ((1u << w) - 1));
      }
      store.Append(k, v);
    }
    std::vector<uint8_t> codes(256);
    for (int depth = 0; depth <= w; ++depth) {
      for (int64_t block = 0; block < store.blocks(); ++block) {
        for (int c = 0; c < d; ++c) {
          DecodeKeyBlockCodes(store, block, c, depth, codes.data());
          for (int j = 0; j < 256 && block * 256 + j < tokens; ++j) {
            ASSERT_EQ(codes[j], store.KeyCode(block * 256 + j, c, depth))
                << "W=" << w << " depth=" << depth << " block=" << block << " c=" << c;
          }
        }
      }
      std::vector<uint8_t> value_codes(d);
      for (int64_t i = 0; i < tokens; ++i) {
        DecodeValueCodes(store, i, depth, value_codes.data());
        for (int c = 0; c < d; ++c) {
          ASSERT_EQ(value_codes[c], store.ValueCode(i, c, depth)) << "token " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace readkv::codec
