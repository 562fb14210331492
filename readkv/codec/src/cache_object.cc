#include "readkv/codec/cache_object.h"

#include <xxhash.h>

#include <charconv>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "readkv/codec/bitplanes.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/key_bytes.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/tile_planes.h"

namespace readkv::codec {
namespace {

using OrderedJson = nlohmann::ordered_json;
using Json = nlohmann::json;

constexpr char kMagic[8] = {'R', 'K', 'V', 'C', 'A', 'C', 'H', 'E'};

std::string DoubleText(double v) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

// The identity fields in declaration order; RequireSame reports the first one that differs.
// Each entry: name, text of the value (for messages), and a writer into canonical JSON.
template <typename Visit>
void ForEachField(const CacheIdentity& id, Visit&& visit) {
  visit("model_id", id.model_id, OrderedJson(id.model_id));
  visit("weights_digest", id.weights_digest, OrderedJson(id.weights_digest));
  visit("layers", std::to_string(id.layers), OrderedJson(id.layers));
  visit("heads_q", std::to_string(id.heads_q), OrderedJson(id.heads_q));
  visit("heads_kv", std::to_string(id.heads_kv), OrderedJson(id.heads_kv));
  visit("head_dim", std::to_string(id.head_dim), OrderedJson(id.head_dim));
  visit("rope_type", id.rope_type, OrderedJson(id.rope_type));
  visit("rope_theta", DoubleText(id.rope_theta), OrderedJson(id.rope_theta));
  visit("rope_scaling", id.rope_scaling, OrderedJson(id.rope_scaling));
  visit("key_transform_seed", std::to_string(id.key_transform_seed),
        OrderedJson(id.key_transform_seed));
  visit("value_transform_seed", std::to_string(id.value_transform_seed),
        OrderedJson(id.value_transform_seed));
  visit("calibration_digest", id.calibration_digest, OrderedJson(id.calibration_digest));
  visit("codebook_id", id.codebook_id, OrderedJson(id.codebook_id));
  visit("codebook_version", std::to_string(id.codebook_version), OrderedJson(id.codebook_version));
  visit("store_bits", std::to_string(id.store_bits), OrderedJson(id.store_bits));
  visit("outlier_cap", std::to_string(id.outlier_cap), OrderedJson(id.outlier_cap));
  visit("outlier_threshold", DoubleText(id.outlier_threshold), OrderedJson(id.outlier_threshold));
  visit("outlier_block_cap", std::to_string(id.outlier_block_cap),
        OrderedJson(id.outlier_block_cap));
  visit("layout", id.layout, OrderedJson(id.layout));
  visit("format_version", std::to_string(id.format_version), OrderedJson(id.format_version));
}

OrderedJson IdentityObject(const CacheIdentity& id) {
  OrderedJson out = OrderedJson::object();
  ForEachField(id, [&out](const char* name, const std::string&, OrderedJson value) {
    out[name] = std::move(value);
  });
  return out;
}

std::string Dump(const OrderedJson& j) {
  try {
    return j.dump();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument("identity", std::string("cannot be written as JSON: ") + e.what());
  }
}

[[noreturn]] void BadHeader(const std::string& what) { throw CorruptObject("header", what); }

const Json& Field(const Json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) BadHeader(std::string("missing field ") + name);
  return *it;
}

std::string GetString(const Json& j, const char* name) {
  const Json& v = Field(j, name);
  if (!v.is_string()) BadHeader(std::string(name) + " is not a string");
  return v.get<std::string>();
}

template <typename Int>
Int GetInteger(const Json& j, const char* name) {
  const Json& v = Field(j, name);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<Int>::max())) return static_cast<Int>(u);
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if constexpr (std::numeric_limits<Int>::is_signed) {
      if (s >= std::numeric_limits<Int>::min() && s <= std::numeric_limits<Int>::max()) {
        return static_cast<Int>(s);
      }
    }
  }
  BadHeader(std::string(name) + " is not an integer in range");
}

double GetDouble(const Json& j, const char* name) {
  const Json& v = Field(j, name);
  if (!v.is_number()) BadHeader(std::string(name) + " is not a number");
  return v.get<double>();
}

