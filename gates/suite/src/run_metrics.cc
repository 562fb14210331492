#include "kvgate/suite/run_metrics.h"

#include <prometheus/text_serializer.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <thread>
#include <utility>

namespace kvgate::suite {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::array<std::string_view, 3> kGateResults = {"pass", "fail", "inconclusive"};
constexpr std::array<std::string_view, 3> kVerdicts = {"go", "no_go", "inconclusive"};
// The exposition format Prometheus and the Pushgateway expect for text.
constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string RequireLabel(std::string_view value, const char* what) {
  if (value.empty()) throw std::invalid_argument(std::string("RunMetrics: empty ") + what);
  return std::string(value);
}

template <size_t N>
void RequireOneOf(std::string_view value, const std::array<std::string_view, N>& allowed,
                  const char* what) {
  for (std::string_view a : allowed) {
    if (value == a) return;
  }
  std::string message =
      std::string("RunMetrics: ") + what + " '" + std::string(value) + "' is not one of";
  for (std::string_view a : allowed) message += " " + std::string(a);
  throw std::invalid_argument(message);
}

struct ParsedUrl {
  std::string host;
  std::string port;
  std::string prefix;  // path without a trailing '/', may be empty
};

ParsedUrl ParseHttpUrl(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    throw std::invalid_argument("pushgateway url '" + url + "': must start with http://");
  }
  const std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  ParsedUrl parsed;
  if (slash != std::string::npos) parsed.prefix = rest.substr(slash);
  while (!parsed.prefix.empty() && parsed.prefix.back() == '/') parsed.prefix.pop_back();
  const size_t colon = authority.rfind(':');
  if (colon == std::string::npos) {
    parsed.host = authority;
    parsed.port = "80";
  } else {
    parsed.host = authority.substr(0, colon);
    parsed.port = authority.substr(colon + 1);
  }
  if (parsed.host.empty()) {
    throw std::invalid_argument("pushgateway url '" + url + "': no host");
  }
  if (parsed.port.empty() || parsed.port.size() > 5 ||
      parsed.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(parsed.port) < 1 || std::stoi(parsed.port) > 65535) {
    throw std::invalid_argument("pushgateway url '" + url + "': bad port '" + parsed.port + "'");
  }
  return parsed;
}

// The Pushgateway takes label values in the path; a job name that needs escaping would need
// its base64 form, which no caller needs, so such names are refused instead.
void CheckJobName(const std::string& job) {
  if (job.empty() || job.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789_-.") != std::string::npos) {
    throw std::invalid_argument("pushgateway job '" + job +
                                "': use letters, digits, '_', '-' or '.' only");
  }
}

// One scrape connection: read a request, answer it, close. Short-lived, so no keep-alive.
class ScrapeSession : public std::enable_shared_from_this<ScrapeSession> {
 public:
  ScrapeSession(tcp::socket socket, const RunMetrics& metrics)
      : stream_(std::move(socket)), metrics_(metrics) {}

  void Start() {
    stream_.expires_after(std::chrono::seconds(10));
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (!ec) self->Answer();
                     });
  }

 private:
  void Answer() {
    response_.version(request_.version());
    response_.keep_alive(false);
    const bool is_get =
        request_.method() == http::verb::get || request_.method() == http::verb::head;
    const beast::string_view target = request_.target();
    const beast::string_view path = target.substr(0, target.find('?'));
    if (!is_get) {
      response_.result(http::status::method_not_allowed);
      response_.set(http::field::allow, "GET, HEAD");
      response_.set(http::field::content_type, "text/plain");
      response_.body() = "only GET\n";
    } else if (path == "/metrics" || path == "/") {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, kTextContentType);
      if (request_.method() == http::verb::get) response_.body() = metrics_.Text();
    } else {
      response_.result(http::status::not_found);
      response_.set(http::field::content_type, "text/plain");
      response_.body() = "not found; try /metrics\n";
    }
    response_.prepare_payload();
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    });
  }

  beast::tcp_stream stream_;
  const RunMetrics& metrics_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
};

}  // namespace

