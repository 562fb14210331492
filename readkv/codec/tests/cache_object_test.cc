#include "readkv/codec/cache_object.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvgate/stats/random.h"
#include "readkv/codec/bitplanes.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/tile_planes.h"

namespace readkv::codec {

using kvgate::stats::SplitMixRng;

namespace {

CacheIdentity BaseIdentity() {
  CacheIdentity id;
  id.model_id = "tiny-llama-test";
  id.weights_digest = "0123456789abcdef0123456789abcdef";
  id.layers = 2;
  id.heads_q = 4;
  id.heads_kv = 2;
  id.head_dim = 16;
  id.rope_type = "default";
  id.rope_theta = 500000.0;
  id.rope_scaling = "none";
  id.key_transform_seed = 0x5eed0001;
  id.value_transform_seed = 0x5eed0002;
  id.calibration_digest = "fedcba9876543210fedcba9876543210";
  id.codebook_id = "gaussian-lloyd-tree";
  id.codebook_version = 1;
  id.store_bits = 4;
  return id;
}

// A real object: one partial block of random codes per (layer, KV head), from BitPlaneStore
// or, for the tiles16 layout, TilePlaneStore.
template <typename Store>
std::vector<uint8_t> RandomBlock(const CacheIdentity& id, int tokens, SplitMixRng& rng) {
  Store store(id.head_dim, id.store_bits);
  std::vector<uint8_t> k(static_cast<size_t>(id.head_dim)), v(k.size());
  for (int t = 0; t < tokens; ++t) {
    for (auto& x : k) x = static_cast<uint8_t>(rng.Next() & ((1u << id.store_bits) - 1));
    for (auto& x : v) x = static_cast<uint8_t>(rng.Next() & ((1u << id.store_bits) - 1));
    store.Append(k, v);
  }
  return store.BlockBytes(0);
}

CacheObject MakeObject(const CacheIdentity& id, int tokens = 100, uint64_t seed = 1) {
  CacheObject object;
  object.identity = id;
  object.prefix_digest = "prefix-" + std::to_string(seed);
  object.first_token = 512;
  object.tokens = tokens;
  SplitMixRng rng(seed);
  for (int lh = 0; lh < id.layers * id.heads_kv; ++lh) {
    object.blocks.push_back(IsTileLayout(ParsePlaneLayout(id.layout))
                                ? RandomBlock<TilePlaneStore>(id, tokens, rng)
                                : RandomBlock<BitPlaneStore>(id, tokens, rng));
    // With outliers on, a section of one entry (token 3, channel 1, z = -12) per block.
    if (id.outlier_cap > 0) object.outliers.push_back({0, 0, 1, 0, 3, 1, 0x00, 0xca});
  }
  return object;
}

// The field SerializeCacheObject names when it refuses `o`, or "no error".
std::string SerializeRefusal(const CacheObject& o) {
  try {
    SerializeCacheObject(o);
  } catch (const InvalidArgument& e) {
    return e.field();
  }
  return std::string("no error");
}

// How ParseCacheObject refuses `bytes` under `expected`: "FIELD expected E found F" from its
// IdentityMismatch, or "accepted".
std::string ParseRefusal(const std::vector<uint8_t>& bytes, const CacheIdentity& expected) {
  try {
    ParseCacheObject(bytes, expected);
  } catch (const IdentityMismatch& e) {
    return e.field() + " expected " + e.expected() + " found " + e.found();
  }
  return std::string("accepted");
}

// Offsets of the fixed layout parts, read back from a serialised object.
struct Layout {
  size_t header_begin = 16;
  size_t header_end = 0;    // one past the JSON
  size_t blocks_begin = 0;  // the block_count field
};

Layout LayoutOf(const std::vector<uint8_t>& bytes) {
  Layout l;
  const uint32_t header_bytes =
      bytes[12] | bytes[13] << 8 | bytes[14] << 16 | static_cast<uint32_t>(bytes[15]) << 24;
  l.header_end = l.header_begin + header_bytes;
  l.blocks_begin = l.header_end + 8;
  return l;
}

// A whole object of another format version: the version field set and the checksum made the way
// that version makes it (version 1 summed the header alone; later ones the whole preamble).
std::vector<uint8_t> WithVersion(std::vector<uint8_t> bytes, uint32_t version) {
  for (int i = 0; i < 4; ++i) bytes[8 + i] = static_cast<uint8_t>(version >> (8 * i));
  const Layout l = LayoutOf(bytes);
  const uint64_t sum = version == 1
                           ? XXH3_64bits(bytes.data() + l.header_begin, l.header_end - l.header_begin)
                           : XXH3_64bits(bytes.data() + 8, l.header_end - 8);
  for (int i = 0; i < 8; ++i) bytes[l.header_end + i] = static_cast<uint8_t>(sum >> (8 * i));
  return bytes;
}

TEST(CacheObjectTest, AnObjectOfAnotherFormatVersionIsAMismatchNotDamage) {
  const CacheIdentity id = BaseIdentity();
  const auto bytes = SerializeCacheObject(MakeObject(id));
  // 3: the format before the lists' block budget (outlier_block_cap) joined the identity.
  for (const uint32_t version : {1u, 3u, kCacheFormatVersion + 1, 77u}) {
    EXPECT_EQ(ParseRefusal(WithVersion(bytes, version), id),
              "format_version expected " + std::to_string(kCacheFormatVersion) + " found " +
                  std::to_string(version));
  }
}

TEST(CacheObjectTest, RoundTripsThroughBytes) {
  const CacheIdentity id = BaseIdentity();
  const CacheObject object = MakeObject(id);
  const auto bytes = SerializeCacheObject(object);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "RKVCACHE");
  const CacheObject back = ParseCacheObject(bytes, id);
  EXPECT_EQ(back.identity, object.identity);
  EXPECT_EQ(back.prefix_digest, object.prefix_digest);
  EXPECT_EQ(back.first_token, object.first_token);
  EXPECT_EQ(back.tokens, object.tokens);
  EXPECT_EQ(back.blocks, object.blocks);
  EXPECT_EQ(SerializeCacheObject(back), bytes);

