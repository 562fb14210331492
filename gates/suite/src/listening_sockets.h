// Which TCP ports a process tree listens on, read from Linux's /proc: how the suite knows that
// the port a server printed is really the server's own (ServerProcess), not a port some other
// process printed into a shared log or already held.
#pragma once

#include <sys/types.h>

#include <optional>
#include <set>

namespace kvgate::suite {

// The TCP ports (IPv4 and IPv6) in LISTEN state whose sockets are open in `root` or any of its
// descendants. nullopt when /proc cannot tell (not Linux, or /proc not mounted): callers then
// fall back to trusting what the process printed.
std::optional<std::set<int>> ListeningPortsOfTree(pid_t root);

}  // namespace kvgate::suite
