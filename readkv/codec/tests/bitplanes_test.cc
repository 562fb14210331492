#include "readkv/codec/bitplanes.h"

#include <gtest/gtest.h>

#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/errors.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

struct Codes {
  std::vector<std::vector<uint8_t>> key, value;  // [token][channel]
};

Codes RandomCodes(int tokens, int d, int w, uint64_t seed) {
  SplitMixRng rng(seed);
  Codes codes;
  for (int t = 0; t < tokens; ++t) {
    std::vector<uint8_t> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
    for (auto& x : k) x = static_cast<uint8_t>(rng.Next() & ((1u << w) - 1));
    for (auto& x : v) x = static_cast<uint8_t>(rng.Next() & ((1u << w) - 1));
    codes.key.push_back(std::move(k));
    codes.value.push_back(std::move(v));
  }
  return codes;
}

void ExpectAllPrefixes(const BitPlaneStore& store, const Codes& codes) {
  const int w = store.store_bits();
  ASSERT_EQ(store.tokens(), static_cast<int64_t>(codes.key.size()));
  for (int64_t t = 0; t < store.tokens(); ++t) {
    for (int c = 0; c < store.head_dim(); ++c) {
      const uint8_t k = codes.key[static_cast<size_t>(t)][static_cast<size_t>(c)];
      const uint8_t v = codes.value[static_cast<size_t>(t)][static_cast<size_t>(c)];
      for (int depth = 0; depth <= w; ++depth) {
        ASSERT_EQ(store.KeyCode(t, c, depth), k >> (w - depth))
            << "token " << t << " channel " << c << " depth " << depth;
        ASSERT_EQ(store.ValueCode(t, c, depth), v >> (w - depth))
            << "token " << t << " channel " << c << " depth " << depth;
      }
    }
  }
}

TEST(BitPlanesTest, EveryPrefixOfEveryCodeReadsBackOverSeveralBlocks) {
  for (auto [d, w] : {std::pair{64, 8}, std::pair{16, 3}, std::pair{8, 1}}) {
    const int tokens = 2 * kBlockTokens + 77;  // two full blocks and a partial one
    const Codes codes = RandomCodes(tokens, d, w, static_cast<uint64_t>(d * 10 + w));
    BitPlaneStore store(d, w);
    for (int t = 0; t < tokens; ++t)
      store.Append(codes.key[static_cast<size_t>(t)], codes.value[static_cast<size_t>(t)]);
    EXPECT_EQ(store.blocks(), 3);
    ExpectAllPrefixes(store, codes);
  }
}

TEST(BitPlanesTest, KeyAndValuePlaneBitsSitWhereDocumented) {
  // d = 16, W = 2. Token 70 is block 0, word 1, bit 6; token 300 is block 1, word 0, bit 44.
  BitPlaneStore store(16, 2);
  std::vector<uint8_t> zero(16, 0);
  for (int t = 0; t < 301; ++t) {
    std::vector<uint8_t> k = zero, v = zero;
    if (t == 70) {
      k[3] = 0b10;   // plane 0 (MSB) set, plane 1 clear
      v[11] = 0b01;  // plane 1 set: byte 1, bit 3
    }
    if (t == 300) k[15] = 0b01;
    store.Append(k, v);
  }
  EXPECT_EQ(store.KeyPlane(0, 3, 0)[1], uint64_t{1} << 6);
  EXPECT_EQ(store.KeyPlane(0, 3, 0)[0], 0u);
  EXPECT_EQ(store.KeyPlane(0, 3, 1)[1], 0u);
  EXPECT_EQ(store.KeyPlane(1, 15, 1)[0], uint64_t{1} << 44);
  EXPECT_EQ(store.KeyPlane(1, 15, 0)[0], 0u);
  EXPECT_EQ(store.ValuePlane(70, 1)[1], 1u << 3);
  EXPECT_EQ(store.ValuePlane(70, 0)[1], 0u);
  EXPECT_EQ(store.ValuePlane(70, 1)[0], 0u);

  // In the block bytes: key word ((channel * W + plane) * 4 + word), little-endian, then values.
  const std::vector<uint8_t> b0 = store.BlockBytes(0);
  ASSERT_EQ(b0.size(), static_cast<size_t>(16 * 2 * 32 + 256 * 2 * 2));
  const size_t key_byte = ((3 * 2 + 0) * 4 + 1) * 8 + 0;  // bit 6 lives in the word's byte 0
  for (size_t i = 0; i < 16 * 2 * 32; ++i) {
    EXPECT_EQ(b0[i], i == key_byte ? 1u << 6 : 0u) << "key byte " << i;
  }
  const size_t value_byte = 16 * 2 * 32 + (70 * 2 + 1) * 2 + 1;
  for (size_t i = 16 * 2 * 32; i < b0.size(); ++i) {
    EXPECT_EQ(b0[i], i == value_byte ? 1u << 3 : 0u) << "value byte " << i;
  }
}

