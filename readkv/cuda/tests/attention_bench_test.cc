// The host-side pieces of the attention bench that run without a GPU: flag parsing, the
// configuration checks, the timing summary, the JSON shape, and the FP8 encoder the GPU
// conversion uses (bit-identical to the codec's).
#include "readkv/cuda/attention_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fp8_e4m3_encode.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/fp8.h"

namespace readkv::cuda {
namespace {

using codec::InvalidArgument;
using codec::KvBackend;

// The field of the InvalidArgument `body` throws, or "" if it does not throw one.
template <typename Body>
std::string ThrownField(Body&& body) {
  try {
    body();
  } catch (const InvalidArgument& e) {
    return e.field();
  }
  return "";
}

TEST(KvSpecTest, ParsesDenseAndFp8) {
  EXPECT_EQ(ParseKvSpec("dense").backend, KvBackend::kDense);
  EXPECT_EQ(ParseKvSpec("dense").Name(), "dense");
  EXPECT_EQ(ParseKvSpec("fp8").backend, KvBackend::kFp8);
  EXPECT_EQ(ParseKvSpec("fp8").Name(), "fp8");
}

TEST(KvSpecTest, ParsesTheTileReaderAsTheReadKvBackendAndNamesItByTheReader) {
  const KvSpec t = ParseKvSpec("tile:8:4");
  EXPECT_EQ(t.backend, KvBackend::kReadKv);  // ReadKV's one GPU reader
  EXPECT_EQ(t.store_bits, 8);
  EXPECT_DOUBLE_EQ(t.read_bits, 4.0);
  EXPECT_DOUBLE_EQ(t.key_bits, 4.0);
  EXPECT_DOUBLE_EQ(t.value_bits, 4.0);
  EXPECT_FALSE(t.byte_keys);
  EXPECT_EQ(t.Name(), "tile:8:4");
  EXPECT_EQ(ParseKvSpec("tile:8:2").Name(), "tile:8:2");
  EXPECT_EQ(ParseKvSpec("tile:8:2.5").Name(), "tile:8:2.5");
  EXPECT_EQ(ParseKvSpec("tile:4:2.5").Name(), "tile:4:2.5");
  const KvSpec split = ParseKvSpec("tile:8:4:6:2");
  EXPECT_DOUBLE_EQ(split.key_bits, 6.0);
  EXPECT_DOUBLE_EQ(split.value_bits, 2.0);
  EXPECT_EQ(split.Name(), "tile:8:4:6:2");
  EXPECT_EQ(ParseKvSpec("tile:8:4:4:4").Name(), "tile:8:4");  // an equal split is no split
  // Every name parses back to the same spec.
  for (const char* text : {"tile:8:4", "tile:8:2", "tile:2:1.5", "tile:8:4.5:7:2",
                           "tile-kbytes:8:5:8:2", "tile-kbytes:8:8"}) {
    const KvSpec once = ParseKvSpec(text);
    const KvSpec twice = ParseKvSpec(once.Name());
    EXPECT_EQ(twice.Name(), once.Name()) << text;
    EXPECT_EQ(twice.backend, once.backend) << text;
    EXPECT_EQ(twice.byte_keys, once.byte_keys) << text;
    EXPECT_DOUBLE_EQ(twice.key_bits, once.key_bits) << text;
    EXPECT_DOUBLE_EQ(twice.value_bits, once.value_bits) << text;
  }
  const std::vector<KvSpec> specs = ParseKvSpecs("fp8,tile:8:4,tile:8:2");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[1].Name(), "tile:8:4");
  EXPECT_EQ(ThrownField([] { ParseKvSpecs("tile:8:4,tile:8:4.0"); }), "--kv");
  // Byte keys: the tile reader on the served split, beside the tree's keys of the same budget.
  const KvSpec bytes = ParseKvSpec("tile-kbytes:8:5:8:2");
  EXPECT_TRUE(bytes.byte_keys);
  EXPECT_EQ(bytes.backend, KvBackend::kReadKv);
  EXPECT_EQ(bytes.Name(), "tile-kbytes:8:5:8:2");
  EXPECT_FALSE(ParseKvSpec("tile:8:5:8:2").byte_keys);
  EXPECT_EQ(ParseKvSpecs("tile:8:5:8:2,tile-kbytes:8:5:8:2").size(), 2u);
}

TEST(KvSpecTest, RejectsBadTileSpecsAndOtherReadersNamingTheFlag) {
  for (const char* bad : {"tile", "tile:8", "tile:8:", "tile::4", "tile:x:4", "tile:9:4",
                          "tile:1:1", "tile:8:0.5", "tile:8:9", "tile:8:4:6", "tile:8:4:6:3",
                          "tile:8:4:x:2", "tile:8:4:6:2:1", "Tile:8:4", "tiles:8:4",
                          "constrained:8:4", "flexible:8:4", "full:8:8", "tile:8:4:7.5:0.5",
                          "tile:8:4:1", "tile:4294967304:4", "fp16", "", "Dense", " dense",
                          "dense:8", "fp8:8:4",
                          // byte keys: W and R_K 8 only, the tile reader only
                          "tile-kbytes:8:4", "tile-kbytes:8:4:6:2", "tile-kbytes:4:4:4:4",
                          "readkv-kbytes:8:8", "tile-kbytes", "tile-kbytes:8"}) {
    EXPECT_EQ(ThrownField([&] { ParseKvSpec(bad); }), "--kv") << bad;
  }
  try {
    ParseKvSpec("full:8:8");
    FAIL() << "full:8:8 parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tile:W:R"), std::string::npos) << e.what();
  }
}

