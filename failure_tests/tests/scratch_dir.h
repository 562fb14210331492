// A fresh folder per test under the system temp dir, removed afterwards (the tests use real
// files, real SQLite databases and real child processes, never mocks).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

#include "kvgate/filesystem/remove_tree.h"

namespace kvgate::failure_tests::testing {

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kvgate_failure_tests_test_" + std::to_string(getpid()) + "_" +
             std::to_string(counter.fetch_add(1)));
    RemoveTree(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    RemoveTree(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvgate::failure_tests::testing
