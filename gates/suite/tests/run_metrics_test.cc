#include "kvgate/suite/run_metrics.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kvgate::suite {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// A plain GET on 127.0.0.1; status 0 when nothing answered.
HttpAnswer Get(int port, const std::string& target) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  stream.expires_after(std::chrono::seconds(5));
  stream.socket().connect(
      tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)), ec);
  if (ec) return {};
  http::request<http::empty_body> request(http::verb::get, target, 11);
  request.set(http::field::host, "127.0.0.1");
  http::write(stream, request, ec);
  if (ec) return {};
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response, ec);
  if (ec) return {};
  return {static_cast<int>(response.result_int()), response.body()};
}

int FreePort() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(RunMetricsTest, ExactlyOnePhaseIsCurrent) {
  RunMetrics metrics("run-1");
  metrics.SetPhase("quality");
  metrics.SetPhase("load");
  const std::string text = metrics.Text();
  EXPECT_TRUE(Contains(text, "kvgate_run_phase{phase=\"quality\"} 0")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_run_phase{phase=\"load\"} 1")) << text;
  metrics.SetPhase("quality");  // going back is allowed and flips both
  const std::string again = metrics.Text();
  EXPECT_TRUE(Contains(again, "kvgate_run_phase{phase=\"quality\"} 1")) << again;
  EXPECT_TRUE(Contains(again, "kvgate_run_phase{phase=\"load\"} 0")) << again;
}

TEST(RunMetricsTest, ExportsRunIdRequestsAndGateResultsWithValues) {
  RunMetrics metrics("20261129-abc");
  metrics.AddRequestsDone("baseline", 3);
  metrics.AddRequestsDone("candidate");
  metrics.SetGateResult("p99", "fail", 1.08, 1.05);
  metrics.SetGateResult("p99", "pass", 1.01, 1.05);  // a later decision replaces the first
  metrics.SetVerdict("go");
  const std::string text = metrics.Text();
  EXPECT_TRUE(Contains(text, "kvgate_run_info{run_id=\"20261129-abc\"} 1")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_run_requests_done_total{server=\"baseline\"} 3")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_run_requests_done_total{server=\"candidate\"} 1")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_gate_result{gate=\"p99\",result=\"pass\"} 1")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_gate_result{gate=\"p99\",result=\"fail\"} 0")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_gate_result{gate=\"p99\",result=\"inconclusive\"} 0")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_gate_observed{gate=\"p99\"} 1.01")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_gate_threshold{gate=\"p99\"} 1.05")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_run_verdict{verdict=\"go\"} 1")) << text;
  EXPECT_TRUE(Contains(text, "kvgate_run_verdict{verdict=\"no_go\"} 0")) << text;
}

TEST(RunMetricsTest, RunIdCanComeLaterAndIsReplacedNotAdded) {
  RunMetrics metrics;
  EXPECT_EQ(metrics.Text().find("kvgate_run_info{"), std::string::npos);
  metrics.SetRunId("17");
  metrics.SetRunId("18");
  const std::string text = metrics.Text();
  EXPECT_TRUE(Contains(text, "kvgate_run_info{run_id=\"18\"} 1")) << text;
  EXPECT_FALSE(Contains(text, "run_id=\"17\"")) << text;
}

TEST(RunMetricsTest, RefusesUnknownResultsAndEmptyLabels) {
  RunMetrics metrics("run");
  EXPECT_THROW(metrics.SetRunId(""), std::invalid_argument);
  EXPECT_THROW(metrics.SetGateResult("qa_f1", "passed", 0.0, 1.0), std::invalid_argument);
  EXPECT_THROW(metrics.SetGateResult("", "pass", 0.0, 1.0), std::invalid_argument);
  EXPECT_THROW(metrics.SetVerdict("GO"), std::invalid_argument);
  EXPECT_THROW(metrics.SetPhase(""), std::invalid_argument);
  EXPECT_THROW(metrics.AddRequestsDone("baseline", -1), std::invalid_argument);
  EXPECT_THROW(metrics.Serve(70000), std::invalid_argument);
}

TEST(RunMetricsTest, ServesTheTextFormatOnLoopback) {
  RunMetrics metrics("served-run");
  metrics.SetPhase("load");
  const int port = metrics.Serve(0);
  ASSERT_GT(port, 0);
  EXPECT_THROW(metrics.Serve(0), std::logic_error);

  const HttpAnswer scrape = Get(port, "/metrics");
  EXPECT_EQ(scrape.status, 200);
  EXPECT_TRUE(Contains(scrape.body, "# TYPE kvgate_run_phase gauge")) << scrape.body;
  EXPECT_TRUE(Contains(scrape.body, "kvgate_run_info{run_id=\"served-run\"} 1")) << scrape.body;
  metrics.AddRequestsDone("candidate", 7);  // a later scrape sees later progress
  EXPECT_TRUE(Contains(Get(port, "/metrics").body,
                       "kvgate_run_requests_done_total{server=\"candidate\"} 7"));
  EXPECT_EQ(Get(port, "/nothing-here").status, 404);

  metrics.StopServing();
  EXPECT_EQ(Get(port, "/metrics").status, 0);  // nobody listens any more
}

