#include "readkv/codec/calibration.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::DeriveSeed;
using kvgate::stats::SplitMixRng;

namespace {

struct Rows {
  // [layer][head][token] -> d floats
  std::vector<std::vector<std::vector<std::vector<float>>>> key, value;
};

constexpr int kLayers = 2, kHeads = 3, kDim = 16, kTokens = 300;

Rows MakeRows(uint64_t seed) {
  SplitMixRng rng(seed);
  Rows rows;
  for (auto* side : {&rows.key, &rows.value}) {
    side->assign(kLayers, std::vector<std::vector<std::vector<float>>>(kHeads));
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeads; ++h) {
        for (int t = 0; t < kTokens; ++t) {
          std::vector<float> v(kDim);
          for (int c = 0; c < kDim; ++c) {
            // Per-channel offsets and scales, large enough that a naive one-pass sum would lose
            // digits the two-pass reference keeps.
            v[static_cast<size_t>(c)] =
                static_cast<float>(100.0 * (c % 3) + (1.0 + 0.5 * c + l + h) * rng.Normal());
          }
          (*side)[l][h].push_back(std::move(v));
        }
      }
    }
  }
  return rows;
}

Calibration Calibrate(const Rows& rows, TransformSeeds seeds = {}) {
  Calibrator cal(kLayers, kHeads, kDim, seeds);
  for (int t = 0; t < kTokens; ++t) {
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeads; ++h) cal.Observe(l, h, rows.key[l][h][t], rows.value[l][h][t]);
    }
  }
  return cal.Finish();
}

TEST(CalibrationTest, SeedsAreDerivedPerLayerAndHead) {
  TransformSeeds seeds;
  EXPECT_EQ(seeds.KeySeed(3, 5), DeriveSeed(seeds.key, 3, 5));
  EXPECT_EQ(seeds.ValueSeed(3, 5), DeriveSeed(seeds.value, 3, 5));
  EXPECT_NE(seeds.KeySeed(3, 5), seeds.ValueSeed(3, 5));
  EXPECT_NE(seeds.KeySeed(3, 5), seeds.KeySeed(5, 3));
  EXPECT_NE(seeds.KeySeed(0, 0), seeds.KeySeed(0, 1));
}

TEST(CalibrationTest, MeanAndStdMatchTwoPassInTheTransformedDomain) {
  const Rows rows = MakeRows(1);
  const TransformSeeds seeds{.key = 11, .value = 22};
  const Calibration cal = Calibrate(rows, seeds);
  EXPECT_EQ(cal.samples_per_head, kTokens);
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      for (int side = 0; side < 2; ++side) {
        const auto& raw = side == 0 ? rows.key[l][h] : rows.value[l][h];
        const HadamardTransform t(kDim, side == 0 ? seeds.KeySeed(l, h) : seeds.ValueSeed(l, h));
        std::vector<std::vector<float>> rotated;
        double amax = 0.0;
        for (const auto& r : raw) {
          std::vector<float> out(kDim);
          t.Forward(r, out);
          rotated.push_back(out);
          for (float x : r) amax = std::max(amax, static_cast<double>(std::fabs(x)));
        }
        const auto mean = side == 0 ? cal.KeyMean(l, h) : cal.ValueMean(l, h);
        const auto sd = side == 0 ? cal.KeyStd(l, h) : cal.ValueStd(l, h);
        for (int c = 0; c < kDim; ++c) {
          double m = 0.0;
          for (const auto& r : rotated) m += r[static_cast<size_t>(c)];
          m /= kTokens;
          double ss = 0.0;
          for (const auto& r : rotated)
            ss += (r[static_cast<size_t>(c)] - m) * (r[static_cast<size_t>(c)] - m);
          const double s = std::sqrt(ss / (kTokens - 1));
          EXPECT_NEAR(mean[static_cast<size_t>(c)], m, 1e-5 * (std::fabs(m) + s));
          EXPECT_NEAR(sd[static_cast<size_t>(c)], s, 1e-5 * s);
        }
        const float got_amax = side == 0 ? cal.key_amax[static_cast<size_t>(l * kHeads + h)]
                                         : cal.value_amax[static_cast<size_t>(l * kHeads + h)];
        EXPECT_EQ(got_amax, static_cast<float>(amax));
      }
    }
  }
}

