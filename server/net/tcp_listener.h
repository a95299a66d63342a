#pragma once

// The listening sockets of kilnd's own event-loop servers (the HTTP blob endpoint, the RESP
// front).

#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

// A non-blocking listening TCP socket bound to `address` ("host:port", "[v6]:port"; port 0
// picks one). INVALID_ARGUMENT for an address that is malformed or does not resolve,
// UNAVAILABLE when it cannot be bound. The caller closes it.
absl::StatusOr<int> ListenTcp(const std::string& address);

// The port a bound socket listens on.
int BoundPort(int fd);

}  // namespace kiln::server