// The --metrics-port listener: one io_context thread; sessions hold only a reference to the
// RunMetrics, which outlives them because StopServing() joins the thread first.
class RunMetrics::Listener {
 public:
  Listener(const RunMetrics& metrics, int port)
      : metrics_(metrics), acceptor_(io_), work_(asio::make_work_guard(io_)) {
    const tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"),
                                 static_cast<unsigned short>(port));
    beast::error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw std::runtime_error("metrics listener: cannot listen on 127.0.0.1:" +
                               std::to_string(port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Listener() {
    asio::post(io_, [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    work_.reset();
    io_.stop();
    thread_.join();
  }

  int port() const { return port_; }

 private:
  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      } else {
        std::make_shared<ScrapeSession>(std::move(socket), metrics_)->Start();
      }
      Accept();
    });
  }

  const RunMetrics& metrics_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  int port_ = 0;
};

RunMetrics::RunMetrics(std::string run_id) : registry_(std::make_shared<prometheus::Registry>()) {
  info_ = &prometheus::BuildGauge()
               .Name("kvgate_run_info")
               .Help("1 for the kvgate run this process executes, labelled with its run id.")
               .Register(*registry_);
  if (!run_id.empty()) SetRunId(run_id);
  phase_ = &prometheus::BuildGauge()
                .Name("kvgate_run_phase")
                .Help("1 for the run's current phase, 0 for the phases it has left.")
                .Register(*registry_);
  requests_done_ = &prometheus::BuildCounter()
                        .Name("kvgate_run_requests_done_total")
                        .Help("Load requests finished so far, by server (baseline|candidate).")
                        .Register(*registry_);
  gate_result_ = &prometheus::BuildGauge()
                      .Name("kvgate_gate_result")
                      .Help("1 for the gate's decided result (pass|fail|inconclusive), else 0.")
                      .Register(*registry_);
  gate_observed_ = &prometheus::BuildGauge()
                        .Name("kvgate_gate_observed")
                        .Help("The value a gate measured, in the gate's own unit.")
                        .Register(*registry_);
  gate_threshold_ = &prometheus::BuildGauge()
                         .Name("kvgate_gate_threshold")
                         .Help("The threshold a gate compares against, in the gate's own unit.")
                         .Register(*registry_);
  verdict_ = &prometheus::BuildGauge()
                  .Name("kvgate_run_verdict")
                  .Help("1 for the run's verdict (go|no_go|inconclusive) once decided, else 0.")
                  .Register(*registry_);
  // Both servers from the start, so a progress panel shows 0 rather than nothing.
  requests_done_->Add({{"server", "baseline"}});
  requests_done_->Add({{"server", "candidate"}});
}

RunMetrics::~RunMetrics() { StopServing(); }

void RunMetrics::SetRunId(std::string_view run_id) {
  std::string id = RequireLabel(run_id, "run id");
  std::lock_guard<std::mutex> lock(mu_);
  if (!run_id_.empty()) info_->Remove(&info_->Add({{"run_id", run_id_}}));
  info_->Add({{"run_id", id}}).Set(1.0);
  run_id_ = std::move(id);
}

void RunMetrics::SetPhase(std::string_view phase) {
  std::string name = RequireLabel(phase, "phase");
  std::lock_guard<std::mutex> lock(mu_);
  bool known = false;
  for (const std::string& p : phases_) {
    phase_->Add({{"phase", p}}).Set(p == name ? 1.0 : 0.0);
    known |= p == name;
  }
  if (!known) {
    phase_->Add({{"phase", name}}).Set(1.0);
    phases_.push_back(std::move(name));
  }
}

void RunMetrics::AddRequestsDone(std::string_view server, int64_t requests) {
  if (requests < 0) throw std::invalid_argument("RunMetrics: negative requests done");
  requests_done_->Add({{"server", RequireLabel(server, "server")}})
      .Increment(static_cast<double>(requests));
}

