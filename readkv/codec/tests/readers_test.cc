#include "readkv/codec/readers.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "readkv/codec/attention.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/readkv_cache.h"
#include "readkv/codec/synthetic.h"

namespace readkv::codec {
namespace {

std::string FieldOf(const ReadPolicy& policy, int store_bits) {
  try {
    MakeReaderPlan(policy, store_bits);
  } catch (const InvalidArgument& e) {
    return e.field();
  }
  return "";
}

TEST(ReadersTest, PlansFollowTheSpecTable) {
  ReadPolicy flexible{ReaderKind::kFlexible, 2.0, 3.0, 1.0};
  const ReaderPlan f = MakeReaderPlan(flexible, 8);
  EXPECT_EQ(f.min_depth, 0);
  EXPECT_EQ(f.value_step, 1);
  EXPECT_TRUE(f.pooled);
  EXPECT_DOUBLE_EQ(f.key_bits, 3.0);
  EXPECT_DOUBLE_EQ(f.value_bits, 1.0);

  const ReaderPlan c = MakeReaderPlan({ReaderKind::kConstrained, 4.0, 0.0, 0.0}, 8);
  EXPECT_EQ(c.min_depth, 1);
  EXPECT_EQ(c.value_step, 2);
  EXPECT_FALSE(c.pooled);
  EXPECT_DOUBLE_EQ(c.key_bits, 4.0);
  EXPECT_DOUBLE_EQ(c.value_bits, 4.0);

  const ReaderPlan full = MakeReaderPlan({ReaderKind::kFull, 4.0, 0.0, 0.0}, 4);
  EXPECT_EQ(full.min_depth, 4);
}

TEST(ReadersTest, BudgetsAreRTimesDimOrTokensAndPoolAcrossHeads) {
  const ReaderPlan f = MakeReaderPlan({ReaderKind::kFlexible, 2.0, 3.0, 1.0}, 8);
  EXPECT_EQ(f.KeyBudget(128, 1), 384);
  EXPECT_EQ(f.KeyBudget(128, 8), 3072);
  EXPECT_EQ(f.ValueBudget(1000, 1), 1000);
  EXPECT_EQ(f.ValueBudget(1000, 8), 8000);
  const ReaderPlan frac = MakeReaderPlan({ReaderKind::kFlexible, 2.3, 0.0, 0.0}, 8);
  EXPECT_EQ(frac.ValueBudget(1000, 1), 2300);  // not 2299
}

TEST(ReadersTest, ConstrainedReaderTakesASplitWithItsPerHeadShape) {
  const ReaderPlan c = MakeReaderPlan({ReaderKind::kConstrained, 4.0, 6.0, 2.0}, 8);
  EXPECT_EQ(c.key_bits, 6.0);
  EXPECT_EQ(c.value_bits, 2.0);
  EXPECT_EQ(c.min_depth, 1);
  EXPECT_EQ(c.value_step, 2);
  EXPECT_FALSE(c.pooled);
  EXPECT_EQ(c.KeyBudget(64, 1), 384);
  EXPECT_EQ(c.ValueBudget(1000, 1), 2000);
  const ReaderPlan equal = MakeReaderPlan({ReaderKind::kConstrained, 4.0, 0.0, 0.0}, 8);
  EXPECT_EQ(equal.key_bits, 4.0);
  EXPECT_EQ(equal.value_bits, 4.0);
}

TEST(ReadersTest, BadPoliciesNameTheField) {
  EXPECT_EQ(FieldOf({ReaderKind::kConstrained, 9.0, 0, 0}, 8), "read_bits");
  EXPECT_EQ(FieldOf({ReaderKind::kConstrained, 0.0, 0, 0}, 8), "read_bits");
  EXPECT_EQ(FieldOf({ReaderKind::kConstrained, 0.5, 0, 0}, 8), "read_bits");  // below t_min
  EXPECT_EQ(FieldOf({ReaderKind::kConstrained, 2.0, 3.0, 1.0}, 8), "");  // a per-head split
  EXPECT_EQ(FieldOf({ReaderKind::kConstrained, 2.0, 3.5, 0.5}, 8), "kv_split");  // R_V < t_min
  EXPECT_EQ(FieldOf({ReaderKind::kConstrained, 2.0, 3.0, 2.0}, 8), "kv_split");  // mean != R
  EXPECT_EQ(FieldOf({ReaderKind::kFlexible, 2.0, 3.0, 2.0}, 8), "kv_split");
  EXPECT_EQ(FieldOf({ReaderKind::kFlexible, 2.0, 4.5, -0.5}, 8), "kv_split");
  EXPECT_EQ(FieldOf({ReaderKind::kFull, 4.0, 0, 0}, 8), "read_bits");  // full needs R = W
  EXPECT_EQ(FieldOf({ReaderKind::kFlexible, 2.0, 0, 0}, 9), "store_bits");
  EXPECT_EQ(FieldOf({ReaderKind::kFlexible, 2.0, 0, 0}, 8), "");
  EXPECT_THROW(ParseReaderKind("fast"), InvalidArgument);
  EXPECT_EQ(ParseReaderKind("flexible"), ReaderKind::kFlexible);
}

// The names are what requests, flags and reports carry: exactly these strings, and
// ParseReaderKind reads back what ReaderName writes, for every reader.
TEST(ReadersTest, ReaderNamesArePinnedAndRoundTrip) {
  EXPECT_EQ(ReaderName(ReaderKind::kFlexible), "flexible");
  EXPECT_EQ(ReaderName(ReaderKind::kConstrained), "constrained");
  EXPECT_EQ(ReaderName(ReaderKind::kFull), "full");
  EXPECT_EQ(ReaderName(ReaderKind::kTile), "tile");
  for (const ReaderKind reader : kReaderKinds) {
    EXPECT_EQ(ParseReaderKind(ReaderName(reader)), reader) << ReaderName(reader);
  }
  try {
    ParseReaderKind("Tile");
    ADD_FAILURE() << "'Tile' was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "reader");
    EXPECT_EQ(std::string(e.what()),
              "reader: must be flexible, constrained, full or tile, got 'Tile'");
  }
}

TEST(ReadersTest, KeyImportanceSumsOverTheQueryHeadsOfAKvHead) {
  const std::vector<float> sigma = {1.0f, 2.0f, 0.5f, 1.0f, 1.0f, 1.0f, 1.0f, 3.0f};
  std::vector<float> q(2 * 8);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 5) - 2.0f;
  std::vector<double> both(8), first(8), second(8);
  KeyChannelImportance(q, 2, sigma, both);
  KeyChannelImportance(std::span<const float>(q).subspan(0, 8), 1, sigma, first);
  KeyChannelImportance(std::span<const float>(q).subspan(8, 8), 1, sigma, second);
  for (size_t c = 0; c < 8; ++c) {
    EXPECT_DOUBLE_EQ(both[c], first[c] + second[c]);
    const double s = q[c] * sigma[c];
    EXPECT_DOUBLE_EQ(first[c], s * s);
  }
}

TEST(ReadersTest, ValueImportanceIsTheSumOfSquaredProbabilities) {
  // Two query heads, stride 4 (3 encoded tokens + 1 residual column that must be ignored).
  const std::vector<float> p = {0.5f, 0.25f, 0.25f, 9.0f, 0.1f, 0.1f, 0.8f, 9.0f};
  std::vector<double> a(3);
  ValueTokenImportance(p, 2, 4, a);
  EXPECT_NEAR(a[0], 0.25 + 0.01, 1e-7);
  EXPECT_NEAR(a[1], 0.0625 + 0.01, 1e-7);
  EXPECT_NEAR(a[2], 0.0625 + 0.64, 1e-7);
}

TEST(ReadersTest, ConstrainedSpendsEachHeadsBudgetAndFlexiblePoolsIt) {
  LloydTree tree(8);
  const int heads = 2;
  const int d = 16;
  // Head 0 matters 100x more than head 1.
  std::vector<double> importance(heads * d);
  for (int c = 0; c < d; ++c) {
    importance[c] = 100.0 * (1 + c);
    importance[d + c] = 1.0 * (1 + c);
  }
  std::vector<uint8_t> depths(importance.size());
  AllocatorScratch scratch;

  const ReaderPlan constrained = MakeReaderPlan({ReaderKind::kConstrained, 2.0, 0, 0}, 8);
  ChooseKeyDepths(constrained, ReaderAllocators(constrained, tree.distortions()), importance, heads,
                  d, depths, scratch);
  int64_t head0 = 0, head1 = 0;
  for (int c = 0; c < d; ++c) {
    head0 += depths[c];
    head1 += depths[d + c];
    EXPECT_GE(depths[c], 1);
  }
  EXPECT_EQ(head0, 2 * d);
  EXPECT_EQ(head1, 2 * d);

  const ReaderPlan flexible = MakeReaderPlan({ReaderKind::kFlexible, 2.0, 0, 0}, 8);
  ChooseKeyDepths(flexible, ReaderAllocators(flexible, tree.distortions()), importance, heads, d,
                  depths, scratch);
  head0 = head1 = 0;
  for (int c = 0; c < d; ++c) {
    head0 += depths[c];
    head1 += depths[d + c];
  }
  EXPECT_EQ(head0 + head1, 2 * 2 * d);
  EXPECT_GT(head0, head1);  // the pooled budget follows the importance
}

TEST(ReadersTest, ConstrainedValueDepthsComeInPacketsOfTwo) {
  LloydTree tree(8);
  const ReaderPlan plan = MakeReaderPlan({ReaderKind::kConstrained, 4.0, 0, 0}, 8);
  std::vector<double> a(300);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 1.0 / (1.0 + static_cast<double>(i));
  std::vector<uint8_t> depths(a.size());
  AllocatorScratch scratch;
  ChooseValueDepths(plan, ReaderAllocators(plan, tree.distortions()), a, 1, 300, depths, scratch);
  int64_t spent = 0;
  for (uint8_t t : depths) {
    EXPECT_EQ(t % 2, 1) << "depths are 1, 3, 5, 7";
    EXPECT_LE(t, 7);
    spent += t;
  }
  EXPECT_LE(spent, 4 * 300);
  EXPECT_GE(spent, 4 * 300 - 1);
}

TEST(ReadersTest, FullReaderReadsEveryScalarAtW) {
  LloydTree tree(4);
  const ReaderPlan plan = MakeReaderPlan({ReaderKind::kFull, 4.0, 0, 0}, 4);
  std::vector<double> importance(32, 0.0);
  std::vector<uint8_t> depths(32);
  AllocatorScratch scratch;
  ChooseKeyDepths(plan, ReaderAllocators(plan, tree.distortions()), importance, 2, 16, depths,
                  scratch);
  for (uint8_t t : depths) EXPECT_EQ(t, 4);
}

// GQA: with per-head budgets a KV head's reads depend only on its own query heads, so moving a
// query head of another group changes nothing for this group's outputs.
TEST(ReadersTest, ConstrainedGroupIgnoresQueriesOfOtherKvHeads) {
  SyntheticConfig data;
  data.geometry = {8, 2, 32};
  data.tokens = 512;
  data.seed = 7;
  const SyntheticLayer layer = MakeSyntheticLayer(data);
  auto calibration = std::make_shared<const Calibration>(MakeSyntheticCalibration(data, 1024));
  ReadKvCacheOptions options;
  options.policy = {ReaderKind::kConstrained, 2.0, 0, 0};
  ReadKvLayerCache cache(data.geometry, calibration, 0, std::make_shared<const LloydTree>(8),
                         options);
  cache.AppendTokens(layer.keys, layer.values);
  std::vector<float> out_a(layer.queries.size()), out_b(layer.queries.size());
  cache.Attend(layer.queries, out_a);
  std::vector<float> moved = layer.queries;
  for (int c = 0; c < 32; ++c) moved[5 * 32 + c] *= -3.0f;  // query head 5 uses KV head 1
  cache.Attend(moved, out_b);
  for (int i = 0; i < 4 * 32; ++i) EXPECT_EQ(out_a[i], out_b[i]) << i;  // KV head 0's group
  bool other_changed = false;
  for (int i = 4 * 32; i < 8 * 32; ++i) other_changed |= out_a[i] != out_b[i];
  EXPECT_TRUE(other_changed);
}

}  // namespace
}  // namespace readkv::codec
