#include "server/http/blob_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/base/host_port.h"

namespace kiln::server {
namespace {

absl::StatusOr<int> Listen(const std::string& address) {
  absl::string_view host_part, port_part;
  if (!SplitHostPort(address, &host_part, &port_part)) {
    return absl::InvalidArgumentError(absl::StrCat("address `", address, "` is not host:port"));
  }
  const std::string host(host_part), port(port_part);
  int port_number = -1;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address `", address, "`: the port must be a number from 0 to 65535"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve `", address, "`: ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 512) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", why));
  }
  return fd;
}

int PortOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BlobHttpServer>> BlobHttpServer::Start(
    cache::Store* store, const Authorizer* authorizer, const BlobHttpOptions& options) {
  absl::StatusOr<int> fd = Listen(options.address);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<BlobHttpServer> server(new BlobHttpServer());
  server->listen_fd_ = *fd;
  server->port_ = PortOf(*fd);
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
