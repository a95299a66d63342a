#include "server/http/blob_http.h"

#include <utility>

namespace kiln::server {

absl::StatusOr<std::unique_ptr<BlobHttpServer>> BlobHttpServer::Start(
    cache::Store* store, const Authorizer* authorizer, const BlobHttpOptions& options) {
  absl::StatusOr<std::unique_ptr<EventLoopServer>> listening =
      EventLoopServer::Listen(options.address);
  if (!listening.ok()) return listening.status();
  std::unique_ptr<BlobHttpServer> server(new BlobHttpServer());
  server->server_ = *std::move(listening);
  if (options.metrics != nullptr) {
    server->metrics_ =
        std::make_unique<HttpMetrics>(*options.metrics, "kiln_blob_http", "the HTTP blob endpoint",
                                      std::vector<std::string>{"GET", "HEAD", "PUT"});
  }
  server->handler_ =
      std::make_unique<CasHandler>(store, authorizer, options.max_blob_bytes, options.shared);
  EventLoopServerOptions loops;
  loops.loops = options.loops;
  loops.workers = options.workers;
  loops.max_connections = options.max_connections;
  loops.idle_timeout = options.idle_timeout;
  loops.connections = server->metrics_ != nullptr ? &server->metrics_->connections() : nullptr;
  absl::Status started = server->server_->Start(loops, [&server]() -> std::unique_ptr<Protocol> {
    return std::make_unique<HttpProtocol>(server->handler_.get(), server->metrics_.get());
  });
  if (!started.ok()) return started;
  return server;
}

BlobHttpServer::~BlobHttpServer() { Stop(); }

void BlobHttpServer::Stop() { server_->Stop(); }

}  // namespace kiln::server
