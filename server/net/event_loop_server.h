#pragma once

// A TCP server made of a few EventLoops (event_loop.h) on one listening socket and a
// ThreadPool for the work they offload: what kilnd's HTTP blob endpoint and RESP front are
// made of, each with its own Protocol.

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/base/thread_pool.h"
#include "server/net/event_loop.h"
#include "server/observe/metrics.h"

namespace kiln::server {

struct EventLoopServerOptions {
  int loops = 2;                                           // event-loop threads
  int workers = 4;                                         // threads for offloaded work
  int max_connections = 4096;                              // shared out evenly between the loops
  absl::Duration idle_timeout = absl::InfiniteDuration();  // as EventLoopOptions
  std::string refusal;                                     // as EventLoopOptions
  Gauge* connections = nullptr;  // open connections; null: none. Must outlive the server.
};

class EventLoopServer {
 public:
  // Binds `address` ("host:port"; port 0 picks one), with ListenTcp's errors.
  static absl::StatusOr<std::unique_ptr<EventLoopServer>> Listen(const std::string& address);
  // Starts the loops, each serving the Protocol `new_protocol` makes for it (called here, once
  // per loop); INTERNAL when a loop cannot start. Once only.
  absl::Status Start(const EventLoopServerOptions& options,
                     absl::FunctionRef<std::unique_ptr<Protocol>()> new_protocol);
  ~EventLoopServer();  // Stop()
  EventLoopServer(const EventLoopServer&) = delete;
  EventLoopServer& operator=(const EventLoopServer&) = delete;

  int port() const { return port_; }
  // Stops accepting, closes every connection and waits for work in flight. Idempotent.
  void Stop();

 private:
  EventLoopServer() = default;

  int port_ = 0;
  int listen_fd_ = -1;
  std::unique_ptr<ThreadPool> workers_;
  std::vector<std::unique_ptr<EventLoop>> loops_;
};

}  // namespace kiln::server
