#include "readkv/model/prefix_cache_store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "readkv/codec/errors.h"

namespace readkv::model {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kObjectSuffix = ".rkv";
constexpr std::string_view kTemporaryMarker = ".rkv.tmp.";

bool IsDigest(const std::string& text) {
  if (text.size() != 32) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Temporary names are unique per process, whatever the number of stores in it.
std::atomic<uint64_t> g_next_temporary{0};

std::string ErrnoText(int error) {
  return std::error_code(error, std::generic_category()).message();
}

// Reads a whole file; nullopt with `error` set when it cannot be opened or read.
std::optional<std::vector<uint8_t>> ReadWholeFile(const std::string& path, int& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = errno;
    return std::nullopt;
  }
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  ::close(fd);
  return bytes;
}

bool WriteAll(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A rename is durable only once the directory entry is on disk too.
bool SyncDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

int64_t NowNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string PrefixDigest(std::span<const int32_t> tokens) {
  std::vector<uint8_t> bytes;
  bytes.reserve(tokens.size() * 4);
  for (const int32_t t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  return codec::ContentDigest(std::span<const uint8_t>(bytes));
}

PrefixCacheStore::PrefixCacheStore(PrefixCacheStoreOptions options, codec::CacheIdentity identity)
    : options_(std::move(options)),
      identity_(std::move(identity)),
      identity_digest_(identity_.Digest()) {
  if (options_.directory.empty()) throw std::invalid_argument("cache_dir: must not be empty");
  if (options_.max_bytes < 0) throw std::invalid_argument("cache_max_bytes: must be >= 0");
  std::error_code ec;
  fs::create_directories(fs::path(options_.directory) / "quarantine", ec);
  if (ec || !fs::is_directory(options_.directory)) {
    throw std::invalid_argument("cache_dir: cannot use \"" + options_.directory +
                                "\" as a directory" + (ec ? ": " + ec.message() : ""));
  }
  RemoveCrashLeftovers();
}

std::string PrefixCacheStore::PathOf(const std::string& prefix_digest) const {
  return (fs::path(options_.directory) /
          (identity_digest_ + "-" + prefix_digest + std::string(kObjectSuffix)))
      .string();
}

PrefixCacheCounters PrefixCacheStore::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void PrefixCacheStore::Warn(const std::string& line) const {
  if (options_.warn) options_.warn(line);
}

void PrefixCacheStore::RemoveCrashLeftovers() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.directory, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t marker = name.find(kTemporaryMarker);
    if (name.empty() || name[0] != '.' || marker == std::string::npos) continue;
    // ".<digest>.rkv.tmp.<pid>.<n>": a live writer's file is left alone (a sharing server).
    const std::string rest = name.substr(marker + kTemporaryMarker.size());
    pid_t pid = 0;
    try {
      pid = static_cast<pid_t>(std::stol(rest));
    } catch (const std::logic_error&) {
      pid = 0;
    }
    if (pid == ::getpid() || (pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM))) continue;
    std::error_code remove_error;
    if (fs::remove(entry.path(), remove_error)) {
      ++counters_.removed_temporaries;
      Warn("prefix cache: removed " + name + ", a write its process never finished");
    }
  }
}

void PrefixCacheStore::Quarantine(const std::string& path, const std::string& digest,
                                  const std::string& reason) {
  const fs::path dir = fs::path(options_.directory) / "quarantine";
  const fs::path target =
      dir / (digest + "." + reason + "." + std::to_string(NowNanoseconds()) + ".rkv");
  std::error_code ec;
  fs::rename(path, target, ec);
  if (ec) {
    // Refused objects must not be offered again; if they cannot be kept, they go.
    fs::remove(path, ec);
    return;
  }
  std::vector<std::pair<fs::file_time_type, fs::path>> kept;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code time_error;
    kept.emplace_back(entry.last_write_time(time_error), entry.path());
  }
  if (kept.size() <= static_cast<size_t>(kQuarantineFiles)) return;
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + kQuarantineFiles < kept.size(); ++i) fs::remove(kept[i].second, ec);
}

