// The on-disk store of a server's persistent prefix cache (`kvgate serve --cache-dir DIR`,
// issue 6): one file per prefix block, in the codec's versioned cache-object format
// (readkv/codec/cache_object.h: identity header, per-block XXH3 checksums). Torch-free, so it is
// testable on its own; the runtime (runtime.h) decides what a block holds and when to store it.
//
// Layout of DIR:
//   <identity>-<prefix>.rkv    one object: <identity> is the writer's CacheIdentity::Digest(),
//                              <prefix> PrefixDigest() of the token ids up to the end of the
//                              block. Servers of different identities sharing DIR (a codebook,
//                              model or W change, alternating configurations) each see only their
//                              own objects and never destroy each other's; stale ones stay until
//                              max_bytes evicts them.
//   .<prefix>.rkv.tmp.<pid>.<n> a write in progress (or left by a crash; see below)
//   quarantine/                refused objects, kept as evidence:
//                              <identity>-<prefix>.<reason>.<unix ns>.rkv; at most
//                              kQuarantineFiles are kept (oldest deleted first).
//
// Loading: the file is read whole and parsed against the running identity, whatever its name
// says. An object whose header identity differs (IdentityMismatch: a file copied or renamed
// under this identity's name) is refused with reason "identity_mismatch" (the warn sink gets the
// differing field); a torn, truncated, bit-flipped or misnamed object (CorruptObject, or a prefix
// digest / position that is not what the name promises) with reason "corrupt". A refused
// object is counted in rejections(), moved to quarantine/, and never decoded; the caller
// recomputes the block.
// Writing is crash-safe: write to a unique temporary name in DIR, fsync the file, rename over the
// final name, fsync DIR. A reader therefore sees a whole object or none; a crash leaves at most a
// temporary file, which Load never reads and which the next store opened on DIR deletes when the
// process that wrote it is gone. With max_bytes > 0, objects are evicted least recently used
// first (by mtime; a hit refreshes it) after every write until DIR holds at most max_bytes.
//
// Thread-safety: every member function may be called from any thread (one mutex). Several
// processes may share DIR: temporary names carry the pid and a counter, and renames are atomic.
// I/O failures never throw out of Load/Store: they count as a miss or a failed write and go to
// the warn sink. The constructor throws std::invalid_argument("cache_dir: ...") when DIR cannot
// be created or is not a directory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "readkv/codec/cache_object.h"

namespace readkv::model {

struct PrefixCacheStoreOptions {
  std::string directory;
  int64_t max_bytes = 0;  // bytes of *.rkv objects kept in DIR; 0 = unbounded
  // Receives one line per refusal, failed write or removed leftover; may be empty.
  std::function<void(std::string_view)> warn;
};

// Cumulative counts since the store was opened.
struct PrefixCacheCounters {
  int64_t hits = 0;                           // objects loaded and accepted
  int64_t misses = 0;                         // no object under the name
  int64_t stored = 0;                         // objects written
  int64_t stored_bytes = 0;                   // bytes of those objects
  int64_t write_failures = 0;                 // writes that failed (nothing left behind)
  int64_t evicted = 0;                        // objects deleted to stay under max_bytes
  int64_t removed_temporaries = 0;            // crash leftovers deleted when the store was opened
  std::map<std::string, int64_t> rejections;  // by reason: "identity_mismatch", "corrupt"
};

class PrefixCacheStore {
 public:
  static constexpr int kQuarantineFiles = 256;

  PrefixCacheStore(PrefixCacheStoreOptions options, codec::CacheIdentity identity);
  PrefixCacheStore(const PrefixCacheStore&) = delete;
  PrefixCacheStore& operator=(const PrefixCacheStore&) = delete;

  // The object stored for `prefix_digest`, accepted only if it parses under this store's identity
  // and holds `tokens` tokens starting at `first_token`; nullopt on a miss or a refusal (see
  // above). Throws std::invalid_argument("prefix_digest") unless it is 32 lowercase hex digits.
  std::optional<codec::CacheObject> Load(const std::string& prefix_digest, int64_t first_token,
                                         int tokens);
  // Writes `object` (its identity must be this store's: std::invalid_argument("identity")
  // otherwise) under object.prefix_digest, replacing any object of that name. Returns false when
  // the write failed. Serialisation errors (codec::InvalidArgument) propagate: they are bugs.
  bool Store(const codec::CacheObject& object);

  const std::string& directory() const { return options_.directory; }
  const codec::CacheIdentity& identity() const { return identity_; }
  // Where this store keeps (and looks for) the object of `prefix_digest`.
  std::string PathOf(const std::string& prefix_digest) const;
  PrefixCacheCounters counters() const;

 private:
  void Warn(const std::string& line) const;
  void Quarantine(const std::string& path, const std::string& digest, const std::string& reason);
  void RemoveCrashLeftovers();
  void EvictLocked();

  PrefixCacheStoreOptions options_;
  codec::CacheIdentity identity_;
  std::string identity_digest_;  // identity_.Digest(), the first part of every name
  mutable std::mutex mutex_;
  PrefixCacheCounters counters_;
};

// The name of the prefix ending at a block: codec::ContentDigest of the token ids as
// little-endian int32 values.
std::string PrefixDigest(std::span<const int32_t> tokens);

}  // namespace readkv::model