// Reads identity fields from a parsed object; any key outside the identity and `extra_keys` is
// refused so a misspelt field cannot be silently ignored.
CacheIdentity IdentityFromObject(const Json& j, std::initializer_list<std::string_view> extra) {
  if (!j.is_object()) BadHeader("not a JSON object");
  CacheIdentity id;
  id.model_id = GetString(j, "model_id");
  id.weights_digest = GetString(j, "weights_digest");
  id.layers = GetInteger<int>(j, "layers");
  id.heads_q = GetInteger<int>(j, "heads_q");
  id.heads_kv = GetInteger<int>(j, "heads_kv");
  id.head_dim = GetInteger<int>(j, "head_dim");
  id.rope_type = GetString(j, "rope_type");
  id.rope_theta = GetDouble(j, "rope_theta");
  id.rope_scaling = GetString(j, "rope_scaling");
  id.key_transform_seed = GetInteger<uint64_t>(j, "key_transform_seed");
  id.value_transform_seed = GetInteger<uint64_t>(j, "value_transform_seed");
  id.calibration_digest = GetString(j, "calibration_digest");
  id.codebook_id = GetString(j, "codebook_id");
  id.codebook_version = GetInteger<int>(j, "codebook_version");
  id.store_bits = GetInteger<int>(j, "store_bits");
  id.outlier_cap = GetInteger<int>(j, "outlier_cap");
  id.outlier_threshold = GetDouble(j, "outlier_threshold");
  id.outlier_block_cap = GetInteger<int>(j, "outlier_block_cap");
  id.layout = GetString(j, "layout");
  id.format_version = GetInteger<uint32_t>(j, "format_version");
  size_t known = 20;
  for (std::string_view key : extra) known += j.contains(key) ? 1 : 0;
  if (j.size() != known) BadHeader("unknown fields present");
  return id;
}

Json ParseJson(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) BadHeader("not valid JSON");
  return j;
}

// The size an outlier section's two counts announce, or -1 when it is too short to hold them.
int64_t AnnouncedOutlierBytes(std::span<const uint8_t> section) {
  if (section.size() < size_t{kOutlierBlockHeaderBytes}) return -1;
  const int64_t entries = (section[0] | (section[1] << 8)) + (section[2] | (section[3] << 8));
  return kOutlierBlockHeaderBytes + entries * kOutlierEntryBytes;
}

size_t ExpectedOutlierSections(const CacheIdentity& id) {
  return id.outlier_cap > 0 ? static_cast<size_t>(id.layers) * id.heads_kv : 0;
}

int64_t ExpectedBlockBytes(const CacheIdentity& id, int tokens) {
  const PlaneLayout layout = ParsePlaneLayout(id.layout);
  if (layout == PlaneLayout::kTilesByteKeys && id.store_bits != kKeyByteStoreBits) {
    throw InvalidArgument("layout", "tiles16-kbytes (byte keys) needs store_bits 8, got " +
                                        std::to_string(id.store_bits));
  }
  if (IsTileLayout(layout)) {
    return TilePlaneStore::BlockByteSize(id.head_dim, id.store_bits, tokens);
  }
  // BitPlaneStore::BlockBytes: every key plane of the block, value planes of present tokens.
  return static_cast<int64_t>(id.head_dim) * id.store_bits * kKeyPlaneBytes +
         static_cast<int64_t>(tokens) * id.store_bits * (id.head_dim / 8);
}

// Appends raw bytes with resize + memcpy; range insert into a freshly reserved vector trips a
// GCC 12 -Wstringop-overflow false positive under -O2.
void PutBytes(std::vector<uint8_t>& out, const void* data, size_t n) {
  if (n == 0) return;
  const size_t old = out.size();
  out.resize(old + n);
  std::memcpy(out.data() + old, data, n);
}

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Bounds-checked little-endian reader: every read names the part it belongs to, so a truncated
// object fails with CorruptObject(part) and never reads past the end.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t remaining() const { return bytes_.size() - pos_; }
  std::span<const uint8_t> Take(size_t n, const std::string& part) {
    if (n > remaining()) {
      throw CorruptObject(part, "truncated: needs " + std::to_string(n) + " bytes, " +
                                    std::to_string(remaining()) + " left");
    }
    const auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  uint32_t U32(const std::string& part) {
    const auto b = Take(4, part);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[static_cast<size_t>(i)]) << (8 * i);
    return v;
  }
  uint64_t U64(const std::string& part) {
    const auto b = Take(8, part);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[static_cast<size_t>(i)]) << (8 * i);
    return v;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

// One checksummed section: u64 size | u64 XXH3-64 | bytes.
void PutSection(std::vector<uint8_t>& out, const std::vector<uint8_t>& bytes) {
  PutU64(out, bytes.size());
  PutU64(out, XXH3_64bits(bytes.data(), bytes.size()));
  PutBytes(out, bytes.data(), bytes.size());
}

