// The names the server's sources share (internal): Beast/Asio aliases, the clock, how long a
// closing connection lingers, and the JSON writer every answer goes through.
#pragma once

// <utility> first: Boost.Asio's awaitable.hpp uses std::exchange without including it.
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace readkv::server::detail {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// After a framing error the rest of the client's bytes are read and dropped for this long (and
// at most this much) before closing, so that the close does not reset the connection before the
// client has read our error response.
inline constexpr auto kLingerTime = std::chrono::seconds(1);
inline constexpr size_t kLingerBytes = size_t{8} << 20;

inline std::string Dump(const json& value) {
  // Generated text is valid UTF-8 by construction; `replace` guards the rest (echoed input).
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace readkv::server::detail
