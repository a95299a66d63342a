#pragma once

// kilnd's RESP front (--resp-listen): the cache as a Redis server to PyTorch Inductor's Redis
// remote caches and any RESP2 client. What commands mean is RespCommands' (resp_commands.h);
// a few event loops (server/net/event_loop.h) own the connections and parse their commands
// with a RespParser, and a ThreadPool does the disk work. A connection's commands are
// answered one at a time and in order, pipelined or not. A protocol error is answered with
// "-ERR Protocol error: ..." and closes the connection; every other error is a RESP error
// reply and the connection goes on. Idle connections stay open (as with Redis's default
// `timeout 0`): client libraries keep pools of them. Plaintext only: kilnd refuses a
// non-loopback address for it unless --insecure.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/cache.h"
#include "server/net/event_loop_server.h"
#include "server/observe/metrics.h"
#include "server/resp/resp_commands.h"
#include "server/resp/resp_parser.h"
#include "server/rpc/auth.h"
#include "server/shared_cache.h"

namespace kiln::server {

struct RespServerOptions {
  std::string address;  // "host:port"; port 0 picks one
  int loops = 2;        // event-loop threads
  int workers = 4;      // threads for disk work
  int max_connections = 4096;
  RespLimits limits;  // max_bulk_bytes: kilnd's --max-blob-bytes
  // Where kiln_resp_* metrics go (commands by command and outcome, connections); null: none.
  // Must outlive the server.
  MetricsRegistry* metrics = nullptr;
  // The shared tier GET and EXISTS read through and SET writes through (resp_commands.h);
  // null: none. Must outlive the server.
  SharedCache* shared = nullptr;
};

class RespServer {
 public:
  // Binds and starts serving. `cache` and `authorizer` must outlive the server.
  static absl::StatusOr<std::unique_ptr<RespServer>> Start(cache::Cache* cache,
                                                           const Authorizer* authorizer,
                                                           const RespServerOptions& options);
  ~RespServer();
  RespServer(const RespServer&) = delete;
  RespServer& operator=(const RespServer&) = delete;

  int port() const { return server_->port(); }
  // Stops accepting, closes every connection and waits for disk work in flight. Idempotent.
  void Stop();

 private:
  RespServer() = default;

  std::unique_ptr<RespCommands> commands_;
  std::unique_ptr<EventLoopServer> server_;  // last: stops before what it serves goes
};

}  // namespace kiln::server
