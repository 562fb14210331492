// A stored cache object (bytes read back from a cache directory) through ParseCacheObject with a
// fixed reader identity. Random bytes rarely pass the XXH3 checksums, so each input is parsed
// twice: as it is, and with every checksum the layout reaches recomputed, which lets the fuzzer
// reach the identity JSON, the block count and the block sizes behind them. The contract: a
// CacheObject, or CorruptObject / IdentityMismatch / InvalidArgument; nothing read out of bounds.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "readkv/codec/cache_object.h"
#include "readkv/codec/errors.h"

namespace {

using readkv::codec::CacheIdentity;

// The identity fuzz/corpus/cache_object/ seeds were written with (codec tests' BaseIdentity).
const CacheIdentity& Expected() {
  static const CacheIdentity id = [] {
    CacheIdentity x;
    x.model_id = "tiny-llama-test";
    x.weights_digest = "0123456789abcdef0123456789abcdef";
    x.layers = 2;
    x.heads_q = 4;
    x.heads_kv = 2;
    x.head_dim = 16;
    x.rope_theta = 500000.0;
    x.key_transform_seed = 0x5eed0001;
    x.value_transform_seed = 0x5eed0002;
    x.calibration_digest = "fedcba9876543210fedcba9876543210";
    x.codebook_id = "gaussian-lloyd-tree";
    x.codebook_version = 1;
    x.store_bits = 4;
    return x;
  }();
  return id;
}

uint64_t LoadLe(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the header and block checksums wherever the (possibly mutated) lengths allow.
void FixChecksums(std::vector<uint8_t>& b) {
  size_t at = 8 + 4;  // magic, format_version
  if (b.size() < at + 4) return;
  const uint64_t header_bytes = LoadLe(&b[at], 4);
  at += 4;
  if (header_bytes > b.size() - at || b.size() - at - header_bytes < 8) return;
  StoreLe64(&b[at + header_bytes], XXH3_64bits(&b[at], header_bytes));
  at += header_bytes + 8;
  if (b.size() - at < 4) return;
  const uint64_t blocks = LoadLe(&b[at], 4);
  at += 4;
  for (uint64_t i = 0; i < blocks && b.size() - at >= 16; ++i) {
    const uint64_t payload = LoadLe(&b[at], 8);
    if (payload > b.size() - at - 16) return;
    StoreLe64(&b[at + 8], XXH3_64bits(&b[at + 16], payload));
    at += 16 + payload;
  }
}

void Parse(std::span<const uint8_t> bytes) {
  try {
    const readkv::codec::CacheObject object = readkv::codec::ParseCacheObject(bytes, Expected());
    if (!(object.identity == Expected())) __builtin_trap();
    const size_t expected_blocks = static_cast<size_t>(Expected().layers * Expected().heads_kv);
    if (object.blocks.size() != expected_blocks) __builtin_trap();
    // An accepted object must survive a write and a read unchanged.
    const readkv::codec::CacheObject again =
        readkv::codec::ParseCacheObject(readkv::codec::SerializeCacheObject(object), Expected());
    if (again.prefix_digest != object.prefix_digest || again.first_token != object.first_token ||
        again.tokens != object.tokens || again.blocks != object.blocks) {
      __builtin_trap();
    }
  } catch (const readkv::codec::CorruptObject&) {
  } catch (const readkv::codec::IdentityMismatch&) {
  } catch (const readkv::codec::InvalidArgument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Parse(std::span<const uint8_t>(data, size));
  std::vector<uint8_t> fixed(data, data + size);
  FixChecksums(fixed);
  if (size > 0 && std::memcmp(fixed.data(), data, size) != 0) Parse(fixed);
  return 0;
}
