#include "server/http_endpoint.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace kiln::server {

HttpEndpoint::HttpEndpoint() : server_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& address) {
  size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const int port = std::stoi(address.substr(colon + 1));
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
