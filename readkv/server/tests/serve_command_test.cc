// `kvgate serve` as a child process, the way scripts and the suite run it: the one-line startup
// contract, SIGTERM draining (exit 0), and usage errors (exit 2). The model is the real runtime
// with the tiny random Llama of tiny_llama.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "http_test_client.h"
#include "tiny_llama.h"

namespace readkv::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::HttpConnection;
using testing::SseData;
namespace http = boost::beast::http;

// A child process with its stdout on a pipe (stderr is inherited: it shows in the test log).
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    stdout_ = out[0];
  }
  ~Child() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) ::close(stdout_);
  }

  // Reads stdout up to and excluding the next newline; "" on EOF or timeout.
  std::string ReadLine(milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string line;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd fd{stdout_, POLLIN, 0};
      if (::poll(&fd, 1, 50) <= 0) continue;
      char c;
      if (::read(stdout_, &c, 1) != 1) return line;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

  // Everything left on stdout until EOF (bounded by `timeout`).
  std::string ReadRest(milliseconds timeout) {
    std::string rest;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd fd{stdout_, POLLIN, 0};
      if (::poll(&fd, 1, 50) <= 0) continue;
      char buffer[256];
      const ssize_t n = ::read(stdout_, buffer, sizeof buffer);
      if (n <= 0) break;
      rest.append(buffer, static_cast<size_t>(n));
    }
    return rest;
  }

  void Signal(int signal_number) { ::kill(pid_, signal_number); }

  // The exit status, or -1 if it did not exit within `timeout` (it is then killed).
  int Wait(milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  bool exited_ = false;
};

std::vector<std::string> ServeArgs(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      KVGATE_BINARY, "serve", "--model",   testing::TinyLlamaDirectory(/*calibrated=*/true),
      "--port",      "0",     "--threads", "1",
      "--log-level", "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Starts `kvgate serve` and returns its port from the one line it prints.
uint16_t StartAndReadPort(Child& child) {
  const std::string line = child.ReadLine(milliseconds(60000));
  std::smatch match;
  const std::regex expected(R"(^listening on 127\.0\.0\.1:(\d+)$)");
  EXPECT_TRUE(std::regex_match(line, match, expected)) << "first line: \"" << line << "\"";
  if (match.empty()) return 0;
  return static_cast<uint16_t>(std::stoi(match[1].str()));
}

json LongStream() {
  return {{"prompt", "drain"},
          {"max_tokens", testing::kTinyLlamaContext - 8},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", true}};
}

TEST(ServeCommandTest, PrintsExactlyOneListeningLineServesAndExitsZeroOnSigterm) {
  Child child(ServeArgs({"--kv", "dense"}));
  const uint16_t port = StartAndReadPort(child);
  ASSERT_NE(port, 0);
  HttpConnection connection(port);
  EXPECT_EQ(connection.Get("/health").status, 200);
  auto completion = connection.Post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 3}});
  EXPECT_EQ(completion.status, 200) << completion.body;
  connection.Close();
  child.Signal(SIGTERM);
  EXPECT_EQ(child.Wait(milliseconds(20000)), 0);
  EXPECT_EQ(child.ReadRest(milliseconds(1000)), "");  // nothing else on stdout
}

TEST(ServeCommandTest, SigtermCancelsAStreamThatOutlastsTheDrainWithAnErrorEvent) {
  Child child(ServeArgs({"--kv", "readkv", "--drain-timeout", "0"}));
  const uint16_t port = StartAndReadPort(child);
  ASSERT_NE(port, 0);
  HttpConnection connection(port);
  connection.SendRequest(http::verb::post, "/v1/completions", LongStream().dump());
  connection.BeginStream();
  ASSERT_EQ(connection.stream_status(), 200);
  connection.ReadStreamUntil("data: {");
  child.Signal(SIGTERM);
  const auto data = SseData(connection.ReadStreamUntil("[DONE]"));
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  const json last = json::parse(data[data.size() - 2]);
  EXPECT_EQ(last["error"]["code"], "shutting_down") << data[data.size() - 2];
  EXPECT_EQ(child.Wait(milliseconds(20000)), 0);
}

TEST(ServeCommandTest, SigtermLetsAStreamWithinTheDrainTimeFinish) {
  Child child(ServeArgs({"--kv", "dense", "--drain-timeout", "60"}));
  const uint16_t port = StartAndReadPort(child);
  ASSERT_NE(port, 0);
  HttpConnection connection(port);
  json request = LongStream();
  request["max_tokens"] = 200;
  connection.SendRequest(http::verb::post, "/v1/completions", request.dump());
  connection.BeginStream();
  connection.ReadStreamUntil("data: {");
  child.Signal(SIGTERM);
  const auto data = SseData(connection.ReadStreamUntil("[DONE]"));
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  const json last = json::parse(data[data.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length") << data[data.size() - 2];
  EXPECT_EQ(child.Wait(milliseconds(20000)), 0);
}

TEST(ServeCommandTest, BadFlagsExitTwoNamingTheFlag) {
  {
    Child child(ServeArgs({"--kv", "bogus"}));
    EXPECT_EQ(child.Wait(milliseconds(20000)), 2);
  }
  {
    Child child(ServeArgs({"--max-batch", "0"}));
    EXPECT_EQ(child.Wait(milliseconds(20000)), 2);
  }
  {
    Child child(ServeArgs({"--prefill-chunk", "-1"}));
    EXPECT_EQ(child.Wait(milliseconds(20000)), 2);
  }
  {
    // Chunked prefill and the persistent prefix cache do not mix.
    Child child(ServeArgs({"--kv", "readkv", "--prefill-chunk", "64", "--cache-dir",
                           "/tmp/kvgate-serve-test-never-created"}));
    EXPECT_EQ(child.Wait(milliseconds(20000)), 2);
  }
}

TEST(ServeCommandTest, AMissingModelDirectoryFailsWithoutListening) {
  Child child({KVGATE_BINARY, "serve", "--model", "/nonexistent/model", "--port", "0"});
  EXPECT_EQ(child.ReadLine(milliseconds(20000)), "");
  EXPECT_EQ(child.Wait(milliseconds(20000)), 3);
}

}  // namespace
}  // namespace readkv::server
