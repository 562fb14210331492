#include "readkv/cuda/tile_centroids.h"

#include <string>

#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/outliers.h"

namespace readkv::cuda::tile {
namespace {

uint32_t Both(uint16_t half) { return uint32_t{half} | (uint32_t{half} << 16); }

void Require(bool ok, const std::string& what) {
  if (!ok) throw codec::InvalidArgument("codebook", what);
}

}  // namespace

TileCentroids MakeTileCentroids(const codec::LloydTree& tree) {
  TileCentroids out;
  for (int t = 0; t <= tree.store_bits(); ++t) {
    const auto centroids = tree.centroids(t);
    for (size_t k = 0; k < centroids.size(); ++k) {
      out.table[(size_t{1} << t) - 1 + k] = codec::FloatToHalf(centroids[k]);
    }
    if (t > 0) out.outermost[t] = centroids.back();
  }
  const uint16_t* d1 = out.table + 1;
  Require(d1[0] == (d1[1] ^ 0x8000u) && (d1[0] & 0x8000u) && d1[1] != 0,
          "depth-1 centroids are not -c, +c in f16 (the sign path needs them)");
  const uint16_t* d2 = out.table + 3;
  const bool antisymmetric = d2[0] == (d2[3] ^ 0x8000u) && d2[1] == (d2[2] ^ 0x8000u);
  const bool ordered = (d2[1] & 0x8000u) && !(d2[3] & 0x8000u) && d2[2] != 0 &&
                       (d2[2] & 0x7fffu) < (d2[3] & 0x7fffu);
  Require(tree.store_bits() < 2 || (antisymmetric && ordered),
          "depth-2 centroids are not -c_b < -c_a < c_a < c_b, antisymmetric in f16");
  out.depth1_negative = Both(d1[0]);
  if (tree.store_bits() >= 2) {
    out.depth2_base = Both(d2[0]);
    out.depth2_flip = Both(static_cast<uint16_t>(d2[0] ^ d2[1]));
  }
  return out;
}

}  // namespace readkv::cuda::tile
