#include "readkv/codec/outliers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/attention.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/key_bytes.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/transform.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

TEST(OutliersTest, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(10.0f), 0x4900);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                   // overflows to infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  SplitMixRng rng(5);
  for (int i = 0; i < 10000; ++i) {
    const float x = static_cast<float>((rng.Uniform01() - 0.5) * 40.0);
    if (std::fabs(x) < 1e-3f) continue;  // fp16 subnormals have a coarser relative step
    const float back = HalfToFloat(FloatToHalf(x));
    EXPECT_LE(std::fabs(back - x), std::ldexp(std::fabs(x), -11)) << x;
    EXPECT_EQ(FloatToHalf(back), FloatToHalf(x));
  }
}

TEST(OutliersTest, ResolveFillsTheTreesOuterThresholdAndRefusesBadOptions) {
  const LloydTree tree(8);
  const float outer = tree.thresholds(8).back();
  EXPECT_NEAR(outer, 3.99, 0.01);
  EXPECT_EQ(ResolveOutlierOptions({2, 0.0f}, tree, 64).threshold, outer);
  EXPECT_EQ(ResolveOutlierOptions({2, 5.0f}, tree, 64).threshold, 5.0f);
  EXPECT_FALSE(ResolveOutlierOptions({0, 5.0f}, tree, 64).enabled());
  const auto field = [&](OutlierOptions o, int d) {
    try {
      ResolveOutlierOptions(o, tree, d);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("ok");
  };
  EXPECT_EQ(field({-1, 0.0f}, 64), "outlier_cap");
  EXPECT_EQ(field({kMaxOutlierCap + 1, 0.0f}, 64), "outlier_cap");
  EXPECT_EQ(field({2, 3.0f}, 64), "outlier_threshold");  // not clipped there
  EXPECT_EQ(field({2, NAN}, 64), "outlier_threshold");
  EXPECT_EQ(field({2, 0.0f}, 512), "head_dim");
  EXPECT_EQ(field({0, 0.0f}, 512), "ok");
  EXPECT_EQ(field({2, 0.0f, -1}, 64), "outlier_block_cap");
  EXPECT_EQ(field({2, 0.0f, kMaxOutlierBlockCap + 1}, 64), "outlier_block_cap");
  EXPECT_EQ(ResolveOutlierOptions({2, 0.0f}, tree, 64).block_cap, kDefaultOutlierBlockCap);
  EXPECT_EQ(ResolveOutlierOptions({2, 0.0f, 7}, tree, 64).block_cap, 7);
  EXPECT_EQ(ResolveOutlierOptions({0, 0.0f, 7}, tree, 64).block_cap, 0);  // off stays {0, 0, 0}
  // A store takes resolved options only: a budget of 0 would keep nothing.
  EXPECT_THROW(OutlierStore(64, OutlierOptions{2, 4.0f, 0}), InvalidArgument);
}

// The block budget binds exactly: every token of two blocks has 3 values past the threshold, cap
// 2, budget 5 per block and kind. In each block tokens 0 and 1 keep 2 entries each, token 2 keeps
// the first 1 of its ranking (the largest |z|), every later token keeps none; all of it counted.
TEST(OutliersTest, TheBlockBudgetKeepsTheFirstTokensEntriesAndCountsTheRest) {
  const LloydTree tree(8);
  constexpr int kD = 16;
  const OutlierOptions o = ResolveOutlierOptions({2, 0.0f, 5}, tree, kD);
  OutlierStore store(kD, o);
  std::vector<float> key(kD, 0.5f), value(kD, 0.5f);
  const int64_t tokens = kBlockTokens + 40;
  for (int64_t i = 0; i < tokens; ++i) {
    key[3] = 5.0f;   // ranked third: dropped by the cap
    key[8] = -7.0f;  // ranked first
    key[11] = 6.0f;  // ranked second
    value[0] = (i % 2 == 0) ? 4.5f : 0.5f;  // one value outlier on even tokens
    store.AppendToken(key, value);
  }
  for (int64_t b = 0; b < 2; ++b) {
    const auto keys = store.KeyEntries(b);
    ASSERT_EQ(keys.size(), 5u) << b;
    const std::vector<std::pair<int, int>> expected{{0, 8}, {0, 11}, {1, 8}, {1, 11}, {2, 8}};
    for (size_t m = 0; m < keys.size(); ++m) {
      EXPECT_EQ(keys[m].token, expected[m].first) << b << " " << m;
      EXPECT_EQ(keys[m].channel, expected[m].second) << b << " " << m;
    }
    EXPECT_EQ(HalfToFloat(keys[4].z_half), -7.0f);
    // Values: even tokens 0, 2, 4, 6, 8 fill the budget; token 10 on find none left.
    const auto values = store.ValueEntries(b);
    ASSERT_EQ(values.size(), 5u) << b;
    EXPECT_EQ(values.back().token, 8);
  }
  const OutlierStats& k = store.key_stats();
  EXPECT_EQ(k.beyond, 3 * tokens);
  EXPECT_EQ(k.kept, 10);
  EXPECT_EQ(k.over_budget, 2 * tokens - 10);  // selected within the cap, past the budget
  EXPECT_EQ(k.dropped(), 3 * tokens - 10);    // the cap's drops and the budget's
  EXPECT_EQ(store.value_stats().kept, 10);
  EXPECT_EQ(store.value_stats().over_budget, tokens / 2 - 10);
  EXPECT_EQ(store.entries(), 20);

  // A restored block may not hold more than the budget: one written under budget 6 is refused
  // by a store of budget 5, and accepted by one of budget 6.
  OutlierStore wide(kD, ResolveOutlierOptions({2, 0.0f, 6}, tree, kD));
  for (int64_t i = 0; i < kBlockTokens; ++i) wide.AppendToken(key, value);
  ASSERT_EQ(wide.KeyEntries(0).size(), 6u);
  OutlierStore narrow(kD, o);
  EXPECT_THROW(narrow.AppendBlockBytes(wide.BlockBytes(0), kBlockTokens), CorruptObject);
  OutlierStore same(kD, ResolveOutlierOptions({2, 0.0f, 6}, tree, kD));
  same.AppendBlockBytes(wide.BlockBytes(0), kBlockTokens);
  EXPECT_EQ(same.BlockBytes(0), wide.BlockBytes(0));
}

TEST(OutliersTest, SelectionKeepsTheLargestUpToTheCapSortedByChannel) {
  const LloydTree tree(8);
  const OutlierOptions o = ResolveOutlierOptions({2, 0.0f}, tree, 16);
  std::vector<float> z(16, 0.5f);
  z[1] = 5.0f;
  z[4] = -9.0f;
  z[7] = 6.0f;
  z[9] = -6.0f;  // ties with channel 7: the lower channel wins
  z[12] = 3.9f;  // not past the threshold
  std::vector<uint8_t> kept(kMaxOutlierCap);
  int64_t beyond = 0;
  ASSERT_EQ(SelectOutliers(z, o, kept, beyond), 2);
  EXPECT_EQ(beyond, 4);
  EXPECT_EQ(kept[0], 4);
  EXPECT_EQ(kept[1], 7);
  ASSERT_EQ(SelectOutliers(z, ResolveOutlierOptions({8, 0.0f}, tree, 16), kept, beyond), 4);
  EXPECT_EQ((std::vector<uint8_t>(kept.begin(), kept.begin() + 4)),
            (std::vector<uint8_t>{1, 4, 7, 9}));
  EXPECT_EQ(SelectOutliers(z, OutlierOptions{}, kept, beyond), 0);
}

TEST(OutliersTest, CorrectionRestoresTheValueAtEveryDepth) {
  const LloydTree tree(8);
  for (const float z : {10.0f, -10.0f, 4.5f, -7.25f}) {
    const uint8_t code = tree.Encode(z);
    for (int t = 0; t <= 8; ++t) {
      const float restored = tree.Decode(code, t) + OutlierCorrection(tree, FloatToHalf(z), t);
      EXPECT_NEAR(restored, z, 1e-5) << "z " << z << " depth " << t;
    }
  }
}

// One layer, one KV head, d = 64: values drawn directly in the transformed domain with mu = 0 and
// sigma = 1 there, so z is exactly what the test plants.
struct PlantedLayer {
  static constexpr int kD = 64;
  LayerGeometry geometry{2, 1, kD};
  std::shared_ptr<const Calibration> calibration;
  std::vector<float> keys, values, queries;  // raw (model) domain
  int64_t tokens = 512;
  int64_t planted = 300;
};

PlantedLayer MakePlanted(int extra_outliers = 0) {
  PlantedLayer p;
  const int d = PlantedLayer::kD;
  Calibration cal;
  cal.layers = 1;
  cal.kv_heads = 1;
  cal.head_dim = d;
  cal.key_mean.assign(d, 0.0f);
  cal.key_std.assign(d, 1.0f);
  cal.value_mean.assign(d, 0.0f);
  cal.value_std.assign(d, 1.0f);
  cal.key_amax = {20.0f};
  cal.value_amax = {20.0f};
  p.calibration = std::make_shared<const Calibration>(cal);
  const HadamardTransform kt(d, cal.seeds.KeySeed(0, 0)), vt(d, cal.seeds.ValueSeed(0, 0));
  SplitMixRng rng(11);
  const auto gauss = [&] { return static_cast<float>(0.8 * rng.Normal()); };
  std::vector<float> k(d), v(d), raw(d);
  for (int64_t i = 0; i < p.tokens; ++i) {
    for (int c = 0; c < d; ++c) {
      k[c] = std::clamp(gauss(), -3.5f, 3.5f);
      v[c] = std::clamp(gauss(), -3.5f, 3.5f);
    }
    if (i == p.planted) {
      k[5] = 10.0f;   // a 10-sigma key element on the channel the queries weigh
      v[9] = -10.0f;  // and a 10-sigma value element
      for (int m = 0; m < extra_outliers; ++m) k[20 + m] = 6.0f + 0.5f * m;
    }
    kt.Inverse(k, raw);
    p.keys.insert(p.keys.end(), raw.begin(), raw.end());
    vt.Inverse(v, raw);
    p.values.insert(p.values.end(), raw.begin(), raw.end());
  }
  std::vector<float> q(d);
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < d; ++c) q[c] = 0.3f * gauss();
    q[5] = 4.0f;
    kt.Inverse(q, raw);
    p.queries.insert(p.queries.end(), raw.begin(), raw.end());
  }
  return p;
}

