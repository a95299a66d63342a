#include "server/net/event_loop_server.h"

#include <unistd.h>

#include <algorithm>

#include "server/net/tcp_listener.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<EventLoopServer>> EventLoopServer::Listen(
    const std::string& address) {
  absl::StatusOr<int> fd = ListenTcp(address);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<EventLoopServer> server(new EventLoopServer());
  server->listen_fd_ = *fd;
  server->port_ = BoundPort(*fd);
  return server;
}

absl::Status EventLoopServer::Start(const EventLoopServerOptions& options,
                                    absl::FunctionRef<std::unique_ptr<Protocol>()> new_protocol) {
  ThreadPoolOptions workers;
  workers.workers = std::max(1, options.workers);
  // Each connection has at most one task queued or running, so the bound is never reached;
  // it makes the pool's size a stated limit rather than an accident of the loops.
  workers.queue_capacity = options.max_connections;
  workers_ = std::make_unique<ThreadPool>(workers);
  const int loops = std::max(1, options.loops);
  EventLoopOptions loop_options;
  loop_options.max_connections = static_cast<size_t>(std::max(1, options.max_connections / loops));
  loop_options.idle_timeout = options.idle_timeout;
  loop_options.refusal = options.refusal;
  for (int i = 0; i < loops; ++i) {
    loops_.push_back(std::make_unique<EventLoop>(listen_fd_, new_protocol(), workers_.get(),
                                                 options.connections, loop_options));
    if (absl::Status s = loops_.back()->Start(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

EventLoopServer::~EventLoopServer() { Stop(); }

void EventLoopServer::Stop() {
  for (auto& loop : loops_) loop->Stop();
  // Work in flight finishes; what it returns goes to loops that no longer read their mail.
  if (workers_ != nullptr) workers_->Shutdown();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

}  // namespace kiln::server
