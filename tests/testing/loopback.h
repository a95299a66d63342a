#pragma once

// Plain TCP sockets on 127.0.0.1, for tests and benchmarks that speak a protocol by hand.

namespace kiln::testing {

// A blocking socket connected to 127.0.0.1:`port` with TCP_NODELAY; -1 when it cannot connect.
int ConnectLoopback(int port);

// A port on 127.0.0.1 that was free a moment ago and that this process has not been given
// before, picked at random below the range the kernel hands to listeners on port 0, so that
// no other test's such listener takes it before its test binds it.
int FreeLoopbackPort();

}  // namespace kiln::testing