// The constrained GPU reader's rows ("readkv:W:R") are gone: refused by name, with the kinds that
// remain in the message.
TEST(KvSpecTest, RefusesTheRemovedConstrainedReaderNamingTheAcceptedKinds) {
  for (const char* removed : {"readkv:8:4", "readkv:8:2", "readkv:8:4.5:7:2", "readkv",
                              "readkv:8", "readkv:x:4"}) {
    try {
      ParseKvSpec(removed);
      ADD_FAILURE() << removed << " parsed";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "--kv") << removed;
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + std::string(removed) + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("constrained GPU reader"), std::string::npos) << what;
      EXPECT_NE(what.find("was removed"), std::string::npos) << what;
      for (const char* kind :
           {"dense", "fp8", "tile:W:R", "tile:W:R:RK:RV", "tile-kbytes:8:R:8:RV"}) {
        EXPECT_NE(what.find(kind), std::string::npos) << kind << " in: " << what;
      }
    }
  }
  EXPECT_EQ(ThrownField([] { ParseKvSpecs("dense,fp8,readkv:8:4"); }), "--kv");
}

TEST(KvSpecTest, ListsRejectDuplicatesAndEmptyItems) {
  EXPECT_EQ(ParseKvSpecs("dense,fp8,tile:8:4,tile:8:2").size(), 4u);
  EXPECT_EQ(ThrownField([] { ParseKvSpecs("dense,dense"); }), "--kv");
  EXPECT_EQ(ThrownField([] { ParseKvSpecs("tile:8:4,tile:8:4.0"); }), "--kv");
  EXPECT_EQ(ThrownField([] { ParseKvSpecs("dense,,fp8"); }), "--kv");
}

TEST(PositiveListTest, ParsesCommaSeparatedPositiveIntegersAndNamesTheFlag) {
  EXPECT_EQ(ParsePositiveList("--tokens", "8192,32768,131072"),
            (std::vector<int64_t>{8192, 32768, 131072}));
  EXPECT_EQ(ParsePositiveList("--batch", "1"), (std::vector<int64_t>{1}));
  for (const char* bad : {"0", "-1", "8192,", "", "1.5", "8k", "1,,2"}) {
    EXPECT_EQ(ThrownField([&] { ParsePositiveList("--tokens", bad); }), "--tokens") << bad;
  }
}

TEST(OnePassModeTest, ParsesItsThreeNamesAndNothingElse) {
  for (const OnePassMode mode : {OnePassMode::kAuto, OnePassMode::kOn, OnePassMode::kOff}) {
    OnePassMode parsed = mode == OnePassMode::kOn ? OnePassMode::kOff : OnePassMode::kOn;
    EXPECT_TRUE(ParseOnePassMode(OnePassModeName(mode), &parsed)) << OnePassModeName(mode);
    EXPECT_EQ(parsed, mode);
  }
  EXPECT_STREQ(OnePassModeName(OnePassMode::kAuto), "auto");
  EXPECT_EQ(BenchConfig{}.one_pass, OnePassMode::kAuto);  // kvgate serve's choice by default
  for (const char* bad : {"", "On", "true", "1", "auto ", "sometimes"}) {
    OnePassMode parsed = OnePassMode::kOff;
    EXPECT_FALSE(ParseOnePassMode(bad, &parsed)) << bad;
    EXPECT_EQ(parsed, OnePassMode::kOff) << bad;  // untouched
  }
}

