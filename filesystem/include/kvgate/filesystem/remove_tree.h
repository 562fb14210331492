// RemoveTree: delete a file or a directory tree, the project's replacement for
// std::filesystem::remove_all, which no kvgate code calls.
//
// Why: the libtorch 2.11 pip wheel exports its own copy of parts of libstdc++'s std::filesystem.
// Binaries that list libtorch.so before libstdc++.so in DT_NEEDED (ours, and CMake 4 does not
// keep a reordered link line) bind their std::filesystem::remove_all calls to torch's copy, which
// jumps to address 0 (SIGSEGV on the GPU host). RemoveTree walks and deletes with POSIX nftw()
// and remove(), so it never enters that code (only a failure builds a filesystem_error). A CTest
// guard (RemoveTreeGuard.*, filesystem/tests/no_remove_all_test.py) fails on any new remove_all
// call in the tree.
//
// Semantics, as std::filesystem::remove_all's:
// - `root` may be a directory (removed with everything under it, children first), a file, or a
//   symbolic link (the link is removed, never its target).
// - Symbolic links inside the tree are removed as links and never followed, so nothing outside
//   the tree is touched, whatever the links point to.
// - A path that does not exist (or runs through a non-directory) is not an error: nothing to do.
// - The walk stops at the first entry that cannot be removed; what was removed before it stays
//   removed. An entry that vanishes during the walk (removed by someone else) is not an error.
// - Mount points are crossed (like remove_all). Full paths are used, so an entry whose path is
//   longer than PATH_MAX fails with ENAMETOOLONG.
//
// Thread-safety: safe to call from several threads at once (nftw is used without FTW_CHDIR, so the
// working directory never changes); concurrent calls on overlapping trees race as remove_all's do.
#pragma once

#include <filesystem>
#include <system_error>

namespace kvgate {

// Removes `root` and, when it is a directory, everything under it. Throws
// std::filesystem::filesystem_error on failure: code() is the errno (generic category), path1()
// is `root` and path2() the entry that could not be removed when that is not `root` itself;
// what() names both, e.g. "filesystem error: cannot remove: Directory not empty [/a] [/a/b]".
void RemoveTree(const std::filesystem::path& root);

// The same without exceptions: returns true when `root` no longer exists (removed, or never
// there) and clears `ec`; otherwise returns false with `ec` set to the errno of the first entry
// that could not be removed.
bool RemoveTree(const std::filesystem::path& root, std::error_code& ec) noexcept;

}  // namespace kvgate
