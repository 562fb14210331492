#include "readkv/server/server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "connection_limits.h"
#include "http_types.h"
#include "session.h"

namespace readkv::server {

namespace {

namespace beast = detail::beast;
namespace net = detail::net;
using detail::Clock;
using detail::ConnectionLimitFromDescriptors;
using detail::Refuse;
using detail::Session;
using detail::Shared;
using detail::tcp;
using detail::TooManyConnectionsResponse;

// How long Shutdown waits for the last bytes of in-flight responses after the engine stopped.
constexpr auto kFinalWriteWait = std::chrono::seconds(5);

}  // namespace

struct Server::Impl {
  Impl(engine::Engine& engine, const engine::Tokenizer& tokenizer, ServerOptions options)
      : shared(engine, tokenizer, std::move(options)) {}
  ~Impl() {
    if (reserve_fd >= 0) ::close(reserve_fd);
  }

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
          RefuseOneWithTheReserve();
        } else {
          WarnAcceptFailed(ec.message());
        }
        // Back off briefly instead of spinning on a condition that persists.
        auto timer = std::make_shared<net::steady_timer>(acceptor.get_executor(),
                                                         std::chrono::milliseconds(50));
        timer->async_wait([this, timer](beast::error_code) { Accept(); });
        return;
      }
      if (shared.connections.load() >= shared.max_connections) {
        shared.CountError("too_many_connections");
        Refuse(std::move(socket), too_many_response);
        return Accept();
      }
      // Each SSE chunk is one small write. With Nagle's algorithm a chunk written while the
      // previous segment is unacknowledged (the header just before the first chunk; the
      // terminating chunk right after [DONE]) waits for the client's delayed ACK, up to 40 ms on
      // Linux: the first token would reach the client that much after the engine produced it.
      beast::error_code nodelay_ec;  // a socket that refuses it still works, only slower
      socket.set_option(tcp::no_delay(true), nodelay_ec);
      std::make_shared<Session>(std::move(socket), shared)->Start();
      Accept();
    });
  }

  // Out of descriptors with a connection waiting: give the reserved descriptor up for a moment,
  // take the connection, answer it 503 and close it, and reserve again. The waiting client gets
  // an answer instead of a hang, and the backlog drains instead of failing 20 times a second.
  void RefuseOneWithTheReserve() {
    shared.CountError("too_many_connections");
    if (reserve_fd >= 0) {
      ::close(reserve_fd);
      reserve_fd = -1;
    }
    const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      // A fresh socket's send buffer takes the few hundred bytes at once.
      (void)!::send(fd, too_many_response.data(), too_many_response.size(),
                    MSG_DONTWAIT | MSG_NOSIGNAL);
      ::shutdown(fd, SHUT_WR);
      ::close(fd);
    }
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    WarnAcceptFailed("out of file descriptors (" + std::to_string(shared.connections.load()) +
                     " connections open); answered 503");
  }

  // At most one warning a second: a condition that persists must not flood the log.
  void WarnAcceptFailed(const std::string& what) {
    shared.CountError("accept_failed");
    const auto now = Clock::now();
    if (now - last_accept_warning < std::chrono::seconds(1)) return;
    last_accept_warning = now;
    spdlog::warn("accept failed: {}", what);
  }

  // Declared first so that it is destroyed last: sessions destroyed with `ioc` still touch it.
  Shared shared;
  std::string too_many_response;
  int reserve_fd = -1;
  Clock::time_point last_accept_warning{};
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::vector<std::thread> threads;
  uint16_t port = 0;
  std::string address;
  bool started = false;
  bool stopped = false;
};

Server::Server(engine::Engine& engine, const engine::Tokenizer& tokenizer, ServerOptions options) {
  if (options.threads < 1) throw std::invalid_argument("threads must be >= 1");
  if (options.max_body_bytes < 1) throw std::invalid_argument("max_body_bytes must be >= 1");
  if (options.max_header_bytes < 512)
    throw std::invalid_argument("max_header_bytes must be >= 512");
  if (options.idle_timeout.count() <= 0) throw std::invalid_argument("idle_timeout must be > 0");
  if (options.write_timeout.count() <= 0) throw std::invalid_argument("write_timeout must be > 0");
  if (options.retry_after_seconds < 0) {
    throw std::invalid_argument("retry_after_seconds must be >= 0");
  }
  if (options.max_connections < 0) throw std::invalid_argument("max_connections must be >= 0");
  impl_ = std::make_unique<Impl>(engine, tokenizer, std::move(options));
}

Server::~Server() { Shutdown(std::chrono::milliseconds(0)); }

void Server::Start() {
  Impl& impl = *impl_;
  if (impl.started) throw std::logic_error("Server::Start called twice");
  const ServerOptions& options = impl.shared.options;
  beast::error_code ec;
  tcp::endpoint endpoint;
  const auto address = net::ip::make_address(options.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, options.port);
  } else {
    tcp::resolver resolver(impl.ioc);
    const auto results = resolver.resolve(options.host, std::to_string(options.port), ec);
    if (ec || results.empty()) {
      throw std::runtime_error("host: cannot resolve \"" + options.host + "\": " + ec.message());
    }
    endpoint = results.begin()->endpoint();
  }
  impl.acceptor.open(endpoint.protocol());
  impl.acceptor.set_option(net::socket_base::reuse_address(true));
  impl.acceptor.bind(endpoint, ec);
  if (ec) {
    throw std::runtime_error("cannot bind " + options.host + ":" + std::to_string(options.port) +
                             ": " + ec.message());
  }
  impl.acceptor.listen(net::socket_base::max_listen_connections);
  impl.shared.max_connections = options.max_connections > 0 ? options.max_connections
                                                            : ConnectionLimitFromDescriptors();
  impl.too_many_response = TooManyConnectionsResponse(options.retry_after_seconds);
  impl.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const tcp::endpoint bound = impl.acceptor.local_endpoint();
  impl.port = bound.port();
  const std::string host = bound.address().to_string();
  impl.address = (bound.address().is_v6() ? "[" + host + "]" : host) + ":" +
                 std::to_string(impl.port);
  impl.started = true;
  impl.Accept();
  for (int i = 0; i < impl.shared.options.threads; ++i) {
    impl.threads.emplace_back([&impl] { impl.ioc.run(); });
  }
}

uint16_t Server::port() const { return impl_->port; }

int Server::max_connections() const { return impl_->shared.max_connections; }

std::string Server::address() const { return impl_->address; }

void Server::Shutdown(std::chrono::milliseconds grace) {
  Impl& impl = *impl_;
  if (impl.stopped) return;
  impl.stopped = true;
  if (impl.started) {
    net::post(impl.acceptor.get_executor(), [&impl] {
      beast::error_code ignored;
      impl.acceptor.close(ignored);
    });
  }
  Shared& shared = impl.shared;
  shared.engine.BeginDrain();
  shared.engine.Shutdown(grace);  // every accepted request has now had its last event
  {
    std::unique_lock<std::mutex> lock(shared.in_flight_mu);
    shared.in_flight_cv.wait_for(lock, kFinalWriteWait, [&] { return shared.in_flight == 0; });
  }
  impl.ioc.stop();
  for (std::thread& thread : impl.threads) thread.join();
  impl.threads.clear();
}

}  // namespace readkv::server
