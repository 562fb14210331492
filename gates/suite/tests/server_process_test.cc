#include "kvgate/suite/server_process.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvgate::suite {
namespace {

// A stand-in server: prints `listening on HOST:PORT` like `kvgate serve` and answers GET /health
// with 200 (Python's http.server on a free loopback port), so ServerProcess runs for real without
// a model.
std::vector<std::string> HealthServer() {
  return {"python3", "-c",
          "import http.server, sys\n"
          "class H(http.server.BaseHTTPRequestHandler):\n"
          "  def do_GET(self):\n"
          "    self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
          "  def log_message(self, *a): pass\n"
          "s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
          "print('listening on 127.0.0.1:%d' % s.server_address[1], flush=True)\n"
          "s.serve_forever()\n"};
}

std::string LogPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("kvgate_server_process_test_" + std::to_string(getpid()) + "_" + name + ".log"))
      .string();
}

// Hostile-test finding (2026-12-02): two `kvgate run` sharing an output folder read each other's
// "listening on" lines from one log, and one measured the other's server. The port a server
// prints is taken only if its own process tree listens on it: here an impostor prints the port
// of a real server it does not own, and is refused instead of being handed that server's URL.
TEST(ServerProcessTest, APrintedPortThatAnotherProcessOwnsIsNeverTaken) {
  const std::string real_log = LogPath("real");
  ServerProcess real(HealthServer(), std::chrono::seconds(30), real_log, /*append_address=*/false);
  const std::string impostor_log = LogPath("impostor");
  const std::vector<std::string> impostor = {
      "python3", "-c",
      "import time\nprint('listening on 127.0.0.1:" + std::to_string(real.port()) +
          "', flush=True)\ntime.sleep(60)\n"};
  try {
    ServerProcess wrong(impostor, std::chrono::seconds(3), impostor_log, /*append_address=*/false);
    ADD_FAILURE() << "took " << wrong.url() << ", a port its process does not listen on";
  } catch (const ServerStartError& e) {
    EXPECT_NE(std::string(e.what()).find("none of its processes listens on that port"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(real_log);
  std::filesystem::remove(impostor_log);
}

// The server may run under a wrapper (a shell, a launcher): the port is found in the tree.
TEST(ServerProcessTest, APortOpenedByAGrandchildIsTheServersOwn) {
  const std::string log = LogPath("wrapped");
  std::vector<std::string> python = HealthServer();
  std::string quoted;
  for (char c : python[2]) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  ServerProcess server({"sh", "-c", "python3 -c '" + quoted + "'; exit 0"},
                       std::chrono::seconds(30), log, /*append_address=*/false);
  EXPECT_GT(server.port(), 0);
  std::filesystem::remove(log);
}

TEST(ServerProcessTest, ExitDescriptionSaysHowAServerDied) {
  const std::string log = LogPath("kill");
  ServerProcess server(HealthServer(), std::chrono::seconds(30), log, /*append_address=*/false);
  EXPECT_TRUE(server.Alive());
  EXPECT_EQ(server.ExitDescription(), "still running");
  server.Kill();
  EXPECT_FALSE(server.Alive());
  EXPECT_EQ(server.ExitDescription(), "killed by signal 9");
  std::filesystem::remove(log);
}

TEST(ServerProcessTest, ExitDescriptionOfAStoppedServerNamesTheSignalItEndedBy) {
  const std::string log = LogPath("stop");
  ServerProcess server(HealthServer(), std::chrono::seconds(30), log, /*append_address=*/false);
  server.Stop(std::chrono::seconds(10));  // SIGTERM: Python's default is to die of it
  EXPECT_FALSE(server.Alive());
  EXPECT_EQ(server.ExitDescription(), "killed by signal 15");
  std::filesystem::remove(log);
}

// `kvgate run` starts each local server on the placement's server CPUs (cpu_placement.h).
TEST(ServerProcessTest, AServerStartedOnCpusRunsThere) {
  const CpuList allowed = AllowedCpus();
  if (allowed.size() < 2)
    GTEST_SKIP() << "needs 2 CPUs; this process may run on " << allowed.size();
  const std::string log = LogPath("cpus");
  ServerProcess server(HealthServer(), std::chrono::seconds(30), log, /*append_address=*/false,
                       {allowed.back()});
  EXPECT_EQ(server.cpus(), CpuList{allowed.back()});
  std::ifstream status("/proc/" + std::to_string(server.pid()) + "/status");
  std::string line;
  while (std::getline(status, line) && line.rfind("Cpus_allowed_list:", 0) != 0) {
  }
  EXPECT_EQ(line, "Cpus_allowed_list:\t" + std::to_string(allowed.back()));
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace kvgate::suite