std::unique_ptr<ReadKvLayerCache> MakeCache(const PlantedLayer& p, ReadPolicy policy, int cap,
                                            bool byte_keys = false) {
  ReadKvCacheOptions o;
  o.policy = policy;
  o.layout = byte_keys ? PlaneLayout::kTilesByteKeys : LayoutForReader(policy.reader);
  o.residual_window = false;
  o.outliers = {cap, 0.0f};
  auto cache = std::make_unique<ReadKvLayerCache>(p.geometry, p.calibration, 0,
                                                  std::make_shared<const LloydTree>(8), o);
  cache->AppendTokens(p.keys, p.values);
  return cache;
}

ReadPolicy Full() { return {ReaderKind::kFull, 8.0, 0.0, 0.0}; }

// Brute force: every value decoded at depth W (keys of a byte-key cache from their bytes), the
// listed elements replaced by their fp16 z, mapped back to the model domain, then exact attention
// in double.
std::vector<double> BruteForce(const PlantedLayer& p, const ReadKvLayerCache& cache) {
  const int d = PlantedLayer::kD;
  const LloydTree tree(8);
  const HadamardTransform kt(d, p.calibration->seeds.KeySeed(0, 0));
  const HadamardTransform vt(d, p.calibration->seeds.ValueSeed(0, 0));
  const bool byte_keys = cache.layout() == PlaneLayout::kTilesByteKeys;
  const OutlierStore& lists = cache.outliers(0);
  std::vector<float> keys, values, z(d), raw(d);
  for (int64_t i = 0; i < p.tokens; ++i) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int c = 0; c < d; ++c) {
        if (byte_keys) {
          const TilePlaneStore& tiles = cache.tile_store(0);
          z[c] = kind == 0 ? KeyByteValue(tiles.KeyCode(i, c, 8))
                           : tree.Decode(tiles.ValueCode(i, c, 8), 8);
        } else {
          const BitPlaneStore& store = cache.store(0);
          z[c] = tree.Decode(kind == 0 ? store.KeyCode(i, c, 8) : store.ValueCode(i, c, 8), 8);
        }
      }
      const int64_t b = i / kBlockTokens;
      for (const OutlierEntry& e : kind == 0 ? lists.KeyEntries(b) : lists.ValueEntries(b)) {
        if (e.token == i % kBlockTokens) z[e.channel] = HalfToFloat(e.z_half);
      }
      (kind == 0 ? kt : vt).Inverse(z, raw);
      auto& out = kind == 0 ? keys : values;
      out.insert(out.end(), raw.begin(), raw.end());
    }
  }
  return ReferenceAttention(p.geometry, keys, values, p.queries);
}

