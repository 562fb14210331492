#include "listening_sockets.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kvgate::suite {
namespace {

// The pids of `root` and every descendant, from /proc/<pid>/task/<tid>/children.
std::vector<pid_t> ProcessTree(pid_t root) {
  std::vector<pid_t> tree = {root};
  for (size_t i = 0; i < tree.size() && tree.size() < 4096; ++i) {
    const std::string tasks = "/proc/" + std::to_string(tree[i]) + "/task";
    DIR* dir = opendir(tasks.c_str());
    if (dir == nullptr) continue;
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      std::ifstream children(tasks + "/" + entry->d_name + "/children");
      pid_t child = 0;
      while (children >> child) tree.push_back(child);
    }
    closedir(dir);
  }
  return tree;
}

// Socket inodes open in a process ("socket:[12345]" links under /proc/<pid>/fd).
void AddSocketInodes(pid_t pid, std::set<unsigned long>& inodes) {
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = opendir(fds.c_str());
  if (dir == nullptr) return;
  char target[128];
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string link = fds + "/" + entry->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) inodes.insert(inode);
  }
  closedir(dir);
}

// LISTEN sockets of a /proc/net/tcp{,6} table: inode -> local port. Rows read
// "sl local_address rem_address st ... inode", addresses as HEXIP:HEXPORT, LISTEN is st 0A.
bool ReadListeners(const char* table, std::map<unsigned long, int>& listeners) {
  std::ifstream in(table);
  if (!in) return false;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
    unsigned long inode = 0;
    if (!(row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode)) {
      continue;
    }
    if (state != "0A") continue;
    const size_t colon = local.rfind(':');
    if (colon == std::string::npos) continue;
    listeners[inode] = static_cast<int>(std::stoul(local.substr(colon + 1), nullptr, 16));
  }
  return true;
}

}  // namespace

std::optional<std::set<int>> ListeningPortsOfTree(pid_t root) {
  std::map<unsigned long, int> listeners;
  const bool v4 = ReadListeners("/proc/net/tcp", listeners);
  const bool v6 = ReadListeners("/proc/net/tcp6", listeners);
  if (!v4 && !v6) return std::nullopt;
  std::set<unsigned long> inodes;
  for (pid_t pid : ProcessTree(root)) AddSocketInodes(pid, inodes);
  std::set<int> ports;
  for (unsigned long inode : inodes) {
    if (auto it = listeners.find(inode); it != listeners.end()) ports.insert(it->second);
  }
  return ports;
}

}  // namespace kvgate::suite
