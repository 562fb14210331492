// The connection cap: the limit from the open-file limit, and connections over it turned away.
#include "connection_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <memory>
#include <utility>

#include "readkv/server/api_error.h"
#include "readkv/server/server.h"

namespace readkv::server {
namespace detail {
namespace {

// A connection turned away: the 503 written, the sending side shut, what the client still sends
// read and dropped for a moment (so the close does not reset the connection before the client
// read the answer), then closed.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  Refusal(tcp::socket socket, const std::string& response)
      : stream_(std::move(socket)), response_(response) {}
  void Start() {
    stream_.expires_after(kLingerTime);
    net::async_write(stream_, net::buffer(response_),
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec) return self->Close();
                       beast::error_code ignored;
                       self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                       self->Discard();
                     });
  }

 private:
  void Discard() {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) return self->Close();
                              self->Discard();
                            });
  }
  void Close() {
    beast::error_code ignored;
    stream_.socket().close(ignored);
  }
  beast::tcp_stream stream_;
  const std::string& response_;
  std::array<char, 1024> scratch_{};
};

}  // namespace

std::string TooManyConnectionsResponse(int retry_after_seconds) {
  const std::string body =
      ApiError(503, "too_many_connections",
               "the server has as many open connections as it allows; close idle ones or retry "
               "after " +
                   std::to_string(retry_after_seconds) + " s")
          .Body();
  return "HTTP/1.1 503 Service Unavailable\r\nServer: kvgate\r\nContent-Type: application/json\r\n"
         "Retry-After: " +
         std::to_string(retry_after_seconds) + "\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

int ConnectionLimitFromDescriptors() {
  rlimit limit{};
  long soft = 1024;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    soft = limit.rlim_cur == RLIM_INFINITY ? 1L << 20 : static_cast<long>(limit.rlim_cur);
  }
  return static_cast<int>(std::max<long>(16, std::min<long>(soft, 1L << 20) -
                                                 kReservedDescriptors));
}

void Refuse(tcp::socket socket, const std::string& response) {
  std::make_shared<Refusal>(std::move(socket), response)->Start();
}

}  // namespace detail

long RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  const rlim_t cap = rlim_t{1} << 20;
  const rlim_t want = limit.rlim_max == RLIM_INFINITY ? cap : std::min(limit.rlim_max, cap);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < want) {
    rlimit raised = limit;
    raised.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? static_cast<long>(cap)
                                         : static_cast<long>(limit.rlim_cur);
}

}  // namespace readkv::server
