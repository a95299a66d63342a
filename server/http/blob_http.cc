#include "server/http/blob_http.h"

#include <unistd.h>

#include <algorithm>

#include "server/http/tcp_listener.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<BlobHttpServer>> BlobHttpServer::Start(
    cache::Store* store, const Authorizer* authorizer, const BlobHttpOptions& options) {
  absl::StatusOr<int> fd = ListenTcp(options.address);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<BlobHttpServer> server(new BlobHttpServer());
  server->listen_fd_ = *fd;
  server->port_ = BoundPort(*fd);
  if (options.metrics != nullptr) {
    server->metrics_ =
        std::make_unique<HttpMetrics>(*options.metrics, "kiln_blob_http", "the HTTP blob endpoint",
                                      std::vector<std::string>{"GET", "HEAD", "PUT"});
  }
  server->handler_ = std::make_unique<CasHandler>(store, authorizer, options.max_blob_bytes);
  ThreadPoolOptions workers;
  workers.workers = std::max(1, options.workers);
  // Each connection has at most one task queued or running, so the bound is never reached;
  // it makes the pool's size a stated limit rather than an accident of the loops.
  workers.queue_capacity = options.max_connections;
  server->workers_ = std::make_unique<ThreadPool>(workers);
  const int loops = std::max(1, options.loops);
  HttpEventLoopOptions loop_options;
  loop_options.max_connections = static_cast<size_t>(std::max(1, options.max_connections / loops));
  loop_options.idle_timeout = options.idle_timeout;
  for (int i = 0; i < loops; ++i) {
    server->loops_.push_back(std::make_unique<HttpEventLoop>(
        *fd, server->handler_.get(), server->workers_.get(), server->metrics_.get(), loop_options));
    if (absl::Status s = server->loops_.back()->Start(); !s.ok()) return s;
  }
  return server;
}

BlobHttpServer::~BlobHttpServer() { Stop(); }

void BlobHttpServer::Stop() {
  for (auto& loop : loops_) loop->Stop();
  // Disk work in flight finishes; its replies go to loops that no longer read their mail.
  if (workers_ != nullptr) workers_->Shutdown();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

}  // namespace kiln::server
