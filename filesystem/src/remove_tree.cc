#include "kvgate/filesystem/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace kvgate {
namespace {

// Directories nftw keeps open at once; deeper trees are still walked (it reopens them).
constexpr int kOpenDirectories = 64;

// nftw hands its callback no user pointer, so the walk in progress on this thread keeps its first
// failure here (nftw calls back on the calling thread only).
struct Walk {
  int error = 0;                        // errno of the first entry that could not be removed
  std::string* failed_entry = nullptr;  // where to name that entry; null: not wanted
};
thread_local Walk* current_walk = nullptr;

bool IsMissing(int error) { return error == ENOENT || error == ENOTDIR; }

int RemoveEntry(const char* entry, const struct stat* /*status*/, int type, struct FTW* /*ftw*/) {
  // FTW_DNR: a directory that could not be opened, so its children were not visited; glibc calls
  // back with the opendir errno still set, which says more than remove()'s ENOTEMPTY would.
  const int open_error = type == FTW_DNR ? errno : 0;
  if (std::remove(entry) == 0 || errno == ENOENT) return 0;  // ENOENT: someone else removed it
  current_walk->error = open_error != 0 ? open_error : errno;
  if (current_walk->failed_entry != nullptr) {
    // nftw is C: nothing may unwind through it. Without the name, the errno still goes back.
    try {
      current_walk->failed_entry->assign(entry);
    } catch (...) {
    }
  }
  return 1;  // stops the walk; nftw returns it
}

// Returns 0 when `root` is gone, else the errno of the first failure (naming the entry in
// `failed_entry` when given and known).
int RemoveTreeImpl(const std::filesystem::path& root, std::string* failed_entry) noexcept {
  Walk walk;
  walk.failed_entry = failed_entry;
  current_walk = &walk;
  // FTW_DEPTH: a directory after its children (rmdir needs it empty). FTW_PHYS: lstat, so a
  // symbolic link is reported as one (FTW_SL) and removed itself, never followed.
  const int rc = ::nftw(root.c_str(), RemoveEntry, kOpenDirectories, FTW_DEPTH | FTW_PHYS);
  const int walk_errno = errno;
  current_walk = nullptr;
  if (rc == 0) return 0;
  if (rc > 0) return walk.error;
  // rc == -1: nftw itself failed (the root could not be examined, a directory could not be
  // opened, ...). A root that is not there is what "missing path is not an error" means; an ENOENT
  // for something deeper while the root remains (a concurrent removal) is still a failure.
  struct stat status;
  if (IsMissing(walk_errno) && ::lstat(root.c_str(), &status) != 0 && IsMissing(errno)) return 0;
  return walk_errno != 0 ? walk_errno : EIO;
}

}  // namespace

void RemoveTree(const std::filesystem::path& root) {
  std::string failed_entry;
  const int error = RemoveTreeImpl(root, &failed_entry);
  if (error == 0) return;
  const std::error_code ec(error, std::generic_category());
  if (failed_entry.empty() || failed_entry == root.native()) {
    throw std::filesystem::filesystem_error("cannot remove", root, ec);
  }
  throw std::filesystem::filesystem_error("cannot remove", root, failed_entry, ec);
}

bool RemoveTree(const std::filesystem::path& root, std::error_code& ec) noexcept {
  const int error = RemoveTreeImpl(root, nullptr);
  if (error == 0) {
    ec.clear();
    return true;
  }
  ec.assign(error, std::generic_category());
  return false;
}

}  // namespace kvgate