// A block's timeline at 2 GHz (2 cycles a nanosecond): it starts at `start_ns` and spends
// phase k (logits, barrier, statistics, cut, values, finish) `us[k]` microseconds; its warps'
// Value streams end `warps_us` after the cut (default: each at the Values phase's end).
TilePhaseClocks Timeline(uint64_t start_ns, const std::array<double, kTilePhases>& us,
                         unsigned sm = 0, std::array<double, kTilePhaseWarps> warps_us = {}) {
  TilePhaseClocks c{};
  c.sm = sm;
  c.clock[0] = 1000000 + 2 * start_ns;
  for (int k = 0; k < kTilePhases; ++k) {
    c.clock[k + 1] = c.clock[k] + static_cast<uint64_t>(std::llround(2000.0 * us[k]));
  }
  for (int w = 0; w < kTilePhaseWarps; ++w) {
    const double after_cut = warps_us[w] > 0 ? warps_us[w] : us[4];
    c.values_warp_end[w] =
        c.clock[kStampCut] + static_cast<uint64_t>(std::llround(2000.0 * after_cut));
  }
  c.global_start_ns = start_ns;
  c.global_end_ns = start_ns + (c.clock[kStampEnd] - c.clock[kStampStart]) / 2;
  return c;
}

TEST(SummarisePhasesTest, GivesEachPhasesMedianAndTheLaunchesSpreadAtTheBlocksClock) {
  // Two launches of three blocks; the second launch's blocks start 100 us later.
  std::vector<TilePhaseClocks> clocks;
  for (const uint64_t t0 : {uint64_t{1000}, uint64_t{101000}}) {
    // The first two on SM 7 (a load of 2 blocks), the third alone on SM 3.
    clocks.push_back(Timeline(t0, {20, 2, 0.5, 5, 15, 1}, 7));
    clocks.push_back(Timeline(t0 + 1000, {22, 1, 0.5, 6, 14, 3}, 7));  // starts 1 us late
    clocks.push_back(Timeline(t0 + 500, {18, 3, 0.5, 4, 16, 2}, 3));
  }
  const PhaseTimes t = SummarisePhases(clocks, 2);
  EXPECT_EQ(t.launches, 2);
  EXPECT_EQ(t.blocks, 6);
  EXPECT_NEAR(t.sm_ghz, 2.0, 1e-9);
  const double median[kTilePhases] = {20, 2, 0.5, 5, 15, 2};
  for (int k = 0; k < kTilePhases; ++k) {
    EXPECT_NEAR(t.median_us[k], median[k], 1e-9) << kTilePhaseNames[k];
    EXPECT_GE(t.p90_us[k], t.median_us[k]) << kTilePhaseNames[k];
  }
  EXPECT_NEAR(t.p90_us[0], 22.0, 1e-9);           // 18, 18, 20, 20, 22, 22
  EXPECT_NEAR(t.lifetime_median_us, 43.5, 1e-9);  // 43.5, 46.5, 43.5 in each launch
  EXPECT_NEAR(t.start_spread_us, 1.0, 1e-9);
  EXPECT_NEAR(t.span_us, 1.0 + 46.5, 1e-9);  // the late block's end
  // By load: SM 3's block (43.5 us twice), then SM 7's (43.5 and 46.5 us, twice).
  ASSERT_EQ(t.by_sm_load.size(), 2u);
  EXPECT_EQ(t.by_sm_load[0].blocks_an_sm, 1);
  EXPECT_EQ(t.by_sm_load[0].blocks, 2);
  EXPECT_NEAR(t.by_sm_load[0].lifetime_median_us, 43.5, 1e-9);
  EXPECT_EQ(t.by_sm_load[1].blocks_an_sm, 2);
  EXPECT_EQ(t.by_sm_load[1].blocks, 4);
  EXPECT_NEAR(t.by_sm_load[1].lifetime_median_us, 45.0, 1e-9);
  // The last to end, one a launch of three: the block that started 1 us late and lived 46.5.
  EXPECT_EQ(t.late.blocks, 2);
  EXPECT_NEAR(t.late.start_us, 1.0, 1e-9);
  EXPECT_NEAR(t.late.lifetime_median_us, 46.5, 1e-9);
  const double late[kTilePhases] = {22, 1, 0.5, 6, 14, 3};
  for (int k = 0; k < kTilePhases; ++k) {
    EXPECT_NEAR(t.late.median_us[k], late[k], 1e-9) << kTilePhaseNames[k];
  }
}

TEST(SummarisePhasesTest, TheLastFivePercentToEndAreTheLateBlocks) {
  // One launch of 40 blocks starting together: 37 whose Values take 15 us, then three that end
  // later, by a longer Values (25 and 24 us) or a late start (12 us after the others, 15 us of
  // Values). The last 5% (two blocks) to end are the 25-us one and the late starter.
  std::vector<TilePhaseClocks> clocks;
  for (int i = 0; i < 37; ++i) clocks.push_back(Timeline(1000, {20, 2, 0.5, 5, 15, 1}, i));
  clocks.push_back(Timeline(1000, {20, 2, 0.5, 5, 25, 1}, 40));   // ends at 53.5 us
  clocks.push_back(Timeline(1000, {20, 2, 0.5, 5, 24, 1}, 41));   // 52.5: not among the two
  clocks.push_back(Timeline(13000, {20, 2, 0.5, 5, 15, 1}, 42));  // 12 + 43.5 = 55.5
  const PhaseTimes t = SummarisePhases(clocks, 1);
  EXPECT_NEAR(t.median_us[4], 15.0, 1e-9);
  EXPECT_EQ(t.late.blocks, 2);
  EXPECT_NEAR(t.late.start_us, 6.0, 1e-9);               // 0 and 12
  EXPECT_NEAR(t.late.median_us[4], 20.0, 1e-9);          // 25 and 15
  EXPECT_NEAR(t.late.lifetime_median_us, 48.5, 1e-9);    // 53.5 and 43.5
  EXPECT_NEAR(t.span_us, 55.5, 1e-9);
}