TEST(RunMetricsTest, PortInUseIsAClearError) {
  RunMetrics first("a");
  const int port = first.Serve(0);
  RunMetrics second("b");
  try {
    second.Serve(port);
    FAIL() << "bound a port that is in use";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(Contains(e.what(), std::to_string(port))) << e.what();
  }
}

TEST(RunMetricsTest, PushRejectsBadUrlsAndJobs) {
  RunMetrics metrics("run");
  EXPECT_THROW(metrics.PushToGateway("https://127.0.0.1:9091", "kvgate"), std::invalid_argument);
  EXPECT_THROW(metrics.PushToGateway("127.0.0.1:9091", "kvgate"), std::invalid_argument);
  EXPECT_THROW(metrics.PushToGateway("http://:9091", "kvgate"), std::invalid_argument);
  EXPECT_THROW(metrics.PushToGateway("http://127.0.0.1:99999", "kvgate"), std::invalid_argument);
  EXPECT_THROW(metrics.PushToGateway("http://127.0.0.1:9091", "a/b"), std::invalid_argument);
  EXPECT_THROW(metrics.PushToGateway("http://127.0.0.1:9091", ""), std::invalid_argument);
}

TEST(RunMetricsTest, PushToAClosedPortOrARefusingServerThrowsPushError) {
  RunMetrics metrics("run");
  const int closed = FreePort();
  EXPECT_THROW(metrics.PushToGateway("http://127.0.0.1:" + std::to_string(closed), "kvgate",
                                     std::chrono::milliseconds(2000)),
               PushError);
  // Our own listener answers PUT with 405: a non-2xx answer is a failed push, with the status.
  RunMetrics other("other");
  const int port = other.Serve(0);
  try {
    metrics.PushToGateway("http://127.0.0.1:" + std::to_string(port), "kvgate");
    FAIL() << "a 405 counted as a successful push";
  } catch (const PushError& e) {
    EXPECT_TRUE(Contains(e.what(), "HTTP 405")) << e.what();
  }
}

// The real Pushgateway (Debian: prometheus-pushgateway), started on a free loopback port.
class Pushgateway {
 public:
  static std::string Binary() {
    for (const char* path : {"/usr/bin/prometheus-pushgateway", "/usr/local/bin/pushgateway",
                             "/usr/bin/pushgateway"}) {
      if (std::filesystem::exists(path)) return path;
    }
    return "";
  }

  explicit Pushgateway(const std::string& binary) : port_(FreePort()) {
    const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = {binary, listen, "--log.level=warn"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, binary.c_str(), nullptr, nullptr, argv.data(), environ) != 0) pid_ = 0;
    // Ready within 10 s or the test fails on the push; bounded, not timed.
    for (int i = 0; i < 200 && pid_ > 0; ++i) {
      if (Get(port_, "/-/ready").status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Pushgateway() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  Pushgateway(const Pushgateway&) = delete;
  Pushgateway& operator=(const Pushgateway&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int port_;
  pid_t pid_ = 0;
};

TEST(RunMetricsTest, PushedGateResultsAppearOnTheRealPushgateway) {
  const std::string binary = Pushgateway::Binary();
  if (binary.empty()) GTEST_SKIP() << "prometheus-pushgateway is not installed";
  Pushgateway gateway(binary);

  RunMetrics metrics("run-42");
  metrics.SetPhase("done");
  metrics.SetGateResult("goodput", "inconclusive", 1.07, 1.10);
  metrics.SetVerdict("inconclusive");
  ASSERT_NO_THROW(metrics.PushToGateway(gateway.url(), "kvgate_run"));

  const HttpAnswer scraped = Get(gateway.port(), "/metrics");
  ASSERT_EQ(scraped.status, 200);
  // The Pushgateway adds the grouping label job and keeps our labels and values.
  EXPECT_TRUE(Contains(scraped.body,
                       "kvgate_gate_result{gate=\"goodput\",instance=\"\",job=\"kvgate_run\","
                       "result=\"inconclusive\"} 1"))
      << scraped.body;
  EXPECT_TRUE(Contains(scraped.body,
                       "kvgate_run_info{instance=\"\",job=\"kvgate_run\","
                       "run_id=\"run-42\"} 1"))
      << scraped.body;

  // A second push of the same job replaces the first (PUT semantics): the old run id is gone.
  RunMetrics next("run-43");
  ASSERT_NO_THROW(next.PushToGateway(gateway.url() + "/", "kvgate_run"));
  const std::string after = Get(gateway.port(), "/metrics").body;
  EXPECT_TRUE(Contains(after, "run_id=\"run-43\"")) << after;
  EXPECT_FALSE(Contains(after, "run_id=\"run-42\"")) << after;
}

}  // namespace
}  // namespace kvgate::suite