  // A restored block feeds a store again.
  BitPlaneStore store(id.head_dim, id.store_bits);
  store.AppendBlockBytes(back.blocks[3], back.tokens);
  EXPECT_EQ(store.BlockBytes(0), object.blocks[3]);
}

TEST(CacheObjectTest, IdentityJsonIsCanonicalAndRoundTrips) {
  CacheIdentity id = BaseIdentity();
  id.key_transform_seed = ~uint64_t{0};
  id.rope_theta = 0.1;
  const std::string text = id.ToJson();
  EXPECT_EQ(text.rfind("{\"model_id\":", 0), 0u) << text;
  EXPECT_LT(text.find("\"store_bits\""), text.find("\"format_version\""));
  EXPECT_EQ(CacheIdentity::FromJson(text), id);
  EXPECT_EQ(CacheIdentity::FromJson(text).ToJson(), text);
  EXPECT_EQ(id.Digest(), ContentDigest(text));
  CacheIdentity other = id;
  other.rope_scaling = "yarn:4";
  EXPECT_NE(other.Digest(), id.Digest());

  for (const std::string bad : {"", "{", "[]", "{\"model_id\":1}"}) {
    try {
      CacheIdentity::FromJson(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const CorruptObject& e) {
      EXPECT_EQ(e.where(), "header");
    }
  }
  auto j = nlohmann::json::parse(text);
  j["extra"] = 1;
  EXPECT_THROW(CacheIdentity::FromJson(j.dump()), CorruptObject);
  j = nlohmann::json::parse(text);
  j.erase("codebook_id");
  EXPECT_THROW(CacheIdentity::FromJson(j.dump()), CorruptObject);
  j = nlohmann::json::parse(text);
  j["layers"] = -1.5;
  EXPECT_THROW(CacheIdentity::FromJson(j.dump()), CorruptObject);
}

struct FieldChange {
  const char* name;
  std::function<void(CacheIdentity&)> change;
};

std::vector<FieldChange> AllFieldChanges() {
  return {
      {"model_id", [](CacheIdentity& i) { i.model_id += "-v2"; }},
      {"weights_digest", [](CacheIdentity& i) { i.weights_digest[0] = 'f'; }},
      {"layers", [](CacheIdentity& i) { i.layers = 3; }},
      {"heads_q", [](CacheIdentity& i) { i.heads_q = 8; }},
      {"heads_kv", [](CacheIdentity& i) { i.heads_kv = 1; }},
      {"head_dim", [](CacheIdentity& i) { i.head_dim = 32; }},
      {"rope_type", [](CacheIdentity& i) { i.rope_type = "llama3"; }},
      {"rope_theta", [](CacheIdentity& i) { i.rope_theta = std::nextafter(i.rope_theta, 1e9); }},
      {"rope_scaling", [](CacheIdentity& i) { i.rope_scaling = "linear:2"; }},
      {"key_transform_seed", [](CacheIdentity& i) { i.key_transform_seed ^= 1; }},
      {"value_transform_seed", [](CacheIdentity& i) { i.value_transform_seed ^= 1ULL << 63; }},
      {"calibration_digest", [](CacheIdentity& i) { i.calibration_digest = "00"; }},
      {"codebook_id", [](CacheIdentity& i) { i.codebook_id = "uniform"; }},
      {"codebook_version", [](CacheIdentity& i) { i.codebook_version = 2; }},
      {"store_bits", [](CacheIdentity& i) { i.store_bits = 8; }},
      {"outlier_cap", [](CacheIdentity& i) { i.outlier_cap = 2; }},
      {"outlier_threshold", [](CacheIdentity& i) { i.outlier_threshold = 4.5; }},
      {"outlier_block_cap", [](CacheIdentity& i) { i.outlier_block_cap = 160; }},
      {"layout", [](CacheIdentity& i) { i.layout = "tiles16"; }},
      {"format_version", [](CacheIdentity& i) { i.format_version = kCacheFormatVersion + 1; }},
  };
}

TEST(CacheObjectTest, EachChangedIdentityFieldIsRefusedByName) {
  const CacheIdentity expected = BaseIdentity();
  const auto changes = AllFieldChanges();
  ASSERT_EQ(changes.size(), 20u);  // every field of CacheIdentity
  for (const auto& change : changes) {
    CacheIdentity found = expected;
    change.change(found);
    // RequireSame directly.
    try {
      expected.RequireSame(found);
      ADD_FAILURE() << change.name << " accepted";
    } catch (const IdentityMismatch& e) {
      EXPECT_EQ(e.field(), change.name);
    }
    // And through a stored object written under the changed identity.
    std::vector<uint8_t> bytes;
    if (std::string(change.name) == "format_version") {
      // The writer only writes its own version: make a whole object of the next one.
      bytes = WithVersion(SerializeCacheObject(MakeObject(expected)), kCacheFormatVersion + 1);
    } else {
      bytes = SerializeCacheObject(MakeObject(found));
    }
    try {
      ParseCacheObject(bytes, expected);
      ADD_FAILURE() << change.name << " accepted";
    } catch (const IdentityMismatch& e) {
      EXPECT_EQ(e.field(), change.name);
      if (std::string(change.name) == "codebook_version") {
        EXPECT_EQ(e.expected(), "1");
        EXPECT_EQ(e.found(), "2");
      }
    }
  }
  EXPECT_NO_THROW(expected.RequireSame(BaseIdentity()));
}

TEST(CacheObjectTest, FlippedHeaderByteIsCorruptHeader) {
  const CacheIdentity id = BaseIdentity();
  const auto bytes = SerializeCacheObject(MakeObject(id));
  const Layout layout = LayoutOf(bytes);
  // The header_bytes field, the JSON and its checksum.
  for (size_t i = 12; i < layout.blocks_begin; ++i) {
    for (uint8_t mask : {0x01, 0x80}) {
      auto damaged = bytes;
      damaged[i] ^= mask;
      try {
        ParseCacheObject(damaged, id);
        ADD_FAILURE() << "accepted flip at " << i;
      } catch (const CorruptObject& e) {
        EXPECT_EQ(e.where(), "header") << "flip at " << i;
      }
    }
  }
}

TEST(CacheObjectTest, FlippedMagicVersionOrCountIsNamed) {
  const CacheIdentity id = BaseIdentity();
  const auto bytes = SerializeCacheObject(MakeObject(id));
  const Layout layout = LayoutOf(bytes);
  for (size_t i = 0; i < 8; ++i) {
    auto damaged = bytes;
    damaged[i] ^= 0x20;
    try {
      ParseCacheObject(damaged, id);
      ADD_FAILURE();
    } catch (const CorruptObject& e) {
      EXPECT_EQ(e.where(), "magic");
    }
  }
  // Hostile-test finding (2026-12-02): a flipped version byte read as another format version
  // (IdentityMismatch) instead of damage. The version is under the preamble's checksum.
  for (size_t i = 8; i < 12; ++i) {
    for (uint8_t mask : {0x01, 0x02, 0x04, 0x80}) {
      auto damaged = bytes;
      damaged[i] ^= mask;
      try {
        ParseCacheObject(damaged, id);
        ADD_FAILURE();
      } catch (const CorruptObject& e) {
        EXPECT_EQ(e.where(), "header") << "flip at " << i;
      }
    }
  }
  auto damaged = bytes;
  damaged[layout.blocks_begin] ^= 0x01;
  try {
    ParseCacheObject(damaged, id);
    ADD_FAILURE();
  } catch (const CorruptObject& e) {
    EXPECT_EQ(e.where(), "block_count");
  }
}

TEST(CacheObjectTest, FlippedBlockByteNamesThatBlock) {
  const CacheIdentity id = BaseIdentity();
  const CacheObject object = MakeObject(id);
  const auto bytes = SerializeCacheObject(object);
  size_t pos = LayoutOf(bytes).blocks_begin + 4;
  for (size_t b = 0; b < object.blocks.size(); ++b) {
    const size_t payload = object.blocks[b].size();
    // Size field, checksum field, first, middle and last payload byte.
    for (size_t offset : {size_t{0}, size_t{9}, size_t{16}, 16 + payload / 2, 16 + payload - 1}) {
      auto damaged = bytes;
      damaged[pos + offset] ^= 0x10;
      try {
        ParseCacheObject(damaged, id);
        ADD_FAILURE() << "block " << b << " offset " << offset;
      } catch (const CorruptObject& e) {
        EXPECT_EQ(e.where(), "block " + std::to_string(b)) << "offset " << offset;
      }
    }
    pos += 16 + payload;
  }
  EXPECT_EQ(pos + 4, bytes.size());  // then the outlier count, 0 here
}

TEST(CacheObjectTest, EveryTruncationIsCorruptAndNeverReadsOutOfBounds) {
  const CacheIdentity id = BaseIdentity();
  const auto bytes = SerializeCacheObject(MakeObject(id, 40));
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A copy of exactly n bytes, so a sanitizer build would see any read past the end.
    const std::vector<uint8_t> prefix(bytes.begin(),
                                      bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(ParseCacheObject(prefix, id), CorruptObject) << "length " << n;
  }
  auto longer = bytes;
  longer.push_back(0);
  try {
    ParseCacheObject(longer, id);
    ADD_FAILURE();
  } catch (const CorruptObject& e) {
    EXPECT_EQ(e.where(), "trailer");
  }
}

TEST(CacheObjectTest, BlockSizeDisagreeingWithHeaderIsCorrupt) {
  // A well-formed object (all checksums valid) whose header claims 99 tokens for 100-token blocks.
  const CacheIdentity id = BaseIdentity();
  auto bytes = SerializeCacheObject(MakeObject(id, 100));
  const Layout layout = LayoutOf(bytes);
  auto header = nlohmann::ordered_json::parse(
      bytes.begin() + 16, bytes.begin() + static_cast<std::ptrdiff_t>(layout.header_end));
  header["tokens"] = 99;
  const std::string text = header.dump();
  std::vector<uint8_t> forged(bytes.begin(), bytes.begin() + 12);
  for (int i = 0; i < 4; ++i) forged.push_back(static_cast<uint8_t>(text.size() >> (8 * i)));
  forged.insert(forged.end(), text.begin(), text.end());
  // The preamble's checksum, from the version field to the end of the header.
  const uint64_t sum = XXH3_64bits(forged.data() + 8, forged.size() - 8);
  for (int i = 0; i < 8; ++i) forged.push_back(static_cast<uint8_t>(sum >> (8 * i)));
  forged.insert(forged.end(), bytes.begin() + static_cast<std::ptrdiff_t>(layout.blocks_begin),
                bytes.end());
  try {
    ParseCacheObject(forged, id);
    ADD_FAILURE();
  } catch (const CorruptObject& e) {
    EXPECT_EQ(e.where(), "block 0");
  }
}

TEST(CacheObjectTest, SerializeRefusesInconsistentObjects) {
  const CacheIdentity id = BaseIdentity();
  CacheObject o = MakeObject(id);
  EXPECT_EQ(SerializeRefusal(o), "no error");
  o.blocks.pop_back();
  EXPECT_EQ(SerializeRefusal(o), "blocks");
  o = MakeObject(id);
  o.blocks[1].push_back(0);
  EXPECT_EQ(SerializeRefusal(o), "blocks");
  o = MakeObject(id);
  o.tokens = 0;
  EXPECT_EQ(SerializeRefusal(o), "tokens");
  o = MakeObject(id);
  o.identity.format_version = kCacheFormatVersion + 1;
  EXPECT_EQ(SerializeRefusal(o), "format_version");
  o = MakeObject(id);
  o.identity.layout = "tiles";
  EXPECT_EQ(SerializeRefusal(o), "layout");
  CacheIdentity tiles = id;
  tiles.layout = "tiles16";
  o = MakeObject(id);  // planes-sized blocks under a tile identity
  o.identity = tiles;
  EXPECT_EQ(SerializeRefusal(o), "blocks");
}

// Format 3 made the layout part of identity: a tile object and a planes object of the same model
// never read as each other, and the refusal names the layout and both values.
TEST(CacheObjectTest, AnObjectOfTheOtherLayoutIsRefusedNamingTheLayouts) {
  const CacheIdentity planes = BaseIdentity();
  CacheIdentity tiles = planes;
  tiles.layout = "tiles16";
  const CacheObject tile_object = MakeObject(tiles);
  const auto bytes = SerializeCacheObject(tile_object);
  EXPECT_EQ(ParseCacheObject(bytes, tiles).blocks, tile_object.blocks);
  EXPECT_EQ(ParseRefusal(bytes, planes), "layout expected planes found tiles16");
  EXPECT_EQ(ParseRefusal(SerializeCacheObject(MakeObject(planes)), tiles),
            "layout expected tiles16 found planes");
  // Objects written before the layout field (format 2) are another format, not damage.
  EXPECT_EQ(ParseRefusal(WithVersion(bytes, 2), tiles),
            "format_version expected " + std::to_string(kCacheFormatVersion) + " found 2");
  EXPECT_NE(planes.Digest(), tiles.Digest());  // prefix-cache file names differ too

  // Byte keys (W = 8) are other bytes in the same sizes: the layout field tells them apart.
  CacheIdentity tiles8 = tiles;
  tiles8.store_bits = 8;
  CacheIdentity byte_keys = tiles8;
  byte_keys.layout = "tiles16-kbytes";
  const CacheObject byte_object = MakeObject(byte_keys);
  const auto byte_bytes = SerializeCacheObject(byte_object);
  EXPECT_EQ(ParseCacheObject(byte_bytes, byte_keys).blocks, byte_object.blocks);
  EXPECT_EQ(ParseRefusal(byte_bytes, tiles8), "layout expected tiles16 found tiles16-kbytes");
  CacheIdentity byte_keys4 = byte_keys;
  byte_keys4.store_bits = 4;
  CacheObject o = MakeObject(tiles);
  o.identity = byte_keys4;
  EXPECT_EQ(SerializeRefusal(o), "layout");  // byte keys exist for W = 8 only
}

CacheIdentity OutlierIdentity() {
  CacheIdentity id = BaseIdentity();
  id.outlier_cap = 2;
  id.outlier_threshold = 3.5;
  id.outlier_block_cap = 160;
  return id;
}

TEST(CacheObjectTest, OutlierSectionsRoundTrip) {
  const CacheIdentity id = OutlierIdentity();
  const CacheObject object = MakeObject(id);
  const CacheObject parsed = ParseCacheObject(SerializeCacheObject(object), id);
  EXPECT_EQ(parsed.identity, id);
  EXPECT_EQ(parsed.blocks, object.blocks);
  ASSERT_EQ(parsed.outliers.size(), static_cast<size_t>(id.layers * id.heads_kv));
  EXPECT_EQ(parsed.outliers, object.outliers);
}

TEST(CacheObjectTest, AnObjectWithoutOutliersIsRefusedByAReaderThatKeepsThem) {
  const CacheIdentity with = OutlierIdentity();
  const CacheIdentity without = BaseIdentity();
  EXPECT_EQ(ParseRefusal(SerializeCacheObject(MakeObject(without)), with),
            "outlier_cap expected 2 found 0");
  EXPECT_EQ(ParseRefusal(SerializeCacheObject(MakeObject(with)), without),
            "outlier_cap expected 0 found 2");
  CacheIdentity other_threshold = with;
  other_threshold.outlier_threshold = 4.0;
  EXPECT_EQ(ParseRefusal(SerializeCacheObject(MakeObject(other_threshold)), with),
            "outlier_threshold expected 3.5 found 4");
  CacheIdentity other_budget = with;
  other_budget.outlier_block_cap = 8;
  EXPECT_EQ(ParseRefusal(SerializeCacheObject(MakeObject(other_budget)), with),
            "outlier_block_cap expected 160 found 8");
}

TEST(CacheObjectTest, FlippedOutlierByteNamesThatSection) {
  const CacheIdentity id = OutlierIdentity();
  const CacheObject object = MakeObject(id);
  const auto bytes = SerializeCacheObject(object);
  // The sections are the object's tail: u32 count, then (u64 size | u64 sum | 8 bytes) each.
  const size_t section = 16 + 8;
  const size_t begin = bytes.size() - object.outliers.size() * section;
  for (size_t i = 0; i < object.outliers.size(); ++i) {
    for (size_t offset : {size_t{0}, size_t{8}, size_t{16}, size_t{23}}) {
      auto damaged = bytes;
      damaged[begin + i * section + offset] ^= 0x04;
      try {
        ParseCacheObject(damaged, id);
        ADD_FAILURE() << "section " << i << " offset " << offset;
      } catch (const CorruptObject& e) {
        EXPECT_EQ(e.where(), "outliers " + std::to_string(i)) << "offset " << offset;
      }
    }
  }
  auto count = bytes;
  count[begin - 4] ^= 1;
  try {
    ParseCacheObject(count, id);
    ADD_FAILURE();
  } catch (const CorruptObject& e) {
    EXPECT_EQ(e.where(), "outlier_count");
  }
}

TEST(CacheObjectTest, SerializeRefusesMissingOrInconsistentOutlierSections) {
  const CacheIdentity id = OutlierIdentity();
  CacheObject o = MakeObject(id);
  o.outliers.pop_back();
  EXPECT_EQ(SerializeRefusal(o), "outliers");
  o = MakeObject(id);
  o.outliers[0].push_back(0);  // 9 bytes where its counts announce 8
  EXPECT_EQ(SerializeRefusal(o), "outliers");
  o = MakeObject(BaseIdentity());
  o.outliers.push_back({0, 0, 0, 0});  // a section without outliers on
  EXPECT_EQ(SerializeRefusal(o), "outliers");
}

TEST(CacheObjectTest, ContentDigestIsXxh3_128Hex) {
  // Reference value of XXH3-128 over empty input (xxHash test vectors).
  EXPECT_EQ(ContentDigest(std::string()), "99aa06d3014798d86001c324468d497f");
  const std::string text = "readkv";
  EXPECT_EQ(ContentDigest(text), ContentDigest(std::span<const uint8_t>(
                                     reinterpret_cast<const uint8_t*>(text.data()), text.size())));
  EXPECT_NE(ContentDigest(text), ContentDigest(std::string("readkV")));
}

}  // namespace
}  // namespace readkv::codec
