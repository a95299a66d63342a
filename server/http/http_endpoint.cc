#include "server/http/http_endpoint.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "proto/base/host_port.h"

namespace kiln::server {

HttpEndpoint::HttpEndpoint() : server_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& address) {
  absl::string_view host_part, port_part;
  int port = -1;
  if (!SplitHostPort(address, &host_part, &port_part) || !absl::SimpleAtoi(port_part, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("address `", address, "` is not host:port"));
  }
  const std::string host(host_part);
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint());
  endpoint->port_ = port == 0 ? endpoint->server_->bind_to_any_port(host)
                              : (endpoint->server_->bind_to_port(host, port) ? port : -1);
  if (endpoint->port_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " for HTTP (address in use or not local)"));
  }
  endpoint->thread_ =
      std::thread([server = endpoint->server_.get()] { server->listen_after_bind(); });
  return endpoint;
}

void HttpEndpoint::Handle(const std::string& path, Handler handler) {
  server_->Get(path,
               [handler = std::move(handler)](const httplib::Request&, httplib::Response& res) {
                 Response r = handler();
                 res.status = r.status;
                 res.set_content(r.body, r.content_type);
               });
}

void HttpEndpoint::Stop() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

}  // namespace kiln::server