TEST(SummarisePhasesTest, GivesTheValuesWarpsFastestSlowestAndGap) {
  // Three blocks whose Values phase is 16 us: one balanced, two with a warp far behind the rest
  // (gaps 4 and 6 us); a fourth reads no Value tile (no warp stamps) and is left out.
  std::vector<TilePhaseClocks> clocks = {
      Timeline(1000, {20, 2, 0.5, 5, 16, 1}, 0, {16, 16, 16, 16}),
      Timeline(1000, {20, 2, 0.5, 5, 16, 1}, 1, {12, 16, 13, 12.5}),
      Timeline(1000, {20, 2, 0.5, 5, 16, 1}, 2, {10, 11, 16, 10.5}),
      Timeline(1000, {20, 2, 0.5, 5, 1, 1}, 3)};
  std::fill(std::begin(clocks[3].values_warp_end), std::end(clocks[3].values_warp_end), 0ull);
  const PhaseTimes t = SummarisePhases(clocks, 1);
  EXPECT_EQ(t.values_warps.blocks, 3);
  EXPECT_NEAR(t.values_warps.fastest_median_us, 12.0, 1e-9);  // 16, 12, 10
  EXPECT_NEAR(t.values_warps.slowest_median_us, 16.0, 1e-9);
  EXPECT_NEAR(t.values_warps.gap_median_us, 4.0, 1e-9);       // 0, 4, 6
  EXPECT_NEAR(t.values_warps.gap_p90_us, 5.6, 1e-9);
}