std::span<const uint8_t> TakeSection(ByteReader& in, const std::string& part) {
  const uint64_t size = in.U64(part);
  const uint64_t sum = in.U64(part);
  if (size > in.remaining()) throw CorruptObject(part, "truncated payload");
  const auto bytes = in.Take(static_cast<size_t>(size), part);
  if (XXH3_64bits(bytes.data(), bytes.size()) != sum) {
    throw CorruptObject(part, "checksum mismatch");
  }
  return bytes;
}

}  // namespace

std::string CacheIdentity::ToJson() const { return Dump(IdentityObject(*this)); }

CacheIdentity CacheIdentity::FromJson(const std::string& text) {
  return IdentityFromObject(ParseJson(text), {});
}

std::string CacheIdentity::Digest() const { return ContentDigest(ToJson()); }

void CacheIdentity::RequireSame(const CacheIdentity& found) const {
  // Walk both identities in the same order and stop at the first differing value text.
  // Text comparison is exact here: integers and strings print uniquely and doubles print
  // as the shortest text that round-trips, so different values never share a text.
  struct Entry {
    const char* name;
    std::string text;
  };
  std::vector<Entry> mine;
  mine.reserve(20);
  ForEachField(*this, [&mine](const char* name, const std::string& text, const OrderedJson&) {
    mine.push_back({name, text});
  });
  size_t i = 0;
  ForEachField(found, [&mine, &i](const char* name, const std::string& text, const OrderedJson&) {
    const Entry& expected = mine[i++];
    if (expected.text != text) throw IdentityMismatch(name, expected.text, text);
  });
}

std::vector<uint8_t> SerializeCacheObject(const CacheObject& object) {
  const CacheIdentity& id = object.identity;
  if (id.format_version != kCacheFormatVersion) {
    throw InvalidArgument("format_version",
                          "this codec writes only version " + std::to_string(kCacheFormatVersion));
  }
  if (object.tokens < 1 || object.tokens > kBlockTokens) {
    throw InvalidArgument("tokens", "must be in [1, 256], got " + std::to_string(object.tokens));
  }
  if (object.first_token < 0) {
    throw InvalidArgument("first_token", "must be >= 0, got " + std::to_string(object.first_token));
  }
  const int64_t expected_blocks = static_cast<int64_t>(id.layers) * id.heads_kv;
  if (static_cast<int64_t>(object.blocks.size()) != expected_blocks) {
    throw InvalidArgument("blocks",
                          "expected layers * heads_kv = " + std::to_string(expected_blocks) +
                              " blocks, got " + std::to_string(object.blocks.size()));
  }
  const int64_t block_bytes = ExpectedBlockBytes(id, object.tokens);
  for (size_t i = 0; i < object.blocks.size(); ++i) {
    if (static_cast<int64_t>(object.blocks[i].size()) != block_bytes) {
      throw InvalidArgument("blocks", "block " + std::to_string(i) + " has " +
                                          std::to_string(object.blocks[i].size()) +
                                          " bytes, expected " + std::to_string(block_bytes));
    }
  }

  if (object.outliers.size() != ExpectedOutlierSections(id)) {
    throw InvalidArgument("outliers", "expected " + std::to_string(ExpectedOutlierSections(id)) +
                                          " outlier sections (outlier_cap " +
                                          std::to_string(id.outlier_cap) + "), got " +
                                          std::to_string(object.outliers.size()));
  }
  for (size_t i = 0; i < object.outliers.size(); ++i) {
    const auto& section = object.outliers[i];
    if (AnnouncedOutlierBytes(section) != static_cast<int64_t>(section.size())) {
      throw InvalidArgument("outliers", "section " + std::to_string(i) +
                                            " does not match its own counts");
    }
  }

  OrderedJson header = IdentityObject(id);
  header["prefix_digest"] = object.prefix_digest;
  header["first_token"] = object.first_token;
  header["tokens"] = object.tokens;
  const std::string header_text = Dump(header);

  std::vector<uint8_t> out;
  out.reserve(40 + header_text.size() +
              object.blocks.size() * (16 + static_cast<size_t>(block_bytes)));
  PutBytes(out, kMagic, sizeof(kMagic));
  PutU32(out, id.format_version);
  PutU32(out, static_cast<uint32_t>(header_text.size()));
  PutBytes(out, header_text.data(), header_text.size());
  // The preamble's checksum: from the version field to the end of the header.
  PutU64(out, XXH3_64bits(out.data() + sizeof(kMagic), out.size() - sizeof(kMagic)));
  PutU32(out, static_cast<uint32_t>(object.blocks.size()));
  for (const auto& block : object.blocks) PutSection(out, block);
  PutU32(out, static_cast<uint32_t>(object.outliers.size()));
  for (const auto& section : object.outliers) PutSection(out, section);
  return out;
}

