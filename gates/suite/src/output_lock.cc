#include "output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvgate::suite {

OutputFolderLock::OutputFolderLock(const std::filesystem::path& folder) {
  std::filesystem::create_directories(folder);
  const std::filesystem::path path = folder / ".kvgate-run.lock";
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error("cannot open the output folder's lock " + path.string() + ": " +
                             std::strerror(errno));
  }
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[32] = {};
    (void)!pread(fd_, holder, sizeof(holder) - 1, 0);
    close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      std::string pid(holder);
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      throw OutputFolderBusy("the output folder " + folder.string() +
                             " is in use by another kvgate run" +
                             (pid.empty() ? "" : " (pid " + pid + ")") +
                             "; give each concurrent run its own --out");
    }
    throw std::runtime_error("cannot lock " + path.string() + ": " + std::strerror(error));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) == 0) (void)!pwrite(fd_, pid.data(), pid.size(), 0);
}

OutputFolderLock::~OutputFolderLock() {
  if (fd_ >= 0) close(fd_);  // drops the lock
}

}  // namespace kvgate::suite
