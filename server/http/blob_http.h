#pragma once

// kilnd's HTTP/1.1 blob endpoint: the content-addressed store for any HTTP client (curl, a
// trainer's loader, caches that speak the `/cas/` convention), at a fraction of a gRPC
// call's cost per blob. What the requests mean is CasHandler's (cas_handler.h); a few event
// loops (server/net/event_loop.h) speaking HttpProtocol (http_protocol.h) own the connections
// and a ThreadPool does the disk work.
// Errors carry a one-line text body naming what is wrong. Connections are kept alive, a
// connection's requests are answered in order, and one idle past `idle_timeout` is closed.
// Plaintext only: kilnd refuses a non-loopback address for it unless --insecure.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/store.h"
#include "server/http/cas_handler.h"
#include "server/http/http_protocol.h"
#include "server/net/event_loop_server.h"
#include "server/observe/metrics.h"
#include "server/rpc/auth.h"
#include "server/shared_cache.h"

namespace kiln::server {

struct BlobHttpOptions {
  std::string address;  // "host:port"; port 0 picks one
  int loops = 2;        // event-loop threads
  int workers = 4;      // threads for disk work
  int64_t max_blob_bytes = int64_t{256} << 20;
  int max_connections = 4096;
  // A connection that neither sends nor takes a byte for this long while nothing is being
  // worked on for it is closed (idle keep-alive, a stalled head or body, an unread answer).
  absl::Duration idle_timeout = absl::Seconds(60);
  // Where kiln_blob_http_* metrics go (requests by method and code, latency, connections);
  // null: none. Must outlive the server.
  MetricsRegistry* metrics = nullptr;
  // The shared tier GETs read through and PUTs write through (cas_handler.h); null: none.
  // Must outlive the server.
  SharedCache* shared = nullptr;
};

class BlobHttpServer {
 public:
  // Binds and starts serving. `store` and `authorizer` must outlive the server.
  static absl::StatusOr<std::unique_ptr<BlobHttpServer>> Start(cache::Store* store,
                                                               const Authorizer* authorizer,
                                                               const BlobHttpOptions& options);
  ~BlobHttpServer();
  BlobHttpServer(const BlobHttpServer&) = delete;
  BlobHttpServer& operator=(const BlobHttpServer&) = delete;

  int port() const { return server_->port(); }
  // Stops accepting, closes every connection and waits for disk work in flight. Idempotent.
  void Stop();

 private:
  BlobHttpServer() = default;

  std::unique_ptr<HttpMetrics> metrics_;
  std::unique_ptr<CasHandler> handler_;
  std::unique_ptr<EventLoopServer> server_;  // last: stops before what it serves goes
};

}  // namespace kiln::server