TEST(BitPlanesTest, BlockBytesRoundTripReproducesTheStore) {
  const int d = 32, w = 5;
  const int tokens = 3 * kBlockTokens + 100;
  const Codes codes = RandomCodes(tokens, d, w, 9);
  BitPlaneStore store(d, w);
  for (int t = 0; t < tokens; ++t)
    store.Append(codes.key[static_cast<size_t>(t)], codes.value[static_cast<size_t>(t)]);

  BitPlaneStore restored(d, w);
  for (int64_t b = 0; b < store.blocks(); ++b) {
    const auto bytes = store.BlockBytes(b);
    const int in_block =
        static_cast<int>(std::min<int64_t>(kBlockTokens, tokens - b * kBlockTokens));
    EXPECT_EQ(static_cast<int64_t>(bytes.size()),
              in_block == kBlockTokens ? store.BlockByteSize() : d * w * 32 + in_block * w * d / 8);
    restored.AppendBlockBytes(bytes, in_block);
  }
  EXPECT_EQ(restored.tokens(), store.tokens());
  EXPECT_EQ(restored.PayloadBytes(), store.PayloadBytes());
  for (int64_t b = 0; b < store.blocks(); ++b)
    EXPECT_EQ(restored.BlockBytes(b), store.BlockBytes(b));
  ExpectAllPrefixes(restored, codes);

  // Appending after a restored partial block continues inside it.
  const Codes more = RandomCodes(200, d, w, 10);
  Codes all = codes;
  for (int t = 0; t < 200; ++t) {
    restored.Append(more.key[static_cast<size_t>(t)], more.value[static_cast<size_t>(t)]);
    all.key.push_back(more.key[static_cast<size_t>(t)]);
    all.value.push_back(more.value[static_cast<size_t>(t)]);
  }
  EXPECT_EQ(restored.blocks(), 5);
  ExpectAllPrefixes(restored, all);
}

TEST(BitPlanesTest, SizesFollowTheDocumentedFormulas) {
  BitPlaneStore store(8, 2);
  EXPECT_EQ(store.BlockByteSize(), 8 * 2 * 32 + 256 * 2 * 8 / 8);
  EXPECT_EQ(store.PayloadBytes(), 0);
  std::vector<uint8_t> codes(8, 3);
  for (int t = 0; t < 300; ++t) store.Append(codes, codes);
  // Two blocks of whole key planes plus 300 tokens of value planes.
  EXPECT_EQ(store.PayloadBytes(), 2 * 8 * 2 * 32 + 300 * 2 * 1);
}

TEST(BitPlanesTest, RejectsBadGeometryCodesAndBlocks) {
  const auto field_of = [](auto&& call) {
    try {
      call();
    } catch (const InvalidArgument& e) {
      return e.field();
    } catch (const CorruptObject& e) {
      return "corrupt:" + e.where();
    }
    return std::string("no error");
  };
  EXPECT_EQ(field_of([] { BitPlaneStore s(12, 4); }), "head_dim");
  EXPECT_EQ(field_of([] { BitPlaneStore s(4, 4); }), "head_dim");
  EXPECT_EQ(field_of([] { BitPlaneStore s(16, 0); }), "store_bits");
  EXPECT_EQ(field_of([] { BitPlaneStore s(16, 9); }), "store_bits");

  BitPlaneStore store(8, 3);
  std::vector<uint8_t> ok(8, 7), too_big(8, 0), short_row(7, 0);
  too_big[5] = 8;
  EXPECT_EQ(field_of([&] { store.Append(too_big, ok); }), "key_codes");
  EXPECT_EQ(field_of([&] { store.Append(ok, too_big); }), "value_codes");
  EXPECT_EQ(field_of([&] { store.Append(short_row, ok); }), "key_codes");
  EXPECT_EQ(store.tokens(), 0);
  store.Append(ok, ok);
  EXPECT_EQ(field_of([&] { store.KeyCode(1, 0, 1); }), "token");
  EXPECT_EQ(field_of([&] { store.ValueCode(0, 8, 1); }), "channel");
  EXPECT_EQ(field_of([&] { store.KeyCode(0, 0, 4); }), "depth");
  EXPECT_EQ(field_of([&] { store.BlockBytes(1); }), "block");

  const auto bytes = store.BlockBytes(0);
  EXPECT_EQ(field_of([&] { store.AppendBlockBytes(bytes, 1); }), "tokens");  // not at a boundary
  BitPlaneStore fresh(8, 3);
  EXPECT_EQ(field_of([&] { fresh.AppendBlockBytes(bytes, 0); }), "tokens_in_block");
  EXPECT_EQ(field_of([&] { fresh.AppendBlockBytes(bytes, 2); }), "corrupt:block");  // size
  auto stray = bytes;
  stray[0] |= 0x02;  // token 1 of a one-token block
  EXPECT_EQ(field_of([&] { fresh.AppendBlockBytes(stray, 1); }), "corrupt:block");
  EXPECT_EQ(fresh.tokens(), 0);
  fresh.AppendBlockBytes(bytes, 1);
  EXPECT_EQ(fresh.KeyCode(0, 4, 3), 7);
}

}  // namespace
}  // namespace readkv::codec
