#include "kvgate/suite/server_process.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
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

}  // namespace
}  // namespace kvgate::suite