TEST(SummarisePhasesTest, RefusesMissingOrDisorderedStampsNamingTheBlock) {
  const TilePhaseClocks good = Timeline(5000, {20, 2, 0.5, 5, 15, 1});
  const auto message = [](const std::vector<TilePhaseClocks>& clocks, int launches) {
    try {
      SummarisePhases(clocks, launches);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TilePhaseClocks unstamped = good;
  unstamped.clock[kStampCut] = 0;  // a block that never reached its cut's stamp
  EXPECT_NE(message({good, good, good, unstamped}, 2).find("launch 1, block 1: stamp 4"),
            std::string::npos)
      << message({good, good, good, unstamped}, 2);
  TilePhaseClocks backwards = good;
  std::swap(backwards.clock[kStampLogits], backwards.clock[kStampBarrier]);
  EXPECT_NE(message({backwards}, 1).find("launch 0, block 0: stamp 2"), std::string::npos);
  TilePhaseClocks early_warp = good;  // a warp's Values end before the statistics were formed
  early_warp.values_warp_end[2] = early_warp.clock[kStampStatistics] - 1;
  EXPECT_NE(message({good, early_warp}, 1).find("launch 0, block 1: a Values warp's end outside"),
            std::string::npos)
      << message({good, early_warp}, 1);
  TilePhaseClocks idle_warp = good;  // a warp with no tile, done before thread 0's cut stamp
  idle_warp.values_warp_end[3] = idle_warp.clock[kStampCut] - 1;
  EXPECT_EQ(message({idle_warp}, 1), "no error");
  TilePhaseClocks one_warp = good;  // only some warps stamped
  one_warp.values_warp_end[1] = 0;
  EXPECT_NE(message({one_warp}, 1).find("block 0: 3 of 4 Values warps' ends stamped"),
            std::string::npos)
      << message({one_warp}, 1);
  TilePhaseClocks no_timer = good;
  no_timer.global_end_ns = no_timer.global_start_ns;
  EXPECT_NE(message({no_timer}, 1).find("global timer"), std::string::npos);
  EXPECT_NE(message({good, good, good}, 2).find("not 2 launches"), std::string::npos);
  EXPECT_NE(message({}, 1).find("not 1 launches"), std::string::npos);
  EXPECT_EQ(message({good, good}, 2), "no error");
}

TEST(BenchConfigTest, DefaultsAreValid) { EXPECT_NO_THROW(BenchConfig{}.Validate()); }

TEST(BenchConfigTest, RejectsShapesTheKernelsCannotRunNamingTheFlag) {
  const auto field = [](auto mutate) {
    BenchConfig c;
    c.kv = ParseKvSpecs("dense,fp8,tile:8:4");
    mutate(c);
    return ThrownField([&] { c.Validate(); });
  };
  EXPECT_EQ(field([](BenchConfig& c) { c.heads_kv = 5; }), "--heads-kv");  // 32 % 5
  EXPECT_EQ(field([](BenchConfig& c) { c.heads_kv = 2; }), "--heads-kv");  // group 16
  EXPECT_EQ(field([](BenchConfig& c) { c.heads_q = 0; }), "--heads-q");
  EXPECT_EQ(field([](BenchConfig& c) { c.head_dim = 96; }), "--head-dim");
  EXPECT_EQ(field([](BenchConfig& c) { c.tokens = {}; }), "--tokens");
  EXPECT_EQ(field([](BenchConfig& c) { c.tokens = {0}; }), "--tokens");
  EXPECT_EQ(field([](BenchConfig& c) { c.tokens = {2}; }), "--tokens");  // the calibration
  EXPECT_EQ(field([](BenchConfig& c) { c.batches = {0}; }), "--batch");
  EXPECT_EQ(field([](BenchConfig& c) { c.iters = 19; }), "--iters");
  EXPECT_EQ(field([](BenchConfig& c) { c.chunk_tokens = 300; }), "--chunk-tokens");
  EXPECT_EQ(field([](BenchConfig& c) { c.kv = {}; }), "--kv");
  EXPECT_EQ(field([](BenchConfig& c) { c.chunk_tokens = 0; }), "");  // PlanTileDecode's choice
  EXPECT_EQ(field([](BenchConfig& c) { c.split = SplitPlan{3}; }), "--split-cluster");
  EXPECT_EQ(field([](BenchConfig& c) { c.split = SplitPlan{0}; }), "");  // persistent blocks
  // Tile rows' chunks: 512 to 2048 by 512.
  const auto tile_chunk = [](int chunk) {
    return [chunk](BenchConfig& c) {
      c.kv = ParseKvSpecs("fp8,tile:8:2");
      c.chunk_tokens = chunk;
    };
  };
  EXPECT_EQ(field(tile_chunk(1024)), "");
  EXPECT_EQ(field(tile_chunk(2048)), "");
  EXPECT_EQ(field(tile_chunk(768)), "--chunk-tokens");
  EXPECT_EQ(field(tile_chunk(2560)), "--chunk-tokens");
  EXPECT_EQ(field(tile_chunk(256)), "--chunk-tokens");
  EXPECT_EQ(field(tile_chunk(-512)), "--chunk-tokens");
  // Value windows: the tile rows' chunk, 512 to 2048 by 512.
  const auto window = [](int w, int chunk) {
    return [w, chunk](BenchConfig& c) {
      c.kv = ParseKvSpecs("fp8,tile:8:2");
      c.value_window = w;
      c.chunk_tokens = chunk;
    };
  };
  EXPECT_EQ(field(window(512, 0)), "");
  EXPECT_EQ(field(window(1024, 1024)), "");
  EXPECT_EQ(field(window(1024, 512)), "--value-window");
  EXPECT_EQ(field(window(768, 0)), "--value-window");
  EXPECT_EQ(field(window(4096, 0)), "--value-window");
  const auto no_tile = [](BenchConfig& c) { c.kv = ParseKvSpecs("dense,fp8"); };
  EXPECT_EQ(field([&](BenchConfig& c) {
              no_tile(c);
              c.value_window = 512;
            }),
            "--value-window");
  // One pass forced on: byte-key rows in Value windows (whether a row's windows fit a cluster
  // is the workspace's check, when the point is built). Auto (the default) and off need no
  // window: without one, auto never chooses one pass.
  const auto one_pass = [](int w, OnePassMode mode) {
    return [w, mode](BenchConfig& c) {
      c.kv = ParseKvSpecs("fp8,tile-kbytes:8:5:8:2");
      c.value_window = w;
      c.one_pass = mode;
    };
  };
  EXPECT_EQ(field(one_pass(1024, OnePassMode::kOn)), "");
  EXPECT_EQ(field(one_pass(0, OnePassMode::kOn)), "--one-pass");
  EXPECT_EQ(field(one_pass(0, OnePassMode::kAuto)), "");
  EXPECT_EQ(field(one_pass(0, OnePassMode::kOff)), "");
  // Outlier lists: the tile rows' only, a cap in [0, 16].
  EXPECT_EQ(field([&](BenchConfig& c) {
              no_tile(c);
              c.outlier_cap = 2;
            }),
            "--outlier-cap");
  const auto tiled = [](int cap) {
    return [cap](BenchConfig& c) {
      c.kv = ParseKvSpecs("fp8,tile:8:4,tile:8:2");
      c.outlier_cap = cap;
    };
  };
  EXPECT_EQ(field(tiled(2)), "");
  EXPECT_EQ(field(tiled(0)), "");
  EXPECT_EQ(field(tiled(-1)), "--outlier-cap");
  EXPECT_EQ(field(tiled(17)), "--outlier-cap");
}

TEST(SummariseTimesTest, MedianAndPercentilesInterpolateOrderStatistics) {
  // 11 values 0..100 shuffled: p10 = 10, median = 50, p90 = 90 exactly.
  const TimingStats s = SummariseTimes({50, 0, 100, 10, 90, 20, 80, 30, 70, 40, 60});
  EXPECT_EQ(s.launches, 11);
  EXPECT_DOUBLE_EQ(s.median_us, 50.0);
  EXPECT_DOUBLE_EQ(s.p10_us, 10.0);
  EXPECT_DOUBLE_EQ(s.p90_us, 90.0);
  EXPECT_DOUBLE_EQ(s.mean_us, 50.0);
  const TimingStats even = SummariseTimes({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(even.median_us, 2.5);
  EXPECT_EQ(SummariseTimes({}).launches, 0);
}

BenchReport SampleReport() {
  BenchReport report;
  report.device = "NVIDIA H200 (sm_90)";
  report.driver_version = 13000;
  report.runtime_version = 13000;
  report.l2_bytes = 60 << 20;
  report.stream_bytes = int64_t{4} << 30;
  report.stream_gbps = 4000.0;
  report.cold_l2_method = "rotation";
  BenchRow fp8;
  fp8.tokens = 8192;
  fp8.batch = 1;
  fp8.kv = "fp8";
  fp8.backend = KvBackend::kFp8;
  fp8.time = SummariseTimes({10, 11, 12});
  fp8.traffic.payload = 1000;
  fp8.traffic.io = 24;
  fp8.traffic.kernels[0] = {"SplitDecodeKernel", 1000, 16};
  fp8.traffic.kernels[1] = {"CombineSplits", 0, 8};
  fp8.time_vs_fp8 = 1.0;
  fp8.rel_l2_vs_dense = 0.01;
  BenchRow anchor = fp8;
  anchor.kv = "torch_sdpa";
  anchor.anchor = true;
  anchor.time_vs_fp8 = 0;  // absent -> null
  anchor.finite = false;
  BenchRow tile = fp8;
  tile.kv = "tile:8:4";
  tile.backend = KvBackend::kReadKv;
  tile.traffic.kernels[4] = {"TileCombine", 32, 8};
  BenchRow one = tile;  // a one-pass row whose clusters do not all fit at once
  one.kv = "tile-kbytes:8:5:8:2";
  one.one_pass = true;
  one.clusters = 32;
  one.resident_clusters = 28;
  one.phases.launches = 3;  // where its blocks' time went
  one.phases.blocks = 1536;
  for (int k = 0; k < kTilePhases; ++k) {
    one.phases.median_us[k] = 10.0 + k;
    one.phases.p90_us[k] = 20.0 + k;
  }
  one.phases.lifetime_median_us = 45.0;
  one.phases.start_spread_us = 1.5;
  one.phases.span_us = 52.0;
  one.phases.sm_ghz = 1.76;
  one.phases.by_sm_load = {{3, 144, 41.9}, {5, 960, 43.8}};  // blocks an SM, blocks, lifetime
  one.phases.late = {78, 0.3, {16.0, 3.0, 2.5, 8.0, 17.0, 1.5}, 48.0};
  one.phases.values_warps = {1536, 12.5, 15.0, 2.0, 3.5};
  BenchRow two = one;  // the same read in two launches, where one pass's clusters would fit
  two.phases = {};
  two.kv = "tile-kbytes:8:4:8:2";
  two.one_pass = false;
  two.resident_clusters = 35;
  report.rows = {fp8, anchor, tile, one, two};
  return report;
}

TEST(BenchReportJsonTest, HoldsTheRunInfoDeviceStreamAndEveryRowWithItsLedgers) {
  BenchConfig config;
  config.kv = ParseKvSpecs("dense,fp8,tile:8:4");
  const BenchRunInfo info{"0.1.0", "abcdef012345", "2026-11-29T18:00:00Z",
                          "kvgate bench attention --kv dense,fp8,tile:8:4"};
  const nlohmann::json j = nlohmann::json::parse(BenchReportJson(config, SampleReport(), info));
  EXPECT_EQ(j.at("bench"), "attention");
  EXPECT_EQ(j.at("git_commit"), "abcdef012345");
  EXPECT_EQ(j.at("date_utc"), "2026-11-29T18:00:00Z");
  EXPECT_EQ(j.at("command_line"), info.command_line);
  EXPECT_FALSE(j.contains("kernel_switches"));  // no launcher reads the environment
  EXPECT_EQ(j.at("device").at("name"), "NVIDIA H200 (sm_90)");
  EXPECT_EQ(j.at("device").at("driver_version"), 13000);
  EXPECT_EQ(j.at("device").at("runtime_version"), 13000);
  EXPECT_DOUBLE_EQ(j.at("stream").at("gbps").get<double>(), 4000.0);
  EXPECT_EQ(j.at("config").at("kv"), nlohmann::json({"dense", "fp8", "tile:8:4"}));
  EXPECT_EQ(j.at("config").at("tokens"), nlohmann::json({8192}));
  EXPECT_EQ(j.at("cold_l2_method"), "rotation");
  const nlohmann::json rows = j.at("rows");  // copies: g++ 13 -Wdangling-reference
  ASSERT_EQ(rows.size(), 5u);
  const nlohmann::json r = rows[0];
  EXPECT_EQ(r.at("kv"), "fp8");
  EXPECT_DOUBLE_EQ(r.at("time").at("median_us").get<double>(), 11.0);
  EXPECT_EQ(r.at("time").at("launches"), 3);
  EXPECT_EQ(r.at("traffic_bytes").at("total"), 1024);
  EXPECT_EQ(r.at("traffic_bytes").at("payload"), 1000);
  EXPECT_EQ(r.at("traffic_kernels"),  // the launches the model names, in order
            nlohmann::json::parse(R"([{"kernel": "SplitDecodeKernel", "read": 1000, "write": 16},
                                      {"kernel": "CombineSplits", "read": 0, "write": 8}])"));
  for (const char* key : {"logical_bytes", "achieved_gbps", "stream_fraction", "time_vs_dense",
                          "finite", "copies", "copy_bytes", "context_tokens"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  EXPECT_DOUBLE_EQ(r.at("time_vs_fp8").get<double>(), 1.0);
  EXPECT_TRUE(r.at("time_vs_dense").is_null());
  EXPECT_TRUE(rows[1].at("anchor").get<bool>());
  EXPECT_TRUE(rows[1].at("time_vs_fp8").is_null());
  EXPECT_FALSE(rows[1].at("finite").get<bool>());
  // The reader of the ReadKV rows only; a fifth launch in the model comes out in order.
  EXPECT_TRUE(r.at("reader").is_null());
  EXPECT_TRUE(rows[1].at("reader").is_null());
  EXPECT_EQ(rows[2].at("kv"), "tile:8:4");
  EXPECT_EQ(rows[2].at("reader"), "tile");
  const nlohmann::json launches = rows[2].at("traffic_kernels");
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[2].at("kernel"), "TileCombine");
  // A one-pass row carries its clusters and how many the device held at once.
  EXPECT_FALSE(rows[2].at("one_pass").get<bool>());
  EXPECT_TRUE(rows[3].at("one_pass").get<bool>());
  EXPECT_EQ(rows[3].at("clusters"), 32);
  EXPECT_EQ(rows[3].at("resident_clusters"), 28);
  EXPECT_FALSE(rows[4].at("one_pass").get<bool>());  // residency shown for two launches too
  EXPECT_EQ(rows[4].at("resident_clusters"), 35);
  // Where the one-pass row's blocks spent their time; null for rows without a timeline.
  EXPECT_TRUE(rows[0].at("phases").is_null());
  EXPECT_TRUE(rows[4].at("phases").is_null());
  const nlohmann::json phases = rows[3].at("phases");
  EXPECT_EQ(phases.at("names"), nlohmann::json({"logits", "barrier", "statistics", "cut", "values",
                                                "finish"}));
  EXPECT_EQ(phases.at("blocks"), 1536);
  EXPECT_DOUBLE_EQ(phases.at("median_us")[3].get<double>(), 13.0);
  EXPECT_DOUBLE_EQ(phases.at("p90_us")[5].get<double>(), 25.0);
  EXPECT_DOUBLE_EQ(phases.at("span_us").get<double>(), 52.0);
  EXPECT_DOUBLE_EQ(phases.at("sm_ghz").get<double>(), 1.76);
  const nlohmann::json load = phases.at("by_sm_load");
  ASSERT_EQ(load.size(), 2u);
  EXPECT_EQ(load[1].at("blocks_an_sm"), 5);
  EXPECT_EQ(load[1].at("blocks"), 960);
  EXPECT_DOUBLE_EQ(load[1].at("lifetime_median_us").get<double>(), 43.8);
  const nlohmann::json warps = phases.at("values_warps");
  EXPECT_EQ(warps.at("blocks"), 1536);
  EXPECT_DOUBLE_EQ(warps.at("fastest_median_us").get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(warps.at("slowest_median_us").get<double>(), 15.0);
  EXPECT_DOUBLE_EQ(warps.at("gap_median_us").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(warps.at("gap_p90_us").get<double>(), 3.5);
  const nlohmann::json late = phases.at("late");
  EXPECT_DOUBLE_EQ(late.at("share").get<double>(), kLateBlockShare);
  EXPECT_EQ(late.at("blocks"), 78);
  EXPECT_DOUBLE_EQ(late.at("start_us").get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(late.at("median_us")[4].get<double>(), 17.0);
  EXPECT_DOUBLE_EQ(late.at("lifetime_median_us").get<double>(), 48.0);
  EXPECT_EQ(j.at("config").at("one_pass"), "auto");
}

TEST(BenchTableTest, PrintsOneLinePerRowAndMarksNonFiniteOutputs) {
  std::ostringstream out;
  PrintBenchTable(SampleReport(), out);
  const std::string text = out.str();
  EXPECT_NE(text.find("4000.0 GB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("torch_sdpa!NaN"), std::string::npos) << text;
  EXPECT_NE(text.find("1.000"), std::string::npos) << text;  // fp8 vs itself
  EXPECT_NE(text.find("tile:8:4"), std::string::npos) << text;
  // Rows whose plan allows one pass get a residency line saying which shape ran, with the waves
  // one pass runs (or would run) in; other rows get none.
  EXPECT_NE(text.find("one pass: 32 clusters, 28 resident at once (runs in waves)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("one pass:"), text.rfind("one pass:")) << text;
  EXPECT_NE(text.find("two launches: 32 clusters, 35 resident at once\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("two launches:"), text.rfind("two launches:")) << text;
  // The one-pass row's timeline, once.
  EXPECT_NE(text.find("phases: 1536 blocks, median/p90 us: logits 10.0/20.0, barrier 11.0/21.0, "
                      "statistics 12.0/22.0, cut 13.0/23.0, values 14.0/24.0, finish 15.0/25.0; "
                      "lifetime 45.0, starts within 1.5, span 52.0 (SM 1.76 GHz)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("phases:"), text.rfind("phases:")) << text;
  // And its blocks' lifetimes by how many blocks their SM ran, under it.
  EXPECT_NE(text.find("(SM 1.76 GHz)\n" + std::string(24, ' ') +
                      "by SM load: blocks an SM: blocks, lifetime median us: 3: 144, 41.9, "
                      "5: 960, 43.8\n"),
            std::string::npos)
      << text;
  // And the blocks that ended last, under that.
  EXPECT_NE(text.find("5: 960, 43.8\n" + std::string(23, ' ') +
                      "last to end: 78 blocks (each launch's last 5%), median us: start +0.3, "
                      "logits 16.0, barrier 3.0, statistics 2.5, cut 8.0, values 17.0, finish "
                      "1.5; lifetime 48.0\n" + std::string(22, ' ') +
                      "values warps: 1536 blocks, median us: fastest 12.5, slowest 15.0, gap 2.0 "
                      "(p90 3.5)\n"),
            std::string::npos)
      << text;
}

TEST(BenchTableTest, SaysWhenTwoLaunchesRanBecauseOnePassWouldRunInWaves) {
  BenchReport report = SampleReport();
  report.rows[4].resident_clusters = 28;  // the two-launch row: 32 clusters, 28 resident
  std::ostringstream out;
  PrintBenchTable(report, out);
  EXPECT_NE(out.str().find("two launches: 32 clusters, 28 resident at once (one pass would run in "
                           "waves)\n"),
            std::string::npos)
      << out.str();
}

TEST(Fp8EncodeTest, DeviceEncoderMatchesTheCodecBitForBit) {
  // Every float whose low 13 bits are 0 or 0x1000 (all exponents, the rounding-relevant
  // mantissa bits 20..12, both signs, subnormals, infinities and NaNs), plus the ties.
  int checked = 0;
  for (uint64_t hi = 0; hi < (uint64_t{1} << 19); ++hi) {
    for (uint32_t lo : {0u, 0x1000u, 0x0FFFu}) {
      const auto bits = static_cast<uint32_t>(hi << 13) | lo;
      const float x = bench::BitsToFloat(bits);
      ASSERT_EQ(bench::EncodeFp8E4m3(x), codec::Fp8E4m3Encode(x)) << std::hex << bits;
      ++checked;
    }
  }
  for (float x :
       {0.0f, -0.0f, 448.0f, 464.0f, 480.0f, -1e30f, 1.0f / 1024, 3.0f / 1024,
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_EQ(bench::EncodeFp8E4m3(x), codec::Fp8E4m3Encode(x)) << x;
  }
  EXPECT_EQ(checked, 3 << 19);
}

}  // namespace
}  // namespace readkv::cuda