TEST(OutliersTest, APlanted10SigmaValueSurvivesWhereWithoutListsItIsClipped) {
  const PlantedLayer p = MakePlanted();
  const std::vector<double> exact = ReferenceAttention(p.geometry, p.keys, p.values, p.queries);
  std::vector<float> with(p.queries.size()), without(p.queries.size());
  const auto cache = MakeCache(p, Full(), 2);
  cache->Attend(p.queries, with);
  MakeCache(p, Full(), 0)->Attend(p.queries, without);
  ASSERT_EQ(cache->outliers(0).entries(), 2);
  // The reader matches the brute-force reconstruction: the correction is exact.
  const std::vector<double> brute = BruteForce(p, *cache);
  for (size_t i = 0; i < with.size(); ++i) EXPECT_NEAR(with[i], brute[i], 2e-5) << i;
  const double err_with = RelativeL2Error(with, exact);
  const double err_without = RelativeL2Error(without, exact);
  EXPECT_LT(err_with, 0.02);
  EXPECT_GT(err_without, 0.2);  // the planted logit 5 sigma too low, the value 5.8 sigma off
}

TEST(OutliersTest, TheConstrainedReaderCorrectsAtItsChosenDepths) {
  const PlantedLayer p = MakePlanted();
  const std::vector<double> exact = ReferenceAttention(p.geometry, p.keys, p.values, p.queries);
  const ReadPolicy constrained{ReaderKind::kConstrained, 4.0, 6.0, 2.0};
  const ReadPolicy flexible{ReaderKind::kFlexible, 4.0, 6.0, 2.0};
  for (const ReadPolicy& policy : {constrained, flexible}) {
    std::vector<float> with(p.queries.size()), without(p.queries.size());
    MakeCache(p, policy, 2)->Attend(p.queries, with);
    MakeCache(p, policy, 0)->Attend(p.queries, without);
    const double err_with = RelativeL2Error(with, exact);
    const double err_without = RelativeL2Error(without, exact);
    EXPECT_LT(err_with, 0.5 * err_without) << ReaderName(policy.reader);
  }
}

