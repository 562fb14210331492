// Golden values of the codec's random streams. Signs, synthetic data, calibration seeds and the
// training corpus of the committed models all come from SplitMix64 and DeriveSeed, so their
// outputs are part of every cache identity: they must never change. The values below were
// computed by the code as of commit fb9e836 (x86-64, glibc's libm for Normal).
#include "readkv/codec/random.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace readkv::codec {
namespace {

TEST(RandomGoldenTest, SplitMix64StreamIsFrozen) {
  SplitMix64 rng(20261205);
  EXPECT_EQ(rng.Next(), 14923685392124320195ull);
  EXPECT_EQ(rng.Next(), 13194210412921193962ull);
  EXPECT_EQ(rng.Next(), 10294844152046297514ull);
  EXPECT_EQ(rng.Next(), 15059149528404772108ull);
  EXPECT_EQ(rng.Uniform(), 0x1.d3cc4eabd45d8p-3);
  EXPECT_EQ(rng.Uniform(), 0x1.8846141e14c38p-2);
  EXPECT_EQ(rng.Uniform(), 0x1.38b865d12eb1ap-1);
  // Box-Muller: pairs, the second value of a pair cached; the fifth draw leaves a spare.
  EXPECT_EQ(rng.Normal(), 0x1.37aa5196c925cp-3);
  EXPECT_EQ(rng.Normal(), 0x1.08c38585d659fp-1);
  EXPECT_EQ(rng.Normal(), 0x1.478a949fd3499p-1);
  EXPECT_EQ(rng.Normal(), 0x1.58b0517a6e64cp+1);
  EXPECT_EQ(rng.Normal(), -0x1.26a2a6eb5c271p+0);
  EXPECT_EQ(rng.Next(), 5813039617392266644ull);
}

TEST(RandomGoldenTest, DeriveSeedIsFrozen) {
  EXPECT_EQ(DeriveSeed(0, 0), 5711333093415807177ull);
  EXPECT_EQ(DeriveSeed(1, 0x9a55), 779395043517320466ull);
  EXPECT_EQ(DeriveSeed(20261203, 3, 5), 17939308174458118002ull);
  EXPECT_EQ(DeriveSeed(0xfeed, 101, 4096, 7), 8933769863805949021ull);
  EXPECT_EQ(DeriveSeed(~0ull, 1, 2, 3), 14989651706833435275ull);
  // Omitted parts are zeros.
  EXPECT_EQ(DeriveSeed(20261203, 3, 5), DeriveSeed(20261203, 3, 5, 0));
}

}  // namespace
}  // namespace readkv::codec
