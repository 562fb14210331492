// A fresh directory per test under the system temp dir, removed afterwards (tests use real
// SQLite files, never mocks).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

#include "kvgate/filesystem/remove_tree.h"

namespace kvgate::history::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kvgate_history_test_" + std::to_string(getpid()) + "_" +
             std::to_string(counter.fetch_add(1)));
    RemoveTree(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    RemoveTree(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path File(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvgate::history::testing