CacheObject ParseCacheObject(std::span<const uint8_t> bytes, const CacheIdentity& expected) {
  if (expected.format_version != kCacheFormatVersion) {
    throw InvalidArgument("format_version",
                          "this codec reads only version " + std::to_string(kCacheFormatVersion));
  }
  ByteReader in(bytes);
  const auto magic = in.Take(sizeof(kMagic), "magic");
  if (std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0) {
    throw CorruptObject("magic", "not a ReadKV cache object");
  }
  const uint32_t version = in.U32("format_version");
  const uint32_t header_bytes = in.U32("header");
  const auto header_span = in.Take(header_bytes, "header");
  const uint64_t header_sum = in.U64("header");
  // From the version field to the end of the header, as every version since 2 sums it.
  const uint64_t preamble_sum =
      XXH3_64bits(bytes.data() + sizeof(kMagic), 8 + static_cast<size_t>(header_bytes));
  if (version == 1 && XXH3_64bits(header_span.data(), header_span.size()) == header_sum) {
    // A whole object of the first format (its checksum covered the header alone).
    throw IdentityMismatch("format_version", std::to_string(expected.format_version), "1");
  }
  if (preamble_sum != header_sum) throw CorruptObject("header", "checksum mismatch");
  if (version != expected.format_version) {
    throw IdentityMismatch("format_version", std::to_string(expected.format_version),
                           std::to_string(version));
  }
  const std::string_view header_text(reinterpret_cast<const char*>(header_span.data()),
                                     header_span.size());
  const Json header = ParseJson(header_text);
  CacheObject object;
  object.identity = IdentityFromObject(header, {"prefix_digest", "first_token", "tokens"});
  expected.RequireSame(object.identity);
  object.prefix_digest = GetString(header, "prefix_digest");
  object.first_token = GetInteger<int64_t>(header, "first_token");
  object.tokens = GetInteger<int>(header, "tokens");
  if (object.first_token < 0) BadHeader("first_token is negative");
  if (object.tokens < 1 || object.tokens > kBlockTokens) BadHeader("tokens outside [1, 256]");

  const uint32_t block_count = in.U32("block_count");
  const int64_t expected_blocks = static_cast<int64_t>(expected.layers) * expected.heads_kv;
  if (static_cast<int64_t>(block_count) != expected_blocks) {
    throw CorruptObject("block_count", "expected " + std::to_string(expected_blocks) + ", found " +
                                           std::to_string(block_count));
  }
  std::vector<std::span<const uint8_t>> payloads;
  payloads.reserve(block_count);
  for (uint32_t i = 0; i < block_count; ++i) {
    payloads.push_back(TakeSection(in, "block " + std::to_string(i)));
  }
  const uint32_t outlier_count = in.U32("outlier_count");
  if (outlier_count != ExpectedOutlierSections(expected)) {
    throw CorruptObject("outlier_count",
                        "expected " + std::to_string(ExpectedOutlierSections(expected)) +
                            ", found " + std::to_string(outlier_count));
  }
  for (uint32_t i = 0; i < outlier_count; ++i) {
    const std::string part = "outliers " + std::to_string(i);
    const auto section = TakeSection(in, part);
    if (AnnouncedOutlierBytes(section) != static_cast<int64_t>(section.size())) {
      throw CorruptObject(part, "size does not match its counts");
    }
    object.outliers.emplace_back(section.begin(), section.end());
  }
  if (in.remaining() != 0) {
    throw CorruptObject("trailer", std::to_string(in.remaining()) + " bytes after the last block");
  }
  const int64_t block_bytes = ExpectedBlockBytes(expected, object.tokens);
  object.blocks.reserve(block_count);
  for (uint32_t i = 0; i < block_count; ++i) {
    if (static_cast<int64_t>(payloads[i].size()) != block_bytes) {
      throw CorruptObject("block " + std::to_string(i),
                          "payload has " + std::to_string(payloads[i].size()) +
                              " bytes, expected " + std::to_string(block_bytes));
    }
    object.blocks.emplace_back(payloads[i].begin(), payloads[i].end());
  }
  return object;
}

std::string ContentDigest(std::span<const uint8_t> bytes) {
  const XXH128_hash_t hash = XXH3_128bits(bytes.data(), bytes.size());
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, hash);  // big-endian: high 64 bits first
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (size_t i = 0; i < 16; ++i) {
    out[2 * i] = kHex[canonical.digest[i] >> 4];
    out[2 * i + 1] = kHex[canonical.digest[i] & 0xF];
  }
  return out;
}

std::string ContentDigest(const std::string& text) {
  return ContentDigest(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace readkv::codec