// The tile reader's caches hold the same codes and the same lists in another layout, so a planes
// cache of the same tokens gives the brute force; at R = W every group and block is read to W.
TEST(OutliersTest, TheTileReaderAppliesTheListsExactly) {
  const PlantedLayer p = MakePlanted();
  const std::vector<double> exact = ReferenceAttention(p.geometry, p.keys, p.values, p.queries);
  const ReadPolicy tile_full{ReaderKind::kTile, 8.0, 0.0, 0.0};
  std::vector<float> with(p.queries.size()), without(p.queries.size());
  const auto cache = MakeCache(p, tile_full, 2);
  cache->Attend(p.queries, with);
  MakeCache(p, tile_full, 0)->Attend(p.queries, without);
  ASSERT_EQ(cache->outliers(0).entries(), 2);
  const std::vector<double> brute = BruteForce(p, *MakeCache(p, Full(), 2));
  for (size_t i = 0; i < with.size(); ++i) EXPECT_NEAR(with[i], brute[i], 2e-5) << i;
  EXPECT_LT(RelativeL2Error(with, exact), 0.02);
  EXPECT_GT(RelativeL2Error(without, exact), 0.2);
}

// Byte keys clip at 4 sigma as the tree does; the lists restore the planted 10-sigma key by the
// grid's outermost value (key_bytes.h), exactly as the brute force reconstructs it.
TEST(OutliersTest, ByteKeysKeepAPlanted10SigmaKeyThroughTheLists) {
  const PlantedLayer p = MakePlanted();
  const std::vector<double> exact = ReferenceAttention(p.geometry, p.keys, p.values, p.queries);
  const ReadPolicy tile_full{ReaderKind::kTile, 8.0, 0.0, 0.0};
  std::vector<float> with(p.queries.size()), without(p.queries.size());
  const auto cache = MakeCache(p, tile_full, 2, /*byte_keys=*/true);
  cache->Attend(p.queries, with);
  MakeCache(p, tile_full, 0, true)->Attend(p.queries, without);
  ASSERT_EQ(cache->outliers(0).entries(), 2);
  const std::vector<double> brute = BruteForce(p, *cache);
  for (size_t i = 0; i < with.size(); ++i) EXPECT_NEAR(with[i], brute[i], 2e-5) << i;
  EXPECT_LT(RelativeL2Error(with, exact), 0.02);
  EXPECT_GT(RelativeL2Error(without, exact), 0.2);
}