TEST(CalibrationTest, ConstantChannelStdIsClampedToMinStd) {
  Calibrator cal(1, 1, 8, {}, 0.25f);
  std::vector<float> zero(8, 0.0f);
  for (int t = 0; t < 10; ++t) cal.Observe(0, 0, zero, zero);
  const Calibration c = cal.Finish();
  for (float s : c.key_std) EXPECT_EQ(s, 0.25f);
  for (float s : c.value_std) EXPECT_EQ(s, 0.25f);
  EXPECT_EQ(c.key_amax[0], 0.0f);
}

TEST(CalibrationTest, FinishNeedsTwoSamplesPerHead) {
  Calibrator cal(1, 2, 8);
  std::vector<float> v(8, 1.0f);
  cal.Observe(0, 0, v, v);
  cal.Observe(0, 0, v, v);
  cal.Observe(0, 1, v, v);
  try {
    cal.Finish();
    ADD_FAILURE() << "Finish accepted a head with one sample";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "samples");
  }
}

TEST(CalibrationTest, ObserveRejectsBadInputNamingIt) {
  Calibrator cal(2, 2, 8);
  std::vector<float> ok(8, 1.0f), short_row(7, 1.0f), bad(8, 1.0f);
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  const auto field_of = [&](auto&& call) {
    try {
      call();
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("no error");
  };
  EXPECT_EQ(field_of([&] { cal.Observe(2, 0, ok, ok); }), "layer");
  EXPECT_EQ(field_of([&] { cal.Observe(0, -1, ok, ok); }), "head");
  EXPECT_EQ(field_of([&] { cal.Observe(0, 0, short_row, ok); }), "key");
  EXPECT_EQ(field_of([&] { cal.Observe(0, 0, ok, short_row); }), "value");
  EXPECT_EQ(field_of([&] { cal.Observe(0, 0, bad, ok); }), "key");
  EXPECT_EQ(field_of([&] { cal.Observe(0, 0, ok, bad); }), "value");
  EXPECT_EQ(field_of([] { Calibrator c(1, 1, 12); }), "head_dim");
  EXPECT_EQ(field_of([] { Calibrator c(0, 1, 8); }), "layers");
}

TEST(CalibrationTest, SerializeParseRoundTripsEveryFloatExactly) {
  Calibration cal = Calibrate(MakeRows(2));
  // Awkward floats: the shortest-decimal path, denormals, extremes, -0 and random bit patterns.
  cal.key_mean[0] = 0.1f;
  cal.key_mean[1] = 1.0f / 3.0f;
  cal.key_mean[2] = std::numeric_limits<float>::denorm_min();
  cal.key_mean[3] = -std::numeric_limits<float>::max();
  cal.key_mean[4] = -0.0f;
  cal.key_mean[5] = 16777217.0f;
  SplitMixRng rng(3);
  for (size_t i = 6; i < cal.value_mean.size(); ++i) {
    float f;
    do {
      f = std::bit_cast<float>(static_cast<uint32_t>(rng.Next()));
    } while (!std::isfinite(f));
    cal.value_mean[i] = f;
  }
  cal.seeds.key = std::numeric_limits<uint64_t>::max();
  const std::string text = cal.Serialize();
  const Calibration back = Calibration::Parse(text);
  EXPECT_EQ(back.layers, cal.layers);
  EXPECT_EQ(back.kv_heads, cal.kv_heads);
  EXPECT_EQ(back.head_dim, cal.head_dim);
  EXPECT_EQ(back.seeds.key, cal.seeds.key);
  EXPECT_EQ(back.seeds.value, cal.seeds.value);
  EXPECT_EQ(back.samples_per_head, cal.samples_per_head);
  const auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> out;
    for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
    return out;
  };
  EXPECT_EQ(bits(back.key_mean), bits(cal.key_mean));
  EXPECT_EQ(bits(back.key_std), bits(cal.key_std));
  EXPECT_EQ(bits(back.value_mean), bits(cal.value_mean));
  EXPECT_EQ(bits(back.value_std), bits(cal.value_std));
  EXPECT_EQ(bits(back.key_amax), bits(cal.key_amax));
  EXPECT_EQ(bits(back.value_amax), bits(cal.value_amax));
  EXPECT_EQ(back.Digest(), cal.Digest());
  EXPECT_EQ(back.Serialize(), text);  // canonical
  EXPECT_NE(text.find("0.1,"), std::string::npos) << "0.1f should print as its shortest decimal";
}