std::optional<codec::CacheObject> PrefixCacheStore::Load(const std::string& prefix_digest,
                                                         int64_t first_token, int tokens) {
  if (!IsDigest(prefix_digest)) {
    throw std::invalid_argument("prefix_digest: must be 32 lowercase hex digits, got \"" +
                                prefix_digest + "\"");
  }
  std::lock_guard lock(mutex_);
  const std::string path = PathOf(prefix_digest);
  int error = 0;
  const std::optional<std::vector<uint8_t>> bytes = ReadWholeFile(path, error);
  if (!bytes) {
    ++counters_.misses;
    if (error != ENOENT) Warn("prefix cache: cannot read " + path + ": " + ErrnoText(error));
    return std::nullopt;
  }
  std::string reason, detail;
  try {
    codec::CacheObject object = codec::ParseCacheObject(*bytes, identity_);
    if (object.prefix_digest != prefix_digest || object.first_token != first_token ||
        object.tokens != tokens) {
      throw codec::CorruptObject(
          "name", "holds prefix " + object.prefix_digest + " tokens [" +
                      std::to_string(object.first_token) + ", +" + std::to_string(object.tokens) +
                      "), the name promises " + prefix_digest + " [" + std::to_string(first_token) +
                      ", +" + std::to_string(tokens) + ")");
    }
    ++counters_.hits;
    // Least recently used = oldest mtime: a hit makes the object young again.
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
    return object;
  } catch (const codec::IdentityMismatch& e) {
    reason = "identity_mismatch";
    detail = "field " + e.field() + ": running '" + e.expected() + "', object '" + e.found() + "'";
  } catch (const codec::CorruptObject& e) {
    reason = "corrupt";
    detail = e.what();
  } catch (const codec::InvalidArgument& e) {
    // Only possible for a format version this codec cannot read: refuse it like damage.
    reason = "corrupt";
    detail = e.what();
  }
  ++counters_.rejections[reason];
  Warn("prefix cache: refused " + path + " (" + reason + "; " + detail +
       "); moved to quarantine/, recomputing");
  Quarantine(path, identity_digest_ + "-" + prefix_digest, reason);
  return std::nullopt;
}

bool PrefixCacheStore::Store(const codec::CacheObject& object) {
  if (!IsDigest(object.prefix_digest)) {
    throw std::invalid_argument("prefix_digest: must be 32 lowercase hex digits, got \"" +
                                object.prefix_digest + "\"");
  }
  if (!(object.identity == identity_)) {
    throw std::invalid_argument("identity: an object of another identity cannot be stored here");
  }
  const std::vector<uint8_t> bytes = codec::SerializeCacheObject(object);
  std::lock_guard lock(mutex_);
  const std::string final_path = PathOf(object.prefix_digest);
  const std::string temporary =
      (fs::path(options_.directory) /
       ("." + object.prefix_digest + std::string(kTemporaryMarker) + std::to_string(::getpid()) +
        "." + std::to_string(g_next_temporary.fetch_add(1))))
          .string();
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                        S_IRUSR | S_IWUSR | S_IRGRP | S_IROTH);
  std::string failure;
  if (fd < 0) {
    failure = "create " + temporary + ": " + ErrnoText(errno);
  } else {
    const bool written = WriteAll(fd, bytes);
    const int write_errno = errno;
    const bool synced = written && ::fsync(fd) == 0;
    const int sync_errno = errno;
    const bool closed = ::close(fd) == 0;
    if (!written) {
      failure = "write " + temporary + ": " + ErrnoText(write_errno);
    } else if (!synced) {
      failure = "fsync " + temporary + ": " + ErrnoText(sync_errno);
    } else if (!closed) {
      failure = "close " + temporary + ": " + ErrnoText(errno);
    } else if (::rename(temporary.c_str(), final_path.c_str()) != 0) {
      failure = "rename to " + final_path + ": " + ErrnoText(errno);
    } else if (!SyncDirectory(options_.directory)) {
      // The object is in place and whole; only its durability across a power loss is unsure.
      Warn("prefix cache: fsync of " + options_.directory + " failed: " + ErrnoText(errno));
    }
  }
  if (!failure.empty()) {
    ::unlink(temporary.c_str());
    ++counters_.write_failures;
    Warn("prefix cache: could not store an object (" + failure + ")");
    return false;
  }
  ++counters_.stored;
  counters_.stored_bytes += static_cast<int64_t>(bytes.size());
  if (options_.max_bytes > 0) EvictLocked();
  return true;
}

void PrefixCacheStore::EvictLocked() {
  std::vector<std::tuple<fs::file_time_type, int64_t, fs::path>> objects;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.path().string().ends_with(kObjectSuffix)) {
      continue;
    }
    std::error_code size_error, time_error;
    const auto size = static_cast<int64_t>(entry.file_size(size_error));
    if (size_error) continue;
    objects.emplace_back(entry.last_write_time(time_error), size, entry.path());
    total += size;
  }
  std::sort(objects.begin(), objects.end());
  for (const auto& [time, size, path] : objects) {
    if (total <= options_.max_bytes) break;
    if (fs::remove(path, ec)) {
      total -= size;
      ++counters_.evicted;
    }
  }
}

}  // namespace readkv::model