void RunMetrics::SetGateResult(std::string_view gate, std::string_view result, double observed,
                               double threshold) {
  const std::string name = RequireLabel(gate, "gate");
  RequireOneOf(result, kGateResults, "gate result");
  std::lock_guard<std::mutex> lock(mu_);
  for (std::string_view r : kGateResults) {
    gate_result_->Add({{"gate", name}, {"result", std::string(r)}}).Set(r == result ? 1.0 : 0.0);
  }
  gate_observed_->Add({{"gate", name}}).Set(observed);
  gate_threshold_->Add({{"gate", name}}).Set(threshold);
}

void RunMetrics::SetVerdict(std::string_view verdict) {
  RequireOneOf(verdict, kVerdicts, "verdict");
  std::lock_guard<std::mutex> lock(mu_);
  for (std::string_view v : kVerdicts) {
    verdict_->Add({{"verdict", std::string(v)}}).Set(v == verdict ? 1.0 : 0.0);
  }
}

std::vector<prometheus::MetricFamily> RunMetrics::Collect() const {
  // Under mu_ so a scrape never sees two phases (or two results of one gate) at 1.
  std::lock_guard<std::mutex> lock(mu_);
  return registry_->Collect();
}

std::string RunMetrics::Text() const { return prometheus::TextSerializer().Serialize(Collect()); }

int RunMetrics::Serve(int port) {
  if (port < 0 || port > 65535) {
    throw std::invalid_argument("RunMetrics: metrics port " + std::to_string(port) +
                                " is not in 0..65535");
  }
  if (listener_) throw std::logic_error("RunMetrics: already serving");
  listener_ = std::make_unique<Listener>(*this, port);
  return listener_->port();
}

void RunMetrics::StopServing() { listener_.reset(); }

void RunMetrics::PushToGateway(const std::string& url, const std::string& job,
                               std::chrono::milliseconds timeout) const {
  const ParsedUrl parsed = ParseHttpUrl(url);
  CheckJobName(job);

  http::request<http::string_body> request(http::verb::put, parsed.prefix + "/metrics/job/" + job,
                                           11);
  request.set(http::field::host, parsed.host + ":" + parsed.port);
  request.set(http::field::content_type, kTextContentType);
  request.keep_alive(false);
  request.body() = Text();
  request.prepare_payload();

  // Asynchronous operations on a private io_context, so one deadline bounds resolve, connect,
  // write and read alike (a synchronous connect to a dead host could hang for minutes).
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  beast::error_code failure;
  std::string stage = "resolve";
  bool done = false;

  auto fail = [&](const char* at, beast::error_code ec) {
    stage = at;
    failure = ec;
  };
  resolver.async_resolve(
      parsed.host, parsed.port, [&](beast::error_code ec, tcp::resolver::results_type results) {
        if (ec) return fail("resolve", ec);
        stream.expires_after(timeout);
        stream.async_connect(results, [&](beast::error_code ec2, const tcp::endpoint&) {
          if (ec2) return fail("connect", ec2);
          http::async_write(stream, request, [&](beast::error_code ec3, size_t) {
            if (ec3) return fail("send", ec3);
            http::async_read(stream, buffer, response, [&](beast::error_code ec4, size_t) {
              if (ec4) return fail("read the answer", ec4);
              done = true;
            });
          });
        });
      });
  io.run_for(timeout + std::chrono::milliseconds(100));

  const std::string where = "push to " + url + " (job " + job + ")";
  if (!done) {
    const std::string why = failure ? failure.message() : std::string("timed out");
    throw PushError(where + ": could not " + stage + ": " + why);
  }
  if (response.result_int() / 100 != 2) {
    throw PushError(where + ": HTTP " + std::to_string(response.result_int()) + ": " +
                    response.body().substr(0, 200));
  }
}

}  // namespace kvgate::suite