TEST(CalibrationTest, DigestChangesWhenAnyFloatOrSeedChanges) {
  const Calibration cal = Calibrate(MakeRows(4));
  const std::string base = cal.Digest();
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(Calibrate(MakeRows(4)).Digest(), base);  // deterministic
  Calibration changed = cal;
  changed.value_std[7] = std::nextafter(changed.value_std[7], 1e9f);
  EXPECT_NE(changed.Digest(), base);
  changed = cal;
  changed.key_amax[1] = std::nextafter(changed.key_amax[1], 0.0f);
  EXPECT_NE(changed.Digest(), base);
  changed = cal;
  changed.seeds.value ^= 1;
  EXPECT_NE(changed.Digest(), base);
  changed = cal;
  changed.samples_per_head += 1;  // bookkeeping only
  EXPECT_EQ(changed.Digest(), base);
}

TEST(CalibrationTest, ParseNamesTheMalformedField) {
  const Calibration cal = Calibrate(MakeRows(5));
  const nlohmann::json good = nlohmann::json::parse(cal.Serialize());
  const auto field_of = [](const std::string& text) {
    try {
      Calibration::Parse(text);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("no error");
  };
  EXPECT_EQ(field_of(good.dump()), "no error");
  EXPECT_EQ(field_of("{not json"), "json");
  EXPECT_EQ(field_of("[1, 2]"), "json");
  auto j = good;
  j.erase("key_std");
  EXPECT_EQ(field_of(j.dump()), "key_std");
  j = good;
  j["key_mean"].erase(0);
  EXPECT_EQ(field_of(j.dump()), "key_mean");
  j = good;
  j["value_std"][4] = 0.0;
  EXPECT_EQ(field_of(j.dump()), "value_std");
  j = good;
  j["value_mean"][2] = "x";
  EXPECT_EQ(field_of(j.dump()), "value_mean");
  j = good;
  j["key_amax"][0] = -1.0;
  EXPECT_EQ(field_of(j.dump()), "key_amax");
  j = good;
  j["value_amax"][0] = 1e300;  // not a finite float
  EXPECT_EQ(field_of(j.dump()), "value_amax");
  j = good;
  j["head_dim"] = 12;
  EXPECT_EQ(field_of(j.dump()), "head_dim");
  j = good;
  j["layers"] = "2";
  EXPECT_EQ(field_of(j.dump()), "layers");
  j = good;
  j["key_seed"] = -1;
  EXPECT_EQ(field_of(j.dump()), "key_seed");
  j = good;
  j["format"] = "something-else";
  EXPECT_EQ(field_of(j.dump()), "format");
  j = good;
  j["version"] = 2;
  EXPECT_EQ(field_of(j.dump()), "version");
  j = good;
  j["extra"] = 1;
  EXPECT_EQ(field_of(j.dump()), "json");
}

TEST(CalibrationTest, AccessorsRejectOutOfRangeHeads) {
  const Calibration cal = Calibrate(MakeRows(6));
  EXPECT_EQ(cal.KeyMean(1, 2).size(), static_cast<size_t>(kDim));
  EXPECT_EQ(cal.KeyMean(1, 2).data(), cal.key_mean.data() + cal.ChannelIndex(1, 2, 0));
  EXPECT_THROW(cal.KeyMean(2, 0), InvalidArgument);
  EXPECT_THROW(cal.ValueStd(0, 3), InvalidArgument);
}

}  // namespace
}  // namespace readkv::codec
