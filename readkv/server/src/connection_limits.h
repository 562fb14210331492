// The connection cap (internal): how many connections a server allows when the options leave it
// to the open-file limit, and how one over the cap is turned away (503 too_many_connections,
// Retry-After, then closed). RaiseOpenFileLimit, the public part, is declared in server.h.
#pragma once

#include <string>

#include "http_types.h"

namespace readkv::server::detail {

// The whole answer to a connection over the limit: 503 and close (built once, at Start).
std::string TooManyConnectionsResponse(int retry_after_seconds);

// max_connections when the options leave it to the open-file limit: the soft RLIMIT_NOFILE less
// kReservedDescriptors, at least 16.
int ConnectionLimitFromDescriptors();

// Turns `socket` away: `response` (which must outlive the connection) written, the sending side
// shut, what the client still sends read and dropped for kLingerTime (so the close does not
// reset the connection before the client read the answer), then closed.
void Refuse(tcp::socket socket, const std::string& response);

}  // namespace readkv::server::detail