TEST(OutliersTest, TheTileReaderCorrectsAtItsGroupAndBlockDepths) {
  const PlantedLayer p = MakePlanted();
  const std::vector<double> exact = ReferenceAttention(p.geometry, p.keys, p.values, p.queries);
  for (const ReadPolicy& policy : {ReadPolicy{ReaderKind::kTile, 4.0, 6.0, 2.0},
                                   ReadPolicy{ReaderKind::kTile, 2.0, 3.0, 1.0}}) {
    std::vector<float> with(p.queries.size()), without(p.queries.size());
    MakeCache(p, policy, 2)->Attend(p.queries, with);
    MakeCache(p, policy, 0)->Attend(p.queries, without);
    EXPECT_LT(RelativeL2Error(with, exact), 0.5 * RelativeL2Error(without, exact))
        << policy.read_bits;
  }
}

TEST(OutliersTest, ValuesPastTheCapStayClippedAndAreCounted) {
  const PlantedLayer p = MakePlanted(/*extra_outliers=*/3);  // 4 key outliers on one token
  const auto cache = MakeCache(p, Full(), 2);
  const OutlierStore& lists = cache->outliers(0);
  EXPECT_EQ(lists.key_stats().beyond, 4);
  EXPECT_EQ(lists.key_stats().kept, 2);
  EXPECT_EQ(lists.key_stats().dropped(), 2);
  EXPECT_EQ(lists.value_stats().kept, 1);
  const auto keys = lists.KeyEntries(p.planted / kBlockTokens);
  ASSERT_EQ(keys.size(), 2u);
  // |z| 10 (channel 5) and 7 (channel 22) kept; 6 and 6.5 (channels 20, 21) dropped.
  EXPECT_EQ(keys[0].channel, 5);
  EXPECT_EQ(keys[1].channel, 22);
  EXPECT_EQ(keys[0].token, p.planted % kBlockTokens);
  // The dropped ones decode clipped, as without lists.
  const LloydTree tree(8);
  EXPECT_EQ(cache->store(0).KeyCode(p.planted, 20, 8), 255);
  EXPECT_NEAR(tree.Decode(255, 8), 4.21, 0.01);
}

