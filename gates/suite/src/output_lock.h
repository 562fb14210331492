// The output folder of one `kvgate run`, held for the run's whole life: an exclusive advisory
// lock (flock) on <out>/.kvgate-run.lock, which names the holder's pid. A second run given the
// same folder is refused at once instead of mixing its server logs and reports with the first's
// (two runs sharing a log once measured each other's servers). The kernel drops the lock when
// the holder exits, however it exits, so a crashed run never leaves the folder locked.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace kvgate::suite {

class OutputFolderBusy : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OutputFolderLock {
 public:
  // Creates the folder if needed and takes the lock. Throws OutputFolderBusy naming the folder
  // and the holder's pid when another process holds it, std::runtime_error when the lock file
  // cannot be opened.
  explicit OutputFolderLock(const std::filesystem::path& folder);
  ~OutputFolderLock();
  OutputFolderLock(const OutputFolderLock&) = delete;
  OutputFolderLock& operator=(const OutputFolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace kvgate::suite