TEST(OutliersTest, LedgersCountTheListsBytes) {
  const PlantedLayer p = MakePlanted(3);
  std::vector<float> out(p.queries.size());
  const auto cache = MakeCache(p, {ReaderKind::kConstrained, 4.0, 0.0, 0.0}, 2);
  const AttentionLedgers with = cache->Attend(p.queries, out);
  const AttentionLedgers without =
      MakeCache(p, {ReaderKind::kConstrained, 4.0, 0.0, 0.0}, 0)->Attend(p.queries, out);
  // 2 blocks: 4 header bytes each, and 3 entries (2 key, 1 value) of 4 bytes.
  const int64_t bytes = 2 * kOutlierBlockHeaderBytes + 3 * kOutlierEntryBytes;
  EXPECT_EQ(with.capacity.outlier_bytes, bytes);
  EXPECT_EQ(with.capacity.Total(), without.capacity.Total() + bytes);
  EXPECT_EQ(with.logical.outlier_bits, 8 * bytes);
  EXPECT_EQ(with.logical.TotalBits(), without.logical.TotalBits() + 8 * bytes);
  EXPECT_EQ(with.physical.outlier_bytes, bytes);
  EXPECT_EQ(without.capacity.outlier_bytes, 0);
  EXPECT_EQ(without.logical.outlier_bits, 0);
  EXPECT_EQ(with.workspace_peak_bytes, without.workspace_peak_bytes);  // read in place

  // The tile reader reads each block's lists once too.
  const ReadPolicy tile{ReaderKind::kTile, 4.0, 6.0, 2.0};
  const AttentionLedgers tile_with = MakeCache(p, tile, 2)->Attend(p.queries, out);
  const AttentionLedgers tile_without = MakeCache(p, tile, 0)->Attend(p.queries, out);
  EXPECT_EQ(tile_with.capacity.outlier_bytes, bytes);
  EXPECT_EQ(tile_with.logical.outlier_bits, 8 * bytes);
  EXPECT_EQ(tile_with.logical.TotalBits(), tile_without.logical.TotalBits() + 8 * bytes);
  EXPECT_EQ(tile_with.physical.outlier_bytes, bytes);
  EXPECT_EQ(tile_without.physical.outlier_bytes, 0);
}

TEST(OutliersTest, EncodedBlocksRestoreBitForBitAndDamageIsRefused) {
  const PlantedLayer p = MakePlanted(1);
  const ReadPolicy policy{ReaderKind::kConstrained, 4.0, 6.0, 2.0};
  const auto cache = MakeCache(p, policy, 2);
  ReadKvCacheOptions o;
  o.policy = policy;
  o.residual_window = false;
  o.outliers = {2, 0.0f};
  ReadKvLayerCache restored(p.geometry, p.calibration, 0, std::make_shared<const LloydTree>(8), o);
  for (int64_t b = 0; b < 2; ++b) {
    const std::vector<std::vector<uint8_t>> planes{cache->store(0).BlockBytes(b)};
    const std::vector<std::vector<uint8_t>> lists{cache->outliers(0).BlockBytes(b)};
    EXPECT_THROW(restored.AppendEncodedBlock(planes), InvalidArgument);  // lists required
    if (lists[0].size() > kOutlierBlockHeaderBytes) {
      auto damaged = lists;
      damaged[0][4] = 255;  // the first entry's token past the block
      EXPECT_THROW(restored.AppendEncodedBlock(planes, damaged), CorruptObject);
    }
    restored.AppendEncodedBlock(planes, lists);
  }
  std::vector<float> a(p.queries.size()), b(p.queries.size());
  cache->Attend(p.queries, a);
  restored.Attend(p.queries, b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(restored.outliers(0).entries(), cache->outliers(0).entries());
}

}  // namespace
}  // namespace readkv::codec
